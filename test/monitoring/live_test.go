package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeagent/nodeagent/test/framework"
)

// liveRuntimeFor is the `for` of NodeAgentContainerRuntimeDown in the live test's copy of the rules: the
// shipped 5m would make the test wait 5 minutes; every other rule is loaded as shipped.
const liveRuntimeFor = 15 * time.Second

// prom is a Prometheus server started by the test.
type prom struct {
	base string
	proc *framework.Process
}

// promResponse is the envelope of Prometheus' HTTP API.
type promResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

// get calls GET path?query on Prometheus' API and decodes data into out.
func (p *prom) get(ctx context.Context, path string, query url.Values, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := p.base + path
	if query != nil {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r promResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("GET %s: %d %s: %w", path, resp.StatusCode, b, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, out)
}

// series is one element of an instant query's vector result.
type series struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// query runs an instant query and returns its vector.
func (p *prom) query(ctx context.Context, expr string) ([]series, error) {
	var d struct {
		ResultType string   `json:"resultType"`
		Result     []series `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", expr, d.ResultType)
	}
	return d.Result, nil
}

// alert is one element of /api/v1/alerts.
type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// alerts returns the active (pending or firing) alerts named name, or all of them when name is empty.
func (p *prom) alerts(ctx context.Context, name string) ([]alert, error) {
	var d struct {
		Alerts []alert `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", nil, &d); err != nil {
		return nil, err
	}
	var out []alert
	for _, a := range d.Alerts {
		if name == "" || a.Labels["alertname"] == name {
			out = append(out, a)
		}
	}
	return out, nil
}

// scrapeTarget is one static target of the live Prometheus: a job, an address and extra target labels.
type scrapeTarget struct {
	job, addr string
	labels    map[string]string
}

// startPrometheus writes a config scraping targets every second and evaluating rulesPath every second,
// starts /usr/bin/prometheus with it on a free loopback port and a data directory in dir, waits until
// it is ready, and stops it when the test ends.
func startPrometheus(ctx context.Context, t *testing.T, dir, rulesPath string, targets []scrapeTarget) *prom {
	t.Helper()
	jobs := map[string][]map[string]any{}
	var order []string
	for _, tg := range targets {
		if _, ok := jobs[tg.job]; !ok {
			order = append(order, tg.job)
		}
		sc := map[string]any{"targets": []string{tg.addr}}
		if len(tg.labels) > 0 {
			sc["labels"] = tg.labels
		}
		jobs[tg.job] = append(jobs[tg.job], sc)
	}
	var scrape []map[string]any
	for _, j := range order {
		scrape = append(scrape, map[string]any{"job_name": j, "static_configs": jobs[j]})
	}
	cfg, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files":     []string{rulesPath},
		"scrape_configs": scrape,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	port := framework.FreePort()
	p := &prom{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	p.proc, err = framework.StartProcess("prometheus", filepath.Join(dir, "prometheus.log"), promBinary(t, "prometheus"),
		"--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--log.level=info")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.proc.Stop(10 * time.Second); err != nil {
			t.Errorf("prometheus: %v", err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.proc.LogPath())
			t.Logf("prometheus log (tail):\n%s", framework.TailLines(string(b), 30))
		}
	})
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := framework.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		if err := p.proc.ExitedErr(); err != nil {
			return false, err
		}
		code, _, err := framework.HTTPGet(wctx, p.base+"/-/ready")
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("prometheus not ready: %v", err)
	}
	return p
}

// liveRules writes the shipped rules into dir with NodeAgentContainerRuntimeDown's `for` set to
// liveRuntimeFor, and returns the file's path.
func liveRules(t *testing.T, dir string) string {
	t.Helper()
	f := parseRules(t, readRepoFile(t, rulesFile))
	n := 0
	for gi := range f.Groups {
		for ri := range f.Groups[gi].Rules {
			if r := &f.Groups[gi].Rules[ri]; r.Alert == "NodeAgentContainerRuntimeDown" {
				r.For = liveRuntimeFor.String()
				n++
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d NodeAgentContainerRuntimeDown rules, want 1", n)
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nodeagent.rules.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startShard runs one shard of `nodeagent simulate` (nodes Nodes each, shards in all) with the admin
// kubeconfig on a free port, and stops it when the test ends. It returns the shard's HTTP address.
func startShard(ctx context.Context, t *testing.T, cp *framework.ControlPlane, index, shards, nodes int) string {
	t.Helper()
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	port := framework.FreePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := framework.StartProcess(fmt.Sprintf("nodeagent simulate shard %d", index),
		filepath.Join(t.TempDir(), "simulate.log"), bin, "simulate", "--kubeconfig="+cp.AdminKubeconfig,
		"--healthz-bind-address=127.0.0.1", "--healthz-port="+strconv.Itoa(port), "--port=0",
		"--nodes="+strconv.Itoa(nodes), "--shards="+strconv.Itoa(shards), "--shard-index="+strconv.Itoa(index),
		"--node-name-prefix=fleet-sim-", "--simulated-taint")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(20 * time.Second); err != nil {
			t.Errorf("shard %d: %v", index, err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.LogPath())
			t.Logf("shard %d log (tail):\n%s", index, framework.TailLines(string(b), 20))
		}
	})
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := framework.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
		if err := p.ExitedErr(); err != nil {
			return false, err
		}
		code, _, err := framework.HTTPGet(wctx, "http://"+addr+"/readyz")
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("shard %d not ready: %v", index, err)
	}
	return addr
}

// postSimulated POSTs body to the simulation control API of the shard at addr for the Node name, and
// fails the test unless it answers 200.
func postSimulated(ctx context.Context, t *testing.T, addr, name, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/simulation/nodes/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /simulation/nodes/%s %s: %d %s", name, body, resp.StatusCode, b)
	}
}

