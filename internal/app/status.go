package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nodeagent/nodeagent/pkg/config"
	"github.com/nodeagent/nodeagent/pkg/node"
)

// newStatusCommand returns `nodeagent status`: it reads /debug/nodestatus and /healthz?verbose from
// the local agent and prints whether each Node is Ready and why not, the last sync and patch, the
// Lease, and each health check. Exit code 0: every Node Ready and /healthz ok; 1: not; 2: the agent
// could not be reached.
func newStatusCommand(clk clock.PassiveClock) *cobra.Command {
	var (
		output, configFile, bindAddress string
		port                            int32
		timeout                         time.Duration
	)
	defaults := config.NewDefault()
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether this machine's Node is Ready and why not, from the local nodeagent",
		Long: `status asks the nodeagent running on this machine (its /debug/nodestatus and /healthz, on
--healthz-bind-address:--healthz-port, or the values of --config) and prints whether the Node is
Ready and, if not, why: the runtime or network error, the failing setter, a failing status sync, a
stale Lease. Exit code 0: Ready and healthy; 1: not Ready or unhealthy; 2: the agent did not answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" {
				return fmt.Errorf("-o %q: only json is supported", output)
			}
			if configFile != "" {
				c, err := readHealthzAddress(configFile)
				if err != nil {
					return err
				}
				if !cmd.Flags().Changed("healthz-bind-address") {
					bindAddress = c.HealthzBindAddress
				}
				if !cmd.Flags().Changed("healthz-port") && c.HealthzPort != nil {
					port = *c.HealthzPort
				}
			}
			if port <= 0 {
				return &exitError{code: 2, err: fmt.Errorf("--healthz-port %d: the agent serves no status endpoint", port)}
			}
			if ip := net.ParseIP(bindAddress); ip == nil || ip.IsUnspecified() {
				bindAddress = "127.0.0.1"
			}
			base := "http://" + net.JoinHostPort(bindAddress, strconv.Itoa(int(port)))
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return runStatus(ctx, clk, cmd.OutOrStdout(), base, output == "json")
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: empty for a summary, json for the raw /debug/nodestatus answer.")
	cmd.Flags().StringVar(&configFile, "config", "", "The agent's config file, to read its healthzBindAddress and healthzPort.")
	cmd.Flags().StringVar(&bindAddress, "healthz-bind-address", defaults.HealthzBindAddress, "Address of the agent's healthz server.")
	cmd.Flags().Int32Var(&port, "healthz-port", *defaults.HealthzPort, "Port of the agent's healthz server.")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "How long to wait for the agent.")
	return cmd
}

// readHealthzAddress reads the healthz address fields of a config file (the rest is not checked);
// a file over config.MaxFileSize is refused.
func readHealthzAddress(path string) (*config.NodeAgentConfiguration, error) {
	data, err := config.ReadFileLimited(path, config.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("--config %q: %w", path, err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("--config %q: %w", path, err)
	}
	c := config.NewDefault()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, c); err != nil {
		return nil, fmt.Errorf("--config %q: %w", path, err)
	}
	return c, nil
}

// healthCheck is one line of /healthz?verbose: "[+]ping ok" or "[-]syncloop failed: reason withheld".
type healthCheck struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Text string `json:"text"`
}

// runStatus fetches the report and the health checks and prints them; the returned exitError carries
// the exit code.
func runStatus(ctx context.Context, clk clock.PassiveClock, w io.Writer, base string, asJSON bool) error {
	client := &http.Client{}
	body, _, err := httpGet(ctx, client, base+node.DebugPath)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("agent at %s did not answer: %w", base, err)}
	}
	var report node.Report
	if err := json.Unmarshal(body, &report); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("agent at %s: %s: %w", base, node.DebugPath, err)}
	}
	healthBody, healthCode, err := httpGet(ctx, client, base+"/healthz?verbose")
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("agent at %s: /healthz did not answer: %w", base, err)}
	}
	checks := parseHealthz(string(healthBody))
	healthy := healthCode == http.StatusOK
	for _, n := range report.Nodes {
		// A Node with problems (a late Lease, failing syncs) is not well, even while the loops are
		// alive (/healthz ok) and its last posted Ready is True.
		healthy = healthy && n.Ready != nil && n.Ready.Status == v1.ConditionTrue && len(n.Problems) == 0
	}
	if asJSON {
		out := struct {
			node.Report
			Healthz []healthCheck `json:"healthz"`
			Healthy bool          `json:"healthy"`
		}{report, checks, healthy}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		printSummary(w, clk.Now(), report, checks)
	}
	if !healthy {
		return &exitError{code: 1}
	}
	return nil
}

func httpGet(ctx context.Context, client *http.Client, url string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK && !strings.Contains(url, "/healthz") {
		return nil, resp.StatusCode, fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, resp.StatusCode, nil
}

// parseHealthz reads the "[+]name ok" / "[-]name failed: ..." lines of /healthz?verbose.
func parseHealthz(body string) []healthCheck {
	var out []healthCheck
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 4 || (line[:3] != "[+]" && line[:3] != "[-]") {
			continue
		}
		name, text, _ := strings.Cut(line[3:], " ")
		out = append(out, healthCheck{Name: name, OK: line[:3] == "[+]", Text: text})
	}
	return out
}

// printSummary writes the human summary of one report.
func printSummary(w io.Writer, now time.Time, r node.Report, checks []healthCheck) {
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	}
	for _, n := range r.Nodes {
		state := "NotReady"
		switch {
		case n.Ready == nil:
			state = "Unknown (no status posted yet)"
		case n.Ready.Status == v1.ConditionTrue:
			state = "Ready"
		}
		fmt.Fprintf(w, "Node %s: %s\n", n.Node, state)
		if len(n.Problems) > 0 {
			fmt.Fprintf(w, "  Why:\n")
			for _, p := range n.Problems {
				fmt.Fprintf(w, "    - %s\n", p)
			}
		}
		if n.Ready != nil {
			fmt.Fprintf(w, "  Ready condition: %s %s %q (since %s)\n", n.Ready.Status, n.Ready.Reason, n.Ready.Message, ago(n.Ready.LastTransitionTime.Time))
		}
		if s := n.LastSync; s != nil {
			line := fmt.Sprintf("%s, %s (try %d, %s)", ago(s.Time), s.Result, s.Try, s.Duration.Round(time.Millisecond))
			if s.Error != "" {
				line += ": " + s.Error
			}
			fmt.Fprintf(w, "  Last status sync: %s\n", line)
		} else {
			fmt.Fprintf(w, "  Last status sync: never\n")
		}
		if p := n.LastPatch; p != nil {
			result := "ok"
			if p.PatchReason != "" {
				result = "failed: " + p.PatchReason
			}
			fmt.Fprintf(w, "  Last status patch: %s, %s, %d bytes in %s\n", ago(p.Time), result, len(p.Patch), p.PatchDuration.Round(time.Millisecond))
		}
		fmt.Fprintf(w, "  Lease: renewed %s (every %s, holder %q, %d errors)\n", ago(n.Lease.LastRenew), n.Lease.RenewInterval, n.Lease.Holder, n.Lease.Errors)
		fmt.Fprintf(w, "  Runtime: last healthy %s\n", ago(n.Runtime.LastRuntimeSync))
		cache := "current"
		if !n.NodeCache.Current && n.NodeCache.Stale != nil {
			cache = fmt.Sprintf("stale since %s: %s", ago(n.NodeCache.Stale.Since), n.NodeCache.Stale.Reason)
		}
		fmt.Fprintf(w, "  Node cache: %s\n", cache)
	}
	if cc, ok := r.Extra["clientCertificate"].(map[string]any); ok {
		state := "none"
		if na, _ := cc["notAfter"].(string); na != "" {
			state = "valid until " + na
		}
		if p, _ := cc["problem"].(string); p != "" {
			state += ", FAILING (see the notes)"
		}
		fmt.Fprintf(w, "Client certificate: %s (%v)\n", state, cc["path"])
	}
	var parts []string
	for _, c := range checks {
		mark := "ok"
		if !c.OK {
			mark = "FAILED"
		}
		parts = append(parts, c.Name+" "+mark)
	}
	fmt.Fprintf(w, "Health: %s\n", strings.Join(parts, ", "))
	for _, n := range r.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	fmt.Fprintf(w, "Agent: %s, up %s\n", r.Version, now.Sub(r.StartedAt).Round(time.Second))
}
