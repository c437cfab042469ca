package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// eventsWritten summarizes the Events the API server stored in [from, to) (their creationTimestamp):
// how many of each involved object's kind and reason, most first, and the longest lag between the
// time the recorder gave an Event (firstTimestamp, or eventTime) and the time the API server stored
// it: a long lag is an Event that waited in the recorder's queue; and how far into the window the last
// one was stored (a storm's tail ends early; Events of the window itself go on to its end). "none" when
// there is none.
func eventsWritten(ctx context.Context, client kubernetes.Interface, from, to time.Time) (string, error) {
	l, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("listing Events: %w", err)
	}
	counts := map[string]int{}
	var maxLag, last time.Duration
	n := 0
	for _, e := range l.Items {
		created := e.CreationTimestamp.Time
		if created.Before(from) || !created.Before(to) {
			continue
		}
		n++
		last = max(last, created.Sub(from))
		counts[e.InvolvedObject.Kind+" "+e.Reason]++
		given := e.FirstTimestamp.Time
		if given.IsZero() {
			given = e.EventTime.Time
		}
		if lag := created.Sub(given); !given.IsZero() && lag > maxLag {
			maxLag = lag
		}
	}
	if n == 0 {
		return "none", nil
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return fmt.Sprintf("%d: %s; longest wait in the recorder %v; the last stored %v into the window", n, strings.Join(parts, ", "),
		maxLag.Round(time.Second), last.Round(time.Second)), nil
}
