package node

import (
	"encoding/json"
	"net/http"
	"time"
)

// DebugPath is where DebugHandler is served on the agent's HTTP server.
const DebugPath = "/debug/nodestatus"

// Report is the JSON answer of GET /debug/nodestatus: the agent's build and start, and the Status
// of each Node it keeps (one for the agent, N for the simulation). Extra holds sections added by
// other components (e.g. problem monitors, the client certificate), keyed by name.
type Report struct {
	Version   string    `json:"version"`
	StartedAt time.Time `json:"startedAt"`
	Nodes     []Status  `json:"nodes"`
	// Notes are facts about the configuration an operator should know, one sentence each (e.g. that
	// capacity.pods is 0 because nodeagent runs no pods).
	Notes []string       `json:"notes,omitempty"`
	Extra map[string]any `json:"extra,omitempty"`
}

// DebugHandler serves report() as indented JSON on GET; other methods get 405.
func DebugHandler(report func() Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report())
	})
}
