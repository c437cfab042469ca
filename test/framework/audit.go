package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event (one line of ControlPlane.AuditLogPath) that tells
// who made which request.
type AuditEvent struct {
	// Stage is "ResponseComplete" (one per request), "ResponseStarted" (watches, before they end) or "Panic".
	Stage string `json:"stage"`
	// Verb is the Kubernetes verb: get, list, watch, create, update, patch, delete, ...
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// ReadAuditEvents parses the JSON-lines audit log at path (a trailing partly written line is ignored). To count a node's API requests, keep events
// with Stage "ResponseComplete" and User.Username "system:node:<name>".
func ReadAuditEvents(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	var events []AuditEvent
	var bad error // a line that does not parse is an error unless it is the last (still being written)
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for s.Scan() {
		if bad != nil {
			return nil, bad
		}
		var e AuditEvent
		if err := json.Unmarshal(s.Bytes(), &e); err != nil {
			bad = fmt.Errorf("parse audit log %s: %w", path, err)
			continue
		}
		events = append(events, e)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read audit log %s: %w", path, err)
	}
	return events, nil
}
