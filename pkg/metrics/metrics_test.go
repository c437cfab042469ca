package metrics

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodeagent/nodeagent/pkg/statussync"
	"github.com/nodeagent/nodeagent/pkg/version"
)

var processStart = time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC)

func nodeWith(conds map[v1.NodeConditionType]v1.ConditionStatus) *v1.Node {
	n := &v1.Node{}
	for t, s := range conds {
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: t, Status: s})
	}
	return n
}

// compare checks the named metrics against want, in the Prometheus text format without HELP and
// TYPE lines (added here from the registry's own metadata).
func compare(t *testing.T, m *Metrics, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

const (
	headerSyncs         = "# HELP nodeagent_node_status_syncs_total [ALPHA] Node status syncs, by result: patched, unchanged (no write) or error.\n# TYPE nodeagent_node_status_syncs_total counter\n"
	headerPatchErrors   = "# HELP nodeagent_node_status_patch_errors_total [ALPHA] Failed PATCH nodes/status requests, by reason (the API status reason, e.g. Conflict, Forbidden, Timeout).\n# TYPE nodeagent_node_status_patch_errors_total counter\n"
	headerReady         = "# HELP nodeagent_node_ready [ALPHA] 1 when the Ready condition of the Node, as of the last successful status sync, was True, else 0.\n# TYPE nodeagent_node_ready gauge\n"
	headerCondition     = "# HELP nodeagent_node_condition [ALPHA] 1 for the status (True, False, Unknown) of each NodeCondition type nodeagent sets, as last posted, else 0.\n# TYPE nodeagent_node_condition gauge\n"
	headerStartup       = "# HELP nodeagent_startup_to_ready_duration_seconds [ALPHA] Seconds from process start to the first successful status sync with Ready=True.\n# TYPE nodeagent_startup_to_ready_duration_seconds gauge\n"
	headerLastSync      = "# HELP nodeagent_node_status_last_sync_timestamp_seconds [ALPHA] Unix time of the last successful node status sync.\n# TYPE nodeagent_node_status_last_sync_timestamp_seconds gauge\n"
	headerRuntimeCalls  = "# HELP nodeagent_runtime_status_calls_total [ALPHA] CRI RuntimeService.Status calls, by result: success or error.\n# TYPE nodeagent_runtime_status_calls_total counter\n"
	headerRuntimeCond   = "# HELP nodeagent_runtime_condition [ALPHA] 1 when the runtime condition (RuntimeReady, NetworkReady) was true in the last CRI Status, else 0.\n# TYPE nodeagent_runtime_condition gauge\n"
	headerLeaseErrors   = "# HELP nodeagent_lease_renew_errors_total [ALPHA] Failed node Lease writes, by reason.\n# TYPE nodeagent_lease_renew_errors_total counter\n"
	headerRegistrations = "# HELP nodeagent_node_registration_attempts_total [ALPHA] Attempts to register the Node, by result: created, existing, error.\n# TYPE nodeagent_node_registration_attempts_total counter\n"
)

// conditionSeries returns the three node_condition series of each type, 1 for its status.
func conditionSeries(conds ...any) string {
	var b strings.Builder
	for i := 0; i < len(conds); i += 2 {
		typ, status := conds[i].(v1.NodeConditionType), conds[i+1].(v1.ConditionStatus)
		for _, s := range []v1.ConditionStatus{v1.ConditionFalse, v1.ConditionTrue, v1.ConditionUnknown} {
			v := 0
			if s == status {
				v = 1
			}
			fmt.Fprintf(&b, "nodeagent_node_condition{condition=%q,status=%q} %d\n", typ, s, v)
		}
	}
	return b.String()
}

// syncWant is what the sync metrics should say.
type syncWant struct {
	syncs       map[string]int // by result
	patchErrors map[string]int // by reason
	ready       int
	conditions  string // conditionSeries(...)
	startup     float64
	lastSync    time.Time
}

func (w syncWant) text() string {
	var b strings.Builder
	b.WriteString(headerSyncs)
	for _, r := range slices.Sorted(maps.Keys(w.syncs)) {
		fmt.Fprintf(&b, "nodeagent_node_status_syncs_total{result=%q} %d\n", r, w.syncs[r])
	}
	if len(w.patchErrors) > 0 {
		b.WriteString(headerPatchErrors)
		for _, r := range slices.Sorted(maps.Keys(w.patchErrors)) {
			fmt.Fprintf(&b, "nodeagent_node_status_patch_errors_total{reason=%q} %d\n", r, w.patchErrors[r])
		}
	}
	fmt.Fprintf(&b, "%snodeagent_node_ready %d\n", headerReady, w.ready)
	b.WriteString(headerCondition + w.conditions)
	fmt.Fprintf(&b, "%snodeagent_startup_to_ready_duration_seconds %v\n", headerStartup, w.startup)
	fmt.Fprintf(&b, "%snodeagent_node_status_last_sync_timestamp_seconds %d\n", headerLastSync, w.lastSync.Unix())
	return b.String()
}

// TestObserveSync follows ObserveSync over a sequence of syncs: the sync count by result, patch
// errors by reason, node_ready and node_condition as last posted (only the condition types nodeagent
// sets, a type gone from the Node losing its series, types added by AddConditionTypes), the last
// sync time, and the start-up duration set once, at the first Ready.
func TestObserveSync(t *testing.T) {
	m := New(processStart)
	names := []string{"nodeagent_node_status_syncs_total", "nodeagent_node_status_patch_errors_total", "nodeagent_node_ready",
		"nodeagent_node_condition", "nodeagent_startup_to_ready_duration_seconds", "nodeagent_node_status_last_sync_timestamp_seconds"}
	const (
		T, F, U = v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown
	)
	const (
		ready, mem, disk, pid = v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure
		kernelDeadlock        = v1.NodeConditionType("KernelDeadlock")
	)
	type conds = map[v1.NodeConditionType]v1.ConditionStatus

	// 1. Registered NotReady (runtime not up yet): patched; nothing Ready yet (the start-up gauge
	// reads 0). NetworkUnavailable and KernelDeadlock are not nodeagent's: not exported.
	t1 := processStart.Add(2 * time.Second)
	m.ObserveSync("n1", statussync.SyncResult{Time: t1, Result: statussync.ResultPatched, Try: 1, Patched: true, PatchDuration: 20 * time.Millisecond,
		Patches: []statussync.PatchAttempt{{Duration: 20 * time.Millisecond}},
		Node:    nodeWith(conds{ready: F, mem: F, disk: F, pid: F, v1.NodeNetworkUnavailable: F, kernelDeadlock: F})})
	compare(t, m, syncWant{syncs: map[string]int{"patched": 1}, conditions: conditionSeries(disk, F, mem, F, pid, F, ready, F),
		lastSync: t1}.text(), names...)

	// 2. Ready (the fast path): patched; the start-up duration is set.
	t2 := processStart.Add(12 * time.Second)
	m.ObserveSync("n1", statussync.SyncResult{Time: t2, Result: statussync.ResultPatched, Try: 1, Patched: true, PatchDuration: 30 * time.Millisecond, Fast: true,
		Patches: []statussync.PatchAttempt{{Duration: 30 * time.Millisecond}},
		Node:    nodeWith(conds{ready: T, mem: F, disk: F, pid: F})})
	// 3. Two tries' PATCHes fail with a conflict, the others' GETs fail: an error, each failed PATCH
	// counted by reason; the gauges keep the posted status.
	m.ObserveSync("n1", statussync.SyncResult{Time: t2.Add(10 * time.Second), Result: statussync.ResultError, Try: 5, Patched: true,
		PatchDuration: 20 * time.Millisecond, PatchReason: "Conflict", Err: errors.New("conflict"),
		Patches: []statussync.PatchAttempt{{Duration: 20 * time.Millisecond, Reason: "Conflict"}, {Duration: 20 * time.Millisecond, Reason: "Conflict"}}})
	// 4. A registration failure: an error without a patch.
	m.ObserveSync("n1", statussync.SyncResult{Time: t2.Add(20 * time.Second), Result: statussync.ResultError, Err: errors.New("forbidden")})
	compare(t, m, syncWant{syncs: map[string]int{"patched": 2, "error": 2}, patchErrors: map[string]int{"Conflict": 2}, ready: 1,
		conditions: conditionSeries(disk, F, mem, F, pid, F, ready, T), startup: 12, lastSync: t2}.text(), names...)

	// 5. Unchanged, as read: the lifecycle controller set Ready Unknown and PIDPressure is gone from
	// the Node: its series are deleted.
	t5 := t2.Add(30 * time.Second)
	m.ObserveSync("n1", statussync.SyncResult{Time: t5, Result: statussync.ResultUnchanged, Try: 1,
		Node: nodeWith(conds{ready: U, mem: F, disk: T})})
	compare(t, m, syncWant{syncs: map[string]int{"patched": 2, "error": 2, "unchanged": 1}, patchErrors: map[string]int{"Conflict": 2},
		conditions: conditionSeries(disk, T, mem, F, ready, U), startup: 12, lastSync: t5}.text(), names...)

	// 6. A problem monitor's condition type is added (with one already known): exported from the
	// next sync; Ready again does not move the start-up duration.
	m.AddConditionTypes(kernelDeadlock, v1.NodeReady)
	t6 := t5.Add(10 * time.Second)
	m.ObserveSync("n1", statussync.SyncResult{Time: t6, Result: statussync.ResultPatched, Try: 1, Patched: true,
		Patches: []statussync.PatchAttempt{{}},
		Node:    nodeWith(conds{ready: T, mem: F, disk: F, pid: F, kernelDeadlock: T})})
	compare(t, m, syncWant{syncs: map[string]int{"patched": 3, "error": 2, "unchanged": 1}, patchErrors: map[string]int{"Conflict": 2}, ready: 1,
		conditions: conditionSeries(disk, F, mem, F, pid, F, ready, T, kernelDeadlock, T), startup: 12, lastSync: t6}.text(), names...)

	// Patch durations: three successful PATCHes, two failed.
	for result, want := range map[string]struct {
		count uint64
		sum   float64
	}{"success": {3, 0.05}, "error": {2, 0.04}} {
		h, err := testutil.GetHistogramVecFromGatherer(m.Registry, "nodeagent_node_status_patch_duration_seconds", map[string]string{"result": result})
		if err != nil {
			t.Fatal(err)
		}
		if c, s := h.GetAggregatedSampleCount(), h.GetAggregatedSampleSum(); c != want.count || s < want.sum-1e-9 || s > want.sum+1e-9 {
			t.Errorf("patch duration %s: count %d sum %v, want %d and %v", result, c, s, want.count, want.sum)
		}
	}
}

// TestObserveRuntimeStatus: each CRI Status call is counted by result; runtime_condition says what
// the last call said (both 0 when it failed).
func TestObserveRuntimeStatus(t *testing.T) {
	m := New(processStart)
	names := []string{"nodeagent_runtime_status_calls_total", "nodeagent_runtime_condition"}
	m.ObserveRuntimeStatus(nil, true, true)
	compare(t, m, headerRuntimeCalls+`nodeagent_runtime_status_calls_total{result="success"} 1
`+headerRuntimeCond+`nodeagent_runtime_condition{condition="NetworkReady"} 1
nodeagent_runtime_condition{condition="RuntimeReady"} 1
`, names...)
	m.ObserveRuntimeStatus(nil, false, true)
	compare(t, m, headerRuntimeCalls+`nodeagent_runtime_status_calls_total{result="success"} 2
`+headerRuntimeCond+`nodeagent_runtime_condition{condition="NetworkReady"} 1
nodeagent_runtime_condition{condition="RuntimeReady"} 0
`, names...)
	m.ObserveRuntimeStatus(errors.New("connection refused"), false, false)
	compare(t, m, headerRuntimeCalls+`nodeagent_runtime_status_calls_total{result="error"} 1
nodeagent_runtime_status_calls_total{result="success"} 2
`+headerRuntimeCond+`nodeagent_runtime_condition{condition="NetworkReady"} 0
nodeagent_runtime_condition{condition="RuntimeReady"} 0
`, names...)
}

// TestLeaseAndRegistration: Lease renewals are timed, Lease errors and registration attempts counted.
func TestLeaseAndRegistration(t *testing.T) {
	m := New(processStart)
	m.ObserveLeaseRenewal(10 * time.Millisecond)
	m.ObserveLeaseRenewal(30 * time.Millisecond)
	m.ObserveLeaseError("Timeout")
	m.ObserveLeaseError("Timeout")
	m.ObserveLeaseError("Transport")
	m.ObserveRegistrationAttempt("error")
	m.ObserveRegistrationAttempt("error")
	m.ObserveRegistrationAttempt("created")
	compare(t, m, headerLeaseErrors+`nodeagent_lease_renew_errors_total{reason="Timeout"} 2
nodeagent_lease_renew_errors_total{reason="Transport"} 1
`+headerRegistrations+`nodeagent_node_registration_attempts_total{result="created"} 1
nodeagent_node_registration_attempts_total{result="error"} 2
`, "nodeagent_lease_renew_errors_total", "nodeagent_node_registration_attempts_total")
	h, err := testutil.GetHistogramVecFromGatherer(m.Registry, "nodeagent_lease_renew_duration_seconds", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, s := h.GetAggregatedSampleCount(), h.GetAggregatedSampleSum(); c != 2 || s < 0.04-1e-9 || s > 0.04+1e-9 {
		t.Errorf("lease renew duration: count %d sum %v, want 2 and 0.04", c, s)
	}
}

// TestHandler: the handler serves the registry in the text format, build info included.
func TestHandler(t *testing.T) {
	m := New(processStart)
	v := version.Get()
	compare(t, m, fmt.Sprintf(`# HELP nodeagent_build_info [ALPHA] Always 1; labels give the nodeagent build.
# TYPE nodeagent_build_info gauge
nodeagent_build_info{git_commit=%q,git_version=%q,go_version=%q} 1
`, v.GitCommit, v.GitVersion, v.GoVersion), "nodeagent_build_info")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "nodeagent_build_info{") || !strings.Contains(rec.Body.String(), "go_goroutines") {
		t.Errorf("GET /metrics: %d\n%s", rec.Code, rec.Body.String())
	}
}
