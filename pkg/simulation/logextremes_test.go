package simulation

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

// readLogsQuery decodes query as the kubelet's API does and reads at most max bytes of the log
// (a stream that would never end is cut there).
func readLogsQuery(t *testing.T, st *Streaming, query string, max int) (string, error) {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	opts, _, err := kubeletserver.DecodeLogOptions(q)
	if err != nil {
		return "", err
	}
	rc, err := st.GetContainerLogs(context.Background(), "ns", "p", "c", opts)
	if err != nil {
		return "", err
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(io.LimitReader(rc, int64(max)))
	return string(b), err
}

// TestLogOptionsExtremes: each log option at its extreme gets the kubelet's answer (its
// kuberuntime ReadLogs over k8s.io/cri-client's ReadLogs), never an overflow (issue 45, item 4:
// sinceTime=9999-12-31T23:59:59Z streamed lines numbered -9223372033… for ever).
func TestLogOptionsExtremes(t *testing.T) {
	ann := map[string]string{AnnotationLogLines: "2", AnnotationLogPeriod: "10s", AnnotationLogText: "hello"}
	// now: 25 s into the current run (started streamT0+1m): lines 0,1 at start, 2 at +10s, 3 at +20s.
	st := &Streaming{Pods: onePod{logPod(ann)}, Clock: testingclock.NewFakeClock(streamT0.Add(time.Minute + 25*time.Second))}
	noPeriod := &Streaming{Pods: onePod{logPod(map[string]string{AnnotationLogLines: "3"})}, Clock: st.Clock}
	all := "hello container=c restart=1 line=0\nhello container=c restart=1 line=1\nhello container=c restart=1 line=2\nhello container=c restart=1 line=3\n"
	maxInt64 := strconv.FormatInt(1<<63-1, 10)
	for _, tc := range []struct {
		name, query string
		st          *Streaming
		want        string
	}{
		// The kubelet skips every line before since: none is at or after a time to come.
		{"sinceTime at the end of time", "sinceTime=9999-12-31T23:59:59Z", st, ""},
		{"sinceTime at the end of time, tail", "sinceTime=9999-12-31T23:59:59Z&tailLines=2", st, ""},
		{"sinceTime at the end of time, timestamps", "sinceTime=9999-12-31T23:59:59Z&timestamps=true", st, ""},
		{"sinceTime at the end of time, no period", "sinceTime=9999-12-31T23:59:59Z", noPeriod, ""},
		{"sinceTime 300 years on", "sinceTime=2326-11-27T08:01:00Z", st, ""},
		{"sinceTime 292 years on", "sinceTime=2318-11-27T08:01:00Z", st, ""},
		{"sinceTime in a second", "sinceTime=2026-11-27T08:01:26Z", st, ""},
		{"sinceTime at the start of time", "sinceTime=0001-01-01T00:00:00Z", st, all},
		{"sinceTime before the epoch", "sinceTime=1900-01-01T00:00:00Z", st, all},
		// sinceSeconds: the kubelet's now.Add(-time.Duration(s) * time.Second).
		{"sinceSeconds before the epoch", "sinceSeconds=2000000000", st, all},
		{"sinceSeconds 285 years", "sinceSeconds=9000000000", st, all},
		{"sinceSeconds wrapping to a time to come", "sinceSeconds=10000000000", st, ""},
		{"sinceSeconds max int64", "sinceSeconds=" + maxInt64, st, ""},
		{"tailLines max int64", "tailLines=" + maxInt64, st, all},
		{"tail max int64", "tail=" + maxInt64, st, all},
		{"tailLines 0", "tailLines=0", st, ""},
		{"limitBytes max int64", "limitBytes=" + maxInt64, st, all},
		{"limitBytes 1", "limitBytes=1", st, "h"},
		{"every extreme", "tailLines=" + maxInt64 + "&limitBytes=" + maxInt64 + "&sinceTime=9999-12-31T23:59:59Z&timestamps=1", st, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readLogsQuery(t, tc.st, tc.query, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %d bytes %.200q, want %q", len(got), got, tc.want)
			}
		})
	}
}

