package main

// The Grafana dashboard "nodeagent / Fleet": one row per concern, the simulation's shards last. Every
// query uses only series nodeagent exports (the nodeagent_* metrics, the Go process collector's
// process_*) and Prometheus' own up; test/monitoring (TestLivePrometheus) runs each one against a
// Prometheus scraping a real agent, companion and simulation and wants at least one series from each.
// A query that would return nothing while all is well ("errors" of a counter never incremented) ends
// with `or <the same selection's rate> * 0`, so that the panel shows 0 rather than "No data".

// Jobs of the three modes (see deploy/monitoring/nodeagent.rules.yaml).
const (
	jobAgent     = `job="nodeagent"`
	jobSimulate  = `job="nodeagent-simulate"`
	jobLeases    = `job=~"nodeagent|nodeagent-simulate"`  // the modes that renew Leases and sync status
	jobRuntime   = `job=~"nodeagent|nodeagent-companion"` // the modes that poll a real runtime
	jobAll       = `job=~"nodeagent|nodeagent-companion|nodeagent-simulate"`
	rateInterval = "$__rate_interval"
)

// Dashboard is the subset of Grafana's dashboard JSON model that this dashboard uses.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Description   string     `json:"description"`
	Tags          []string   `json:"tags"`
	Timezone      string     `json:"timezone"`
	Editable      bool       `json:"editable"`
	GraphTooltip  int        `json:"graphTooltip"`
	Refresh       string     `json:"refresh"`
	SchemaVersion int        `json:"schemaVersion"`
	Version       int        `json:"version"`
	Time          TimeRange  `json:"time"`
	Templating    Templating `json:"templating"`
	Panels        []Panel    `json:"panels"`
}

// TimeRange is the dashboard's default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds the dashboard's variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable (here only the Prometheus data source).
type Variable struct {
	Name    string         `json:"name"`
	Label   string         `json:"label"`
	Type    string         `json:"type"`
	Query   string         `json:"query"`
	Current map[string]any `json:"current"`
	Hide    int            `json:"hide"`
}

// Panel is a row, a stat or a time series panel.
type Panel struct {
	ID          int          `json:"id"`
	Type        string       `json:"type"`
	Title       string       `json:"title"`
	Description string       `json:"description,omitempty"`
	GridPos     GridPos      `json:"gridPos"`
	Datasource  *Datasource  `json:"datasource,omitempty"`
	Targets     []Target     `json:"targets,omitempty"`
	FieldConfig *FieldConfig `json:"fieldConfig,omitempty"`
	Collapsed   *bool        `json:"collapsed,omitempty"`
	Panels      []Panel      `json:"panels,omitempty"`
}

// GridPos places a panel on the dashboard's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Datasource refers to the dashboard's Prometheus variable.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one PromQL query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Datasource   *Datasource `json:"datasource"`
}

// FieldConfig sets a panel's unit and minimum.
type FieldConfig struct {
	Defaults FieldDefaults `json:"defaults"`
	Override []any         `json:"overrides"`
}

// FieldDefaults are the defaults of every field of a panel.
type FieldDefaults struct {
	Unit string   `json:"unit,omitempty"`
	Min  *float64 `json:"min,omitempty"`
}

var prometheus = &Datasource{Type: "prometheus", UID: "${datasource}"}

// q is a query with its legend.
type q struct{ expr, legend string }

// layout places panels left to right, 24 columns wide, starting a new line when one is full.
type layout struct {
	id, x, y, rowH int
	panels         []Panel
}

// row starts a row titled title on a new line.
func (l *layout) row(title string) {
	l.newline()
	l.id++
	l.panels = append(l.panels, Panel{ID: l.id, Type: "row", Title: title, GridPos: GridPos{H: 1, W: 24, X: 0, Y: l.y}, Collapsed: new(bool)})
	l.y++
}

func (l *layout) newline() {
	if l.x > 0 {
		l.x, l.y = 0, l.y+l.rowH
	}
	l.rowH = 0
}

// add appends a panel of type typ, w columns wide and h high, with the queries qs.
func (l *layout) add(typ, title, description, unit string, w, h int, qs ...q) {
	if l.x+w > 24 {
		l.newline()
	}
	l.id++
	zero := 0.0
	p := Panel{ID: l.id, Type: typ, Title: title, Description: description, GridPos: GridPos{H: h, W: w, X: l.x, Y: l.y},
		Datasource: prometheus, FieldConfig: &FieldConfig{Defaults: FieldDefaults{Unit: unit, Min: &zero}, Override: []any{}}}
	for i, qq := range qs {
		p.Targets = append(p.Targets, Target{RefID: string(rune('A' + i)), Expr: qq.expr, LegendFormat: qq.legend, Datasource: prometheus})
	}
	l.panels = append(l.panels, p)
	l.x += w
	l.rowH = max(l.rowH, h)
}

