package integration_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// tooManyPods is how the real kube-scheduler's NodeResourcesFit plugin names a node whose pods capacity
// (allocatable pods) is used up.
var tooManyPods = regexp.MustCompile(`(?i)too many pods|insufficient pods`)

// TestSchedulerNoPodsOnStandaloneNode (issue 14): a node that runs no pods must not attract them. With the
// real kube-scheduler against the shared control plane, nodeagent in standalone mode with default flags
// reports no pods capacity, so neither an ordinary pod nor one tolerating every taint is bound to its node,
// and the scheduler's FailedScheduling event gives the reason (too many pods); with --max-pods=10 given
// explicitly, both are bound. Each pod is pinned to its node by the kubernetes.io/hostname label, so the
// other nodes of the shared control plane take no part.
func TestSchedulerNoPodsOnStandaloneNode(t *testing.T) {
	t.Parallel()
	e := shared(t)
	ctx := t.Context()
	admin := e.cp.AdminClient
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := e.cp.StartScheduler(sctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-scheduler ready in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := e.cp.StopScheduler(); err != nil {
			t.Errorf("stop kube-scheduler: %v", err)
		}
	})
	// A namespace with its default ServiceAccount (no controller here creates it), which pods need.
	const ns = "scheduler-test"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		node      string
		args      []string
		wantBound bool
	}{
		{"default flags: no pods", nodeSchedDefault, nil, false},
		{"--max-pods=10: pods bound", nodeSchedMaxPods, []string{"--max-pods=10"}, true},
	} {
		t.Run(strings.NewReplacer(" ", "_", ":", "").Replace(tc.name), func(t *testing.T) {
			t.Parallel()
			startAgent(t, e.cp, tc.node, e.ctrd, tc.args...)
			node := framework.WaitReady(ctx, t, admin, tc.node, 2*time.Minute)
			t.Logf("node %s: capacity pods %v, allocatable pods %v", tc.node, node.Status.Capacity.Pods(), node.Status.Allocatable.Pods())

			checkScheduling(ctx, t, admin, ns, tc.node, tc.wantBound)
		})
	}
}

// checkScheduling creates in namespace ns an ordinary pod and one tolerating every taint, both pinned to
// node, and checks that the real kube-scheduler binds both to node (wantBound), or else binds neither and
// records a FailedScheduling event for each that names the pods capacity. It polls for up to a minute per
// pod and deletes the pods when the test ends.
func checkScheduling(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns, node string, wantBound bool) {
	t.Helper()
	pods := admin.CoreV1().Pods(ns)
	var names []string
	for _, tolerate := range []bool{false, true} {
		pod := pinnedPod(node, tolerate)
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, pod.Name)
		t.Cleanup(func() {
			zero := int64(0) // no kubelet will confirm a graceful deletion
			_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
	}

	for _, name := range names {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		if wantBound {
			err := framework.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
				p, err := pods.Get(wctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if p.Spec.NodeName != "" {
					return true, nil
				}
				return false, fmt.Errorf("pod not bound; PodScheduled %s", podScheduled(p))
			})
			cancel()
			if err != nil {
				t.Errorf("pod %s not bound to %s: %v", name, node, err)
				continue
			}
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.NodeName != node {
				t.Errorf("pod %s bound to %q, want %s", name, p.Spec.NodeName, node)
			}
			t.Logf("pod %s bound to %s", name, p.Spec.NodeName)
			continue
		}
		// The scheduler tries the pod, records why it cannot place it, and leaves it unbound.
		var msg string
		err := framework.WaitFor(wctx, 100*time.Millisecond, func() (bool, error) {
			evs, err := admin.CoreV1().Events(ns).List(wctx, metav1.ListOptions{FieldSelector: fields.Set{
				"involvedObject.kind": "Pod", "involvedObject.name": name, "reason": "FailedScheduling"}.String()})
			if err != nil {
				return false, err
			}
			if p, err := pods.Get(wctx, name, metav1.GetOptions{}); err == nil && p.Spec.NodeName != "" {
				return false, fmt.Errorf("pod %s bound to %s: %w", name, p.Spec.NodeName, framework.ErrStop)
			}
			for _, ev := range evs.Items {
				msg = ev.Message
				if tooManyPods.MatchString(ev.Message) {
					return true, nil
				}
			}
			return false, fmt.Errorf("no FailedScheduling event naming the pods capacity (last: %q)", msg)
		})
		cancel()
		if err != nil {
			t.Errorf("pod %s, pinned to %s, not left unscheduled for want of pods capacity: %v", name, node, err)
			continue
		}
		// kube-scheduler records the event and patches the condition separately, in no fixed order: the
		// condition may come a moment after the event.
		var p *corev1.Pod
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = framework.WaitFor(cctx, 100*time.Millisecond, func() (bool, error) {
			var err error
			if p, err = pods.Get(cctx, name, metav1.GetOptions{}); err != nil {
				return false, err
			}
			if p.Spec.NodeName != "" {
				return false, framework.ErrStop
			}
			return strings.Contains(podScheduled(p), "False Unschedulable"), nil
		})
		cancel()
		if err != nil && p == nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Errorf("pod %s after FailedScheduling: node %q, PodScheduled %s; want unbound, False Unschedulable (%v)",
				name, p.Spec.NodeName, podScheduled(p), err)
		}
		t.Logf("pod %s not scheduled: %s", name, msg)
	}
}

// pinnedPod is a pod of the pause image that only node may take (nodeSelector kubernetes.io/hostname),
// tolerating every taint if tolerate.
func pinnedPod(node string, tolerate bool) *corev1.Pod {
	name := node + "-plain"
	var tolerations []corev1.Toleration
	if tolerate {
		name = node + "-tolerating"
		tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Tolerations:  tolerations,
			Containers:   []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// podScheduled describes the pod's PodScheduled condition ("<status> <reason>: <message>").
func podScheduled(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "(none)"
}
