package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeagent/nodeagent/test/framework"
)

// The systems the suite runs against, each on a control plane of its own.
const (
	systemNodeagent = "nodeagent"
	systemKWOK      = "kwok"
)

// kwokAnnotation is the annotation kwokctl gives the Nodes it creates (kustomize/kwokctl/resource/node.yaml).
const kwokAnnotation = "kwok.x-k8s.io/node"

// startNodeagent starts `nodeagent simulate --nodes=n` (Nodes e2e-0...) with simArgs, logging to dir, with
// the simulated Nodes' kubelet API on, as by default: at this machine's first IPv4 address that is not
// loopback (framework.HostIP; the API server reaches a Node at its InternalIP, --node-ip), the Nodes on
// o.nodes consecutive free ports (freePorts), the API server's kubelet client CA (clientCA) trusted.
func startNodeagent(o options, kubeconfig, clientCA, dir string) (*framework.Process, error) {
	agent, err := framework.BuildAgent()
	if err != nil {
		return nil, err
	}
	ip, err := framework.HostIP()
	if err != nil {
		return nil, fmt.Errorf("the simulated Nodes' kubelet API: %w", err)
	}
	port, err := freePorts(ip.String(), o.nodes)
	if err != nil {
		return nil, err
	}
	args := append([]string{"simulate", "--kubeconfig=" + kubeconfig, "--nodes=" + strconv.Itoa(o.nodes),
		"--node-name-prefix=e2e-", "--healthz-bind-address=127.0.0.1", "--healthz-port=" + strconv.Itoa(framework.FreePort()),
		"--delete-nodes-on-exit", "--address=" + ip.String(), "--node-ip=" + ip.String(), "--port=" + strconv.Itoa(port),
		"--client-ca-file=" + clientCA}, o.simArgs...)
	return framework.StartProcess("nodeagent simulate", filepath.Join(dir, "simulate.log"), agent, args...)
}

// freePorts returns the first of n consecutive TCP ports free on ip: framework.FreePort's (reserved for this
// process), followed by n-1 that could be listened on when asked. An error after 100 tries.
func freePorts(ip string, n int) (int, error) {
	for range 100 {
		first, ok := framework.FreePort(), true
		for p := first + 1; p < first+n && ok; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
			if ok = err == nil; ok {
				l.Close()
			}
		}
		if ok {
			return first, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports on %s after 100 tries", n, ip)
}

// startKWOK creates n Nodes as `kwokctl scale node` does (kwokNode) and starts the KWOK controller
// (o.kwokBinDir/kwok, v0.8.0, built by hack/build-kwok.sh) over every Node of the cluster, as kwokctl starts
// it (--manage-all-nodes=true, --node-lease-duration-seconds=40, --node-name=localhost: the node-initialize
// Stage gives a Node without a Hostname address that name, and drops its addresses when the name is empty),
// with kwokctl's default Stages: the node
// Stages node-initialize and node-heartbeat-with-lease and the pod Stages of kustomize/stage/pod/fast
// (pod-ready, pod-complete, pod-delete), which hack/build-kwok.sh writes beside the binary. One difference
// from kwokctl: KWOK's own server (exec, logs, port-forward through ClusterExec/ClusterLogs resources, of which
// kwokctl creates none by default) is off (--server-address=), as in test/benchpods.
func startKWOK(ctx context.Context, o options, client kubernetes.Interface, kubeconfig, dir string) (*framework.Process, error) {
	for i := range o.nodes {
		if _, err := client.CoreV1().Nodes().Create(ctx, kwokNode(i), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create KWOK's Node %d: %w", i, err)
		}
	}
	return framework.StartProcess("kwok", filepath.Join(dir, "kwok.log"), filepath.Join(o.kwokBinDir, "kwok"),
		"--kubeconfig="+kubeconfig,
		"--config="+filepath.Join(o.kwokBinDir, "kwok-node-stages.yaml"),
		"--config="+filepath.Join(o.kwokBinDir, "kwok-pod-stages.yaml"),
		"--manage-all-nodes=true", "--node-lease-duration-seconds=40", "--node-name=localhost", "--server-address=")
}

// kwokNode is Node i (kwok-node-<i>) as kwokctl's node template (kustomize/kwokctl/resource/node.yaml of
// KWOK v0.8.0) renders it with its default parameters: annotation kwok.x-k8s.io/node=fake, no taint, the
// kubernetes.io labels, allocatable and capacity cpu 32, memory 256Gi, pods 110, InternalIP 192.0.2.<1+i>.
// Two differences, both because the control plane is single-stack IPv4 with nodeipam: the template's podCIDRs
// (10.0.<i>.0/24, fd00:0:0:<i>::/64) are left out, for nodeipam to allocate from --cluster-cidr as it does for
// nodeagent's Nodes, and so is its IPv6 InternalIP (2001:db8::<1+i>).
func kwokNode(i int) *corev1.Node {
	name := fmt.Sprintf("kwok-node-%d", i)
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				kwokAnnotation:                         "fake",
				"node.alpha.kubernetes.io/ttl":         "0",
				"metrics.k8s.io/resource-metrics-path": "/metrics/nodes/" + name + "/metrics/resource",
			},
			Labels: map[string]string{
				"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
				"kubernetes.io/role": "agent", "node-role.kubernetes.io/agent": "", "type": "kwok",
			},
		},
		Status: corev1.NodeStatus{
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.0.2.%d", 1+i)}},
			Allocatable: res,
			Capacity:    res.DeepCopy(),
			NodeInfo:    corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux"},
		},
	}
}
