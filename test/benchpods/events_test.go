package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func TestEventsWritten(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	ev := func(name, kind, reason string, given, created time.Time) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(created)},
			InvolvedObject: corev1.ObjectReference{Kind: kind, Name: "x"}, Reason: reason,
			FirstTimestamp: metav1.NewTime(given),
		}
	}
	tests := []struct {
		name   string
		events []runtime.Object
		want   string
	}{
		{"none", nil, "none"},
		{"outside the window only", []runtime.Object{ev("a", "Pod", "Started", t0.Add(-time.Minute), t0.Add(-time.Second)), ev("b", "Pod", "Started", t0, t0.Add(time.Minute))}, "none"},
		{"counted by kind and reason, most first; the longest wait", []runtime.Object{
			ev("a", "Pod", "Started", t0.Add(-90*time.Second), t0.Add(10*time.Second)),
			ev("b", "Pod", "Pulled", t0.Add(5*time.Second), t0.Add(5*time.Second)),
			ev("c", "Pod", "Pulled", t0.Add(6*time.Second), t0.Add(7*time.Second)),
			ev("d", "Node", "NodeReady", t0.Add(8*time.Second), t0.Add(8*time.Second)),
		}, "4: Pod Pulled 2, Node NodeReady 1, Pod Started 1; longest wait in the recorder 1m40s; the last stored 10s into the window"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := eventsWritten(t.Context(), fake.NewClientset(tc.events...), t0, t0.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