// problemMonitorConfig writes NPD's kernel monitor config as the DaemonSet ships it
// (deploy/kubernetes/npd/kernel-monitor-filelog.json) with its logPath moved to an empty file in dir,
// and returns the config's path.
func problemMonitorConfig(t *testing.T, dir string) string {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(readRepoFile(t, "deploy/kubernetes/npd/kernel-monitor-filelog.json"), &cfg); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kern.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg["logPath"] = logPath
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kernel-monitor-filelog.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLivePrometheus runs Debian's Prometheus with the shipped rules (NodeAgentContainerRuntimeDown's
// `for` shortened to liveRuntimeFor) scraping, every second, the three modes on the harness's control
// plane: an agent (job nodeagent) and a companion (job nodeagent-companion) of one Node, both with the
// DaemonSet's kernel monitor, over a private containerd, and two shards of `nodeagent simulate` (job
// nodeagent-simulate, target labels namespace and pod as the chart's PodMonitor gives them). It checks
// that every target is up and every rule evaluates without error; that every query of the dashboard
// returns at least one series; that no alert is active, not even pending; then stops containerd and wants NodeAgentContainerRuntimeDown pending,
// then firing no sooner than its `for` after it became active, for the agent and the companion, and
// starts containerd again and wants both resolved.
func TestLivePrometheus(t *testing.T) {
	ctx := t.Context()
	if _, err := framework.EnsureBinaries(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const node = "fleet-node"
	cp, err := framework.StartControlPlane(ctx, framework.ControlPlaneOptions{Dir: filepath.Join(dir, "cp"), NodeNames: []string{node}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	cd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Dir: filepath.Join(dir, "containerd"), CNI: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cd.Close)

	monitor := problemMonitorConfig(t, dir)
	agent := framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: filepath.Join(dir, "agent"), NodeName: node, Kubeconfig: cp.KubeconfigFor(node), RuntimeEndpoint: cd.Endpoint,
		Args: []string{"--config.system-log-monitor=" + monitor},
	})
	framework.WaitReady(ctx, t, cp.AdminClient, node, time.Minute)
	companion := framework.StartTestAgent(ctx, t, framework.AgentOptions{
		Dir: filepath.Join(dir, "companion"), NodeName: node, Kubeconfig: cp.KubeconfigFor(node), RuntimeEndpoint: cd.Endpoint,
		Args: []string{"--companion", "--config.system-log-monitor=" + monitor},
	})
	targets := []scrapeTarget{
		{job: "nodeagent", addr: strings.TrimPrefix(agent.HealthzURL, "http://")},
		{job: "nodeagent-companion", addr: strings.TrimPrefix(companion.HealthzURL, "http://")},
	}
	const shards, nodesPerShard = 2, 3
	for i := range shards {
		targets = append(targets, scrapeTarget{job: "nodeagent-simulate", addr: startShard(ctx, t, cp, i, shards, nodesPerShard),
			labels: map[string]string{"namespace": "nodeagent-simulation", "pod": fmt.Sprintf("nodeagent-simulate-%d", i)}})
	}
	p := startPrometheus(ctx, t, dir, liveRules(t, dir), targets)

	// Every target up, every rule evaluated without error.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var lastUp []series
	if err := framework.WaitFor(wctx, 250*time.Millisecond, func() (bool, error) {
		up, err := p.query(wctx, "up == 1")
		lastUp = up
		return err == nil && len(up) == len(targets), nil
	}); err != nil {
		t.Fatalf("want all %d targets up: %v; up: %v", len(targets), err, lastUp)
	}
	var problems []string
	if err := framework.WaitFor(wctx, 250*time.Millisecond, func() (bool, error) {
		var d struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.get(wctx, "/api/v1/rules", nil, &d); err != nil {
			return false, err
		}
		problems = problems[:0]
		n := 0
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					problems = append(problems, fmt.Sprintf("%s/%s: %s %s", g.Name, r.Name, r.Health, r.LastError))
				}
			}
		}
		return n > 0 && len(problems) == 0, nil
	}); err != nil {
		t.Fatalf("rules not all evaluated ok: %v\n%s", err, strings.Join(problems, "\n"))
	}
	t.Logf("all %d targets up and every rule evaluated ok after %v", len(targets), time.Since(start).Round(time.Millisecond))

	// A status change on a simulated Node, so that a status patch is made (and counted) during the test:
	// otherwise the Nodes, Ready from their first write, are patched only every 5 minutes and the
	// dashboard's patch panels would rightly have nothing to show yet.
	postSimulated(ctx, t, targets[2].addr, "fleet-sim-0000", `{"memoryPressure":true}`)

	// Every dashboard query returns series. $__rate_interval is Grafana's; 10s is four scrape intervals
	// and more, as Grafana makes it.
	for _, pn := range loadDashboard(t).Panels {
		for _, tg := range pn.Targets {
			expr := strings.ReplaceAll(tg.Expr, "$__rate_interval", "10s")
			var last []series
			var lastErr error
			qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := framework.WaitFor(qctx, 500*time.Millisecond, func() (bool, error) {
				last, lastErr = p.query(qctx, expr)
				return lastErr == nil && len(last) > 0, nil
			})
			cancel()
			if err != nil {
				t.Errorf("panel %q, query %s: %s: no series (%v, last error %v)", pn.Title, tg.RefID, expr, err, lastErr)
			}
		}
	}
	if t.Failed() {
		all, err := p.query(ctx, `count by (__name__, job, result) ({__name__=~"nodeagent_.*"})`)
		var names []string
		for _, s := range all {
			names = append(names, fmt.Sprint(s.Metric))
		}
		t.Fatalf("the nodeagent series Prometheus has (%v):\n%s", err, strings.Join(names, "\n"))
	}

	// A healthy fleet has no alert, not even pending: among others, NodeAgentDuplicateNodeName counts node
	// names per job, and an agent and a companion of one node are not two agents.
	if as, err := p.alerts(ctx, ""); err != nil || len(as) != 0 {
		t.Fatalf("alerts active before containerd stopped: %+v %v", as, err)
	}

	const name = "NodeAgentContainerRuntimeDown"
	jobs := []string{"nodeagent", "nodeagent-companion"}
	stopped := time.Now()
	if err := cd.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd stopped in %v", time.Since(stopped).Round(time.Millisecond))
	pending, firing := map[string]time.Time{}, map[string]time.Time{}
	activeAt := map[string]time.Time{}
	wctx2, cancel2 := context.WithTimeout(ctx, liveRuntimeFor+time.Minute)
	defer cancel2()
	if err := framework.WaitFor(wctx2, 200*time.Millisecond, func() (bool, error) {
		as, err := p.alerts(wctx2, name)
		if err != nil {
			return false, err
		}
		now := time.Now()
		for _, a := range as {
			job := a.Labels["job"]
			if a.Labels["condition"] != "RuntimeReady" || a.Labels["severity"] != "warning" {
				return false, fmt.Errorf("alert labels %v", a.Labels)
			}
			switch a.State {
			case "pending":
				if _, ok := pending[job]; !ok {
					pending[job], activeAt[job] = now, a.ActiveAt
				}
				if _, ok := firing[job]; ok {
					return false, fmt.Errorf("%s %s pending again after firing", name, job)
				}
			case "firing":
				if _, ok := firing[job]; !ok {
					firing[job], activeAt[job] = now, a.ActiveAt
				}
			}
		}
		return len(firing) == len(jobs), nil
	}); err != nil {
		t.Fatalf("%s: want pending then firing for %v: %v; pending %v, firing %v", name, jobs, err, pending, firing)
	}
	for _, job := range jobs {
		p, ok := pending[job]
		if !ok {
			t.Errorf("%s %s was never seen pending before firing", name, job)
			continue
		}
		held := firing[job].Sub(activeAt[job])
		if held < liveRuntimeFor {
			t.Errorf("%s %s fired %v after it became active, before its for: %v", name, job, held, liveRuntimeFor)
		}
		t.Logf("%s %s: active (pending) %v after containerd stopped (seen %v), firing seen %v after stop (%v after active)",
			name, job, activeAt[job].Sub(stopped).Round(time.Millisecond), p.Sub(stopped).Round(time.Millisecond),
			firing[job].Sub(stopped).Round(time.Millisecond), held.Round(time.Millisecond))
	}

	restarted := time.Now()
	if err := cd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wctx3, cancel3 := context.WithTimeout(ctx, time.Minute)
	defer cancel3()
	var left []alert
	if err := framework.WaitFor(wctx3, 200*time.Millisecond, func() (bool, error) {
		as, err := p.alerts(wctx3, name)
		left = as
		return err == nil && len(as) == 0, err
	}); err != nil {
		t.Fatalf("%s not resolved after containerd started again: %v; still active: %v", name, err, left)
	}
	t.Logf("%s resolved %v after containerd was started again", name, time.Since(restarted).Round(time.Millisecond))
}