// FuzzContainerLogs decodes a log request's query as the kubelet's API does (DecodeLogOptions) and
// reads the log of a container whose lines, period, run and clock are fuzzed too, against a
// model of the kubelet's log reader over the same lines (each line's time, then tail, since,
// limitBytes, in cri-client's order): the same bytes, never a line the run has not written.
// Run with: go test -run=^$ -fuzz=FuzzContainerLogs -fuzztime=15s ./pkg/simulation
func FuzzContainerLogs(f *testing.F) {
	for _, s := range []string{
		"", "sinceTime=9999-12-31T23:59:59Z", "sinceTime=9999-12-31T23:59:59Z&follow=true", "sinceSeconds=9223372036854775807",
		"sinceSeconds=10000000000", "sinceSeconds=1", "tailLines=9223372036854775807", "tail=all", "tail=3&tailLines=1",
		"limitBytes=9223372036854775807", "limitBytes=7&timestamps=true", "sinceTime=0001-01-01T00:00:00Z&tailLines=0",
		"sinceTime=2026-11-27T08:01:10Z&tailLines=2&timestamps=1", "previous=true&sinceTime=2026-11-27T08:00:10Z",
	} {
		f.Add(s, uint16(2), uint32(10_000), int64(25*time.Second), int64(0))
		f.Add(s, uint16(0), uint32(1), int64(time.Hour), int64(-time.Hour))
	}
	f.Fuzz(func(t *testing.T, query string, lines uint16, periodMs uint32, runFor, nowShift int64) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		opts, _, err := kubeletserver.DecodeLogOptions(q)
		if err != nil {
			return
		}
		opts.Follow = false // a fuzzed stream does not wait for a clock that does not move
		// At most about 2000 lines: the model enumerates them.
		nLines := int(lines % 1000)
		period := time.Duration(periodMs%3_600_000) * time.Millisecond
		runFor = max(runFor, -runFor, 0) % int64(1000*time.Hour)
		if period > 0 {
			runFor %= int64(1000 * period)
		}
		started := streamT0
		now := started.Add(time.Duration(runFor))
		clockNow := now.Add(time.Duration(nowShift % int64(24*time.Hour)))
		ann := map[string]string{AnnotationLogLines: strconv.Itoa(nLines), AnnotationLogText: "t"}
		if period > 0 {
			ann[AnnotationLogPeriod] = period.String()
		}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: ann},
			Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "c", RestartCount: 1,
				State:                v1.ContainerState{Terminated: &v1.ContainerStateTerminated{StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(now)}},
				LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(now)}},
			}}}}
		st := &Streaming{Pods: onePod{p}, Clock: testingclock.NewFakeClock(clockNow)}

		// The model: the lines of the run [started, now], each at its time, the kubelet's way.
		startedS, endS := started, now
		restart := 1
		if opts.Previous {
			restart = 0
		}
		type line struct {
			k  int
			at time.Time
		}
		var all []line
		for k := 0; ; k++ {
			at := startedS
			if k >= nLines {
				if period == 0 {
					break
				}
				at = startedS.Add(time.Duration(k-nLines+1) * period)
			}
			if at.After(endS) {
				break
			}
			all = append(all, line{k, at})
		}
		if opts.TailSet && opts.Tail < len(all) {
			all = all[len(all)-opts.Tail:]
		}
		since := opts.SinceTime
		if opts.SinceSeconds > 0 {
			since = clockNow.Add(-time.Duration(opts.SinceSeconds) * time.Second)
		}
		var want strings.Builder
		for _, l := range all {
			if l.at.Before(since) {
				continue
			}
			if opts.Timestamps {
				want.WriteString(l.at.UTC().Format(time.RFC3339Nano) + " ")
			}
			fmt.Fprintf(&want, "t container=c restart=%d line=%d\n", restart, l.k)
		}
		w := want.String()
		if opts.LimitBytes > 0 && len(w) > opts.LimitBytes {
			w = w[:opts.LimitBytes]
		}
		rc, err := st.GetContainerLogs(context.Background(), "ns", "p", "c", opts)
		if err != nil {
			t.Fatalf("query %q: %v", query, err)
		}
		b, err := io.ReadAll(io.LimitReader(rc, int64(len(w)+1)))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b); got != w {
			t.Errorf("query %q, %d lines every %s, run %s, clock %s after its end: got %.300q, want %.300q",
				query, nLines, period, time.Duration(runFor), clockNow.Sub(now), got, w)
		}
	})
}