// orZero returns expr, or where it has no series, zero's series times 0 (see the file's comment).
func orZero(expr, zero string) string { return expr + " or " + zero + " * 0" }

// dashboard returns the fleet dashboard.
func dashboard() Dashboard {
	var l layout
	r := rateInterval

	l.row("Nodes")
	l.add("stat", "Nodes Ready", "Agents (job nodeagent) whose Node was Ready at their last status sync.", "none", 6, 4,
		q{`sum(nodeagent_node_ready{` + jobAgent + `})`, "Ready"})
	l.add("stat", "Nodes not Ready", "Agents (job nodeagent) whose Node was not Ready at their last status sync.", "none", 6, 4,
		q{`count(nodeagent_node_ready{` + jobAgent + `}) - sum(nodeagent_node_ready{` + jobAgent + `})`, "not Ready"})
	l.add("stat", "Processes up", "Scrape targets answering, per mode (job).", "none", 12, 4,
		q{`sum by (job) (up{` + jobAll + `})`, "{{job}}"})

	l.row("Lease and status")
	l.add("timeseries", "Lease renew latency", "Quantiles of successful Lease writes, per mode.", "s", 12, 8,
		q{`histogram_quantile(0.99, sum by (job, le) (rate(nodeagent_lease_renew_duration_seconds_bucket{` + jobLeases + `}[` + r + `])))`, "{{job}} p99"},
		q{`histogram_quantile(0.9, sum by (job, le) (rate(nodeagent_lease_renew_duration_seconds_bucket{` + jobLeases + `}[` + r + `])))`, "{{job}} p90"},
		q{`histogram_quantile(0.5, sum by (job, le) (rate(nodeagent_lease_renew_duration_seconds_bucket{` + jobLeases + `}[` + r + `])))`, "{{job}} p50"})
	l.add("timeseries", "Lease renew errors", "Failed Lease writes and reads per second, per mode (0 while there are none).", "reqps", 12, 8,
		q{orZero(`sum by (job) (rate(nodeagent_lease_renew_errors_total{`+jobLeases+`}[`+r+`]))`,
			`sum by (job) (rate(nodeagent_lease_renew_duration_seconds_count{`+jobLeases+`}[`+r+`]))`), "{{job}}"})
	l.add("timeseries", "Status patches per minute", "PATCH nodes/status per minute, per mode: near 0 in steady state (a patch only on change or every 5 m).", "none", 8, 8,
		q{`sum by (job) (rate(nodeagent_node_status_syncs_total{` + jobLeases + `,result="patched"}[` + r + `])) * 60`, "{{job}}"})
	l.add("timeseries", "Status sync errors per minute", "Failed status syncs per minute, per mode (0 while there are none).", "none", 8, 8,
		q{orZero(`sum by (job) (rate(nodeagent_node_status_syncs_total{`+jobLeases+`,result="error"}[`+r+`])) * 60`,
			`sum by (job) (rate(nodeagent_node_status_syncs_total{`+jobLeases+`}[`+r+`]))`), "{{job}}"})
	l.add("timeseries", "Status patch latency p99", "99th percentile of PATCH nodes/status, per mode.", "s", 8, 8,
		q{`histogram_quantile(0.99, sum by (job, le) (rate(nodeagent_node_status_patch_duration_seconds_bucket{` + jobLeases + `}[` + r + `])))`, "{{job}}"})

	l.row("Container runtime")
	l.add("timeseries", "Runtime conditions", "RuntimeReady and NetworkReady in each process's last CRI Status (1 ready, 0 not or no answer): the lowest per mode.", "none", 12, 8,
		q{`min by (job, condition) (nodeagent_runtime_condition{` + jobRuntime + `})`, "{{job}} {{condition}}"})
	l.add("timeseries", "CRI Status errors per minute", "Failed CRI RuntimeService.Status calls per minute, per mode (0 while there are none).", "none", 12, 8,
		q{orZero(`sum by (job) (rate(nodeagent_runtime_status_calls_total{`+jobRuntime+`,result="error"}[`+r+`])) * 60`,
			`sum by (job) (rate(nodeagent_runtime_status_calls_total{`+jobRuntime+`}[`+r+`]))`), "{{job}}"})

	l.row("Problem conditions")
	l.add("timeseries", "Nodes with a problem condition", "Nodes whose problem monitors have the condition True, by type and reason (node-problem-detector's problem_gauge).", "none", 8, 8,
		q{`sum by (type, reason) (nodeagent_problem_gauge{` + jobRuntime + `})`, "{{type}} {{reason}}"})
	l.add("timeseries", "Problem monitors failing", "Problem monitors whose /healthz check fails, by config file.", "none", 8, 8,
		q{`sum by (job, config) (1 - nodeagent_problem_monitor_healthy{` + jobRuntime + `})`, "{{job}} {{config}}"})
	l.add("timeseries", "Node conditions True", "Agents' Nodes with each condition True, as last posted (Ready, the pressures, the problem monitors').", "none", 8, 8,
		q{`sum by (condition) (nodeagent_node_condition{` + jobAgent + `,status="True"})`, "{{condition}}"})

	l.row("Processes")
	l.add("timeseries", "CPU per mode", "CPU used by all processes of each mode, in cores.", "none", 12, 8,
		q{`sum by (job) (rate(process_cpu_seconds_total{` + jobAll + `}[` + r + `]))`, "{{job}}"})
	l.add("timeseries", "RSS per mode", "Resident memory: the largest process and the mean, per mode.", "bytes", 12, 8,
		q{`max by (job) (process_resident_memory_bytes{` + jobAll + `})`, "{{job}} max"},
		q{`avg by (job) (process_resident_memory_bytes{` + jobAll + `})`, "{{job}} mean"})

	l.row("Simulation, per shard")
	l.add("timeseries", "Lease renewals per second", "Successful Lease writes per second of each shard: its Nodes / 10 s when on time.", "reqps", 8, 8,
		q{`sum by (pod) (rate(nodeagent_lease_renew_duration_seconds_count{` + jobSimulate + `}[` + r + `]))`, "{{pod}}"})
	l.add("timeseries", "Lease renew latency p99", "99th percentile of each shard's Lease writes.", "s", 8, 8,
		q{`histogram_quantile(0.99, sum by (pod, le) (rate(nodeagent_lease_renew_duration_seconds_bucket{` + jobSimulate + `}[` + r + `])))`, "{{pod}}"})
	l.add("timeseries", "Lease renew errors", "Failed Lease writes and reads per second of each shard (0 while there are none).", "reqps", 8, 8,
		q{orZero(`sum by (pod) (rate(nodeagent_lease_renew_errors_total{`+jobSimulate+`}[`+r+`]))`,
			`sum by (pod) (rate(nodeagent_lease_renew_duration_seconds_count{`+jobSimulate+`}[`+r+`]))`), "{{pod}}"})
	l.add("timeseries", "Status syncs per minute", "Status syncs per minute of each shard, by result (patched, unchanged, error).", "none", 8, 8,
		q{`sum by (pod, result) (rate(nodeagent_node_status_syncs_total{` + jobSimulate + `}[` + r + `])) * 60`, "{{pod}} {{result}}"})
	l.add("timeseries", "CPU per shard", "CPU used by each shard, in cores.", "none", 8, 8,
		q{`sum by (pod) (rate(process_cpu_seconds_total{` + jobSimulate + `}[` + r + `]))`, "{{pod}}"})
	l.add("timeseries", "RSS per shard", "Resident memory of each shard.", "bytes", 8, 8,
		q{`sum by (pod) (process_resident_memory_bytes{` + jobSimulate + `})`, "{{pod}}"})
	l.add("stat", "Shards up", "Each shard's scrape target answering (1) or not (0).", "none", 24, 4,
		q{`sum by (pod) (up{` + jobSimulate + `})`, "{{pod}}"})

	return Dashboard{
		UID:   "nodeagent-fleet",
		Title: "nodeagent / Fleet",
		Description: "nodeagent in its three modes (job nodeagent, nodeagent-companion, nodeagent-simulate): Nodes Ready, Lease and status, " +
			"the container runtime, problem conditions, processes, and the simulation per shard. Generated by hack/monitoring.",
		Tags: []string{"nodeagent"}, Timezone: "utc", Editable: true, GraphTooltip: 1, Refresh: "30s",
		SchemaVersion: 39, Version: 1, Time: TimeRange{From: "now-1h", To: "now"},
		Templating: Templating{List: []Variable{{
			Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus",
			Current: map[string]any{"selected": false, "text": "default", "value": "default"},
		}}},
		Panels: l.panels,
	}
}
