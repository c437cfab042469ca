package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// Node names of the fidelity test: a reference kubelet and a nodeagent per scenario.
const (
	fidelityKubeletDefault = "fid-kubelet-default"
	fidelityAgentDefault   = "fid-agent-default"
	fidelityKubeletFlags   = "fid-kubelet-flags"
	fidelityAgentFlags     = "fid-agent-flags"
	fidelityKubeletImageFs = "fid-kubelet-imagefs"
	fidelityAgentImageFs   = "fid-agent-imagefs"
)

// intendedDifferences are the Node fields where nodeagent differs from the kubelet on purpose, each
// with its reason; docs/operating.md ("Where nodeagent differs from the kubelet, on purpose") lists
// the same. A field is named as flattenNode names it. The fidelity test fails on any other difference.
var intendedDifferences = map[string]string{
	"capacity/pods":    "nodeagent runs no pods: pods capacity is 0 unless --max-pods is set (issue 14)",
	"allocatable/pods": "nodeagent runs no pods: pods capacity is 0 unless --max-pods is set (issue 14)",
	"nodeInfo/kubeletVersion": "nodeagent reports the Kubernetes version it mirrors with its own version as " +
		"build metadata (v1.37.2+nodeagent.X)",
	"daemonEndpoints/kubeletEndpoint": "nodeagent serves no kubelet API (logs, exec), so it advertises port 0",
	"declaredFeatures": "the kubelet declares the pod features it supports (in-place resize, ...); nodeagent runs " +
		"no pods, so it declares none",
}

// TestFidelityWithKubelet runs the reference kubelet and nodeagent side by side on this host, on the
// same control plane and containerd with the same flags, and compares their Node objects field by field
// (issue 13): labels and annotations (the node name normalised), taints, capacity, allocatable, every
// nodeInfo field, addresses, every condition's status, reason and message, daemonEndpoints, images,
// runtimeHandlers, features and declaredFeatures. Every difference must be one of intendedDifferences.
func TestFidelityWithKubelet(t *testing.T) {
	t.Parallel()
	e := shared(t)
	nodeIP := hostIPv4(t)
	scenarios := []struct {
		name           string
		kubelet, agent string
		flags          []string
		expected       []string // intended differences that must show in this scenario
		// ownRuntime gives the scenario a containerd of its own: a kubelet under disk pressure deletes
		// every unused image of its runtime, which the shared one's other users need.
		ownRuntime   bool
		diskPressure bool // both Nodes must report DiskPressure True
	}{
		{name: "default flags", kubelet: fidelityKubeletDefault, agent: fidelityAgentDefault,
			expected: []string{"capacity/pods", "allocatable/pods", "nodeInfo/kubeletVersion", "daemonEndpoints/kubeletEndpoint", "declaredFeatures"}},
		{name: "labels, taints, max pods, reservations, eviction, node IP", kubelet: fidelityKubeletFlags, agent: fidelityAgentFlags,
			flags: []string{
				"--node-labels=topology.kubernetes.io/zone=zone-a,example.com/team=infra",
				"--register-with-taints=dedicated=infra:NoSchedule,example.com/gpu:NoExecute",
				"--max-pods=57",
				"--system-reserved=cpu=100m,memory=100Mi,ephemeral-storage=1Gi",
				"--kube-reserved=cpu=200m,memory=50Mi,ephemeral-storage=512Mi",
				// A percentage no host near full meets: under disk pressure the kubelet would delete the
				// shared runtime's unused images (the imagefs scenario below has pressure, on a runtime of its own).
				"--eviction-hard=memory.available<200Mi,nodefs.available<2%",
				"--node-ip=" + nodeIP,
			},
			expected: []string{"nodeInfo/kubeletVersion", "daemonEndpoints/kubeletEndpoint", "declaredFeatures"}},
		// The runtime's image store is on the root dir's filesystem, as on most hosts: the kubelet measures
		// imagefs there all the same, and a threshold every host meets (less than 99 % free) gives both
		// Nodes DiskPressure, while nodefs.available<2% is not met.
		{name: "imagefs threshold met on the nodefs's filesystem", kubelet: fidelityKubeletImageFs, agent: fidelityAgentImageFs,
			flags:      []string{"--eviction-hard=memory.available<100Mi,nodefs.available<2%,imagefs.available<99%"},
			expected:   []string{"capacity/pods", "allocatable/pods", "nodeInfo/kubeletVersion", "daemonEndpoints/kubeletEndpoint", "declaredFeatures"},
			ownRuntime: true, diskPressure: true},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ctx := t.Context()
			// A short directory: the kubelet's unix sockets under its root dir must fit 108 bytes.
			dir, err := os.MkdirTemp("", "fid-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			ctrd := e.ctrd
			if sc.ownRuntime {
				ctrd = startContainerd(t, true)
			}
			framework.StartTestKubelet(ctx, t, framework.KubeletOptions{
				Dir: dir, NodeName: sc.kubelet, Kubeconfig: e.cp.KubeconfigFor(sc.kubelet),
				// The harness's kubelet turns local storage capacity isolation off; the kubelet's default (on)
				// reports ephemeral-storage, as nodeagent does.
				RuntimeEndpoint: ctrd.Endpoint, Args: append([]string{"--local-storage-capacity-isolation=true"}, sc.flags...),
			})
			startAgent(t, e.cp, sc.agent, ctrd, sc.flags...)
			client := e.cp.AdminClient
			framework.WaitReady(ctx, t, client, sc.kubelet, 2*time.Minute)
			framework.WaitReady(ctx, t, client, sc.agent, 2*time.Minute)

			// Both settle (the kubelet lists images every 30 s; a second status follows registration):
			// poll until only intended differences remain, and fail with what is left otherwise.
			var diffs []string
			wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			err = framework.WaitFor(wctx, 2*time.Second, func() (bool, error) {
				k, err := client.CoreV1().Nodes().Get(wctx, sc.kubelet, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				a, err := client.CoreV1().Nodes().Get(wctx, sc.agent, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				diffs = compareNodes(flattenNode(k), flattenNode(a))
				if sc.diskPressure {
					for _, n := range []*corev1.Node{k, a} {
						if c := framework.NodeCondition(n, corev1.NodeDiskPressure); c == nil || c.Status != corev1.ConditionTrue {
							return false, fmt.Errorf("node %s: DiskPressure %+v, want True", n.Name, c)
						}
					}
				}
				return len(unintended(diffs)) == 0, nil
			})
			for _, d := range diffs {
				t.Logf("difference: %s", d)
			}
			if err != nil {
				t.Fatalf("kubelet and nodeagent Nodes still differ beyond the intended differences (or lack the pressure asked for) after 90 s: %v\n%s",
					err, strings.Join(unintended(diffs), "\n"))
			}
			for _, field := range sc.expected {
				if !slices.ContainsFunc(diffs, func(d string) bool { return strings.HasPrefix(d, field+":") }) {
					t.Errorf("intended difference %s did not show: the list in this test (and docs/operating.md) is stale", field)
				}
			}
		})
	}
}

// hostIPv4 returns a non-loopback IPv4 address of this host, for --node-ip.
func hostIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	t.Fatal("no non-loopback IPv4 address on this host")
	return ""
}

