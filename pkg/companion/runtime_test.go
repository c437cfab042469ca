package companion

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	testingclock "k8s.io/utils/clock/testing"
)

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestRuntimeHealth(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(t0)
	var runtimeErr error
	var events []string
	rh, err := NewRuntimeHealth(RuntimeHealthConfig{
		Errors: func() error { return runtimeErr },
		Clock:  clk,
		Recorder: func(eventType, reason, message, source string) {
			events = append(events, strings.Join([]string{eventType, reason, message, source}, "|"))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(status v1.ConditionStatus, reason, message string, transition time.Time) {
		t.Helper()
		c := rh.Conditions()
		if len(c) != 1 || c[0].Type != "ContainerRuntimeUnhealthy" || c[0].Status != status || c[0].Reason != reason ||
			c[0].Message != message || !c[0].LastTransitionTime.Time.Equal(transition) {
			t.Errorf("condition = %+v", c)
		}
	}
	check(v1.ConditionFalse, "ContainerRuntimeIsHealthy", "Container runtime on the node is functioning properly", t0)

	clk.Step(5 * time.Second)
	runtimeErr = errors.New("rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: no such file or directory\"")
	t1 := clk.Now()
	check(v1.ConditionTrue, "ContainerdUnhealthy", runtimeErr.Error()[:80], t1)
	clk.Step(5 * time.Second)
	first := runtimeErr.Error()[:80]
	runtimeErr = errors.New("another error")
	check(v1.ConditionTrue, "ContainerdUnhealthy", first, t1) // stays True: keeps its message
	clk.Step(5 * time.Second)
	runtimeErr = nil
	check(v1.ConditionFalse, "ContainerRuntimeIsHealthy", "Container runtime on the node is functioning properly", clk.Now())
	check(v1.ConditionFalse, "ContainerRuntimeIsHealthy", "Container runtime on the node is functioning properly", t1.Add(10*time.Second))

	want := []string{
		`Warning|ContainerdUnhealthy|Node condition ContainerRuntimeUnhealthy is now: True, reason: ContainerdUnhealthy, message: "rpc error: code = Unavailable desc = connection error: desc = \"transport: Error "|health-checker`,
		`Normal|ContainerRuntimeIsHealthy|Node condition ContainerRuntimeUnhealthy is now: False, reason: ContainerRuntimeIsHealthy, message: "Container runtime on the node is functioning properly"|health-checker`,
	}
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
	}
	if _, err := NewRuntimeHealth(RuntimeHealthConfig{}); err == nil {
		t.Error("no error without Errors")
	}
}