// v1TTLAnnotation is the ttl controller's annotation (k8s.io/api/core/v1.ObjectTTLAnnotationKey).
const v1TTLAnnotation = corev1.ObjectTTLAnnotationKey

// flattenNode turns the compared parts of a Node into field → value, the node's own name replaced by
// "<node>" and times left out (heartbeats and transitions differ by when each agent started).
func flattenNode(n *corev1.Node) map[string]string {
	out := map[string]string{}
	norm := func(s string) string { return strings.ReplaceAll(s, n.Name, "<node>") }
	js := func(v any) string {
		b, _ := json.Marshal(v)
		return norm(string(b))
	}
	for k, v := range n.Labels {
		out["label/"+k] = norm(v)
	}
	for k, v := range n.Annotations {
		if k == v1TTLAnnotation {
			// Written by kube-controller-manager's ttl controller, not by the node agent: a function of
			// the cluster's size when the controller last synced each Node, so two Nodes of a shared
			// control plane whose size crosses 100 (other tests' simulated Nodes) may differ for minutes.
			continue
		}
		out["annotation/"+k] = norm(v)
	}
	for _, tn := range n.Spec.Taints {
		out["taint/"+tn.Key+":"+string(tn.Effect)] = tn.Value
	}
	out["spec/unschedulable"] = fmt.Sprint(n.Spec.Unschedulable)
	out["spec/providerID"] = norm(n.Spec.ProviderID)
	for r, q := range n.Status.Capacity {
		out["capacity/"+string(r)] = q.String()
	}
	for r, q := range n.Status.Allocatable {
		out["allocatable/"+string(r)] = q.String()
	}
	var info map[string]any
	b, _ := json.Marshal(n.Status.NodeInfo)
	_ = json.Unmarshal(b, &info)
	for k, v := range info {
		out["nodeInfo/"+k] = norm(fmt.Sprint(v))
	}
	for _, a := range n.Status.Addresses {
		key := "address/" + string(a.Type)
		out[key] = strings.TrimPrefix(out[key]+","+norm(a.Address), ",")
	}
	for _, c := range n.Status.Conditions {
		out["condition/"+string(c.Type)] = fmt.Sprintf("%s %s %q", c.Status, c.Reason, norm(c.Message))
	}
	out["daemonEndpoints/kubeletEndpoint"] = fmt.Sprint(n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	var images []string
	for _, img := range n.Status.Images {
		images = append(images, fmt.Sprintf("%s=%d", strings.Join(img.Names, "|"), img.SizeBytes))
	}
	sort.Strings(images)
	out["images"] = strings.Join(images, " ")
	out["runtimeHandlers"] = js(n.Status.RuntimeHandlers)
	out["features"] = js(n.Status.Features)
	out["declaredFeatures"] = js(n.Status.DeclaredFeatures)
	out["phase"] = string(n.Status.Phase)
	return out
}

// compareNodes returns "field: kubelet=<v> nodeagent=<v>" for each field that differs, sorted.
func compareNodes(kubelet, agent map[string]string) []string {
	keys := map[string]bool{}
	for k := range kubelet {
		keys[k] = true
	}
	for k := range agent {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		kv, kok := kubelet[k]
		av, aok := agent[k]
		if kv == av && kok == aok {
			continue
		}
		if !kok {
			kv = "<absent>"
		}
		if !aok {
			av = "<absent>"
		}
		out = append(out, fmt.Sprintf("%s: kubelet=%s nodeagent=%s", k, kv, av))
	}
	sort.Strings(out)
	return out
}

// unintended returns the differences that are not in intendedDifferences.
func unintended(diffs []string) []string {
	var out []string
	for _, d := range diffs {
		field, _, _ := strings.Cut(d, ":")
		if _, ok := intendedDifferences[field]; !ok {
			out = append(out, d)
		}
	}
	return out
}
