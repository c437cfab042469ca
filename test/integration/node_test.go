package integration_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/nodeagent/nodeagent/pkg/version"
	"github.com/nodeagent/nodeagent/test/framework"
)

// TestRegistrationInitialNode: the agent registers its Node as system:node:<name> with the default labels,
// --node-labels, --register-with-taints, --register-schedulable=false (spec.unschedulable and the
// unschedulable taint), --cloud-provider=external (the uninitialized taint), --provider-id and the
// attach-detach annotation.
func TestRegistrationInitialNode(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeRegistration
	startAgent(t, e.cp, name, e.ctrd,
		"--node-labels=example.com/tier=edge,rack=r1",
		"--register-with-taints=dedicated=edge:NoSchedule,example.com/gpu:NoExecute",
		"--register-schedulable=false",
		"--cloud-provider=external",
		"--provider-id=integration://"+name)
	node := framework.WaitReady(t.Context(), t, e.cp.AdminClient, name, 2*time.Minute)

	wantLabels := map[string]string{
		"kubernetes.io/hostname":  name,
		"kubernetes.io/os":        runtime.GOOS,
		"kubernetes.io/arch":      runtime.GOARCH,
		"beta.kubernetes.io/os":   runtime.GOOS,
		"beta.kubernetes.io/arch": runtime.GOARCH,
		"example.com/tier":        "edge",
		"rack":                    "r1",
	}
	for k, v := range wantLabels {
		if got, ok := node.Labels[k]; !ok || got != v {
			t.Errorf("label %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if got := node.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"]; got != "true" {
		t.Errorf("annotation volumes.kubernetes.io/controller-managed-attach-detach = %q, want \"true\"", got)
	}
	if !node.Spec.Unschedulable {
		t.Error("spec.unschedulable = false with --register-schedulable=false")
	}
	if got, want := node.Spec.ProviderID, "integration://"+name; got != want {
		t.Errorf("spec.providerID = %q, want %q", got, want)
	}
	wantTaints := []corev1.Taint{
		{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/gpu", Effect: corev1.TaintEffectNoExecute},
		{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
		{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule},
	}
	for _, want := range wantTaints {
		if !slices.ContainsFunc(node.Spec.Taints, func(got corev1.Taint) bool {
			return got.Key == want.Key && got.Value == want.Value && got.Effect == want.Effect
		}) {
			t.Errorf("taint %s=%s:%s missing; taints %v", want.Key, want.Value, want.Effect, node.Spec.Taints)
		}
	}

	// The Node was created by the node's own identity, once, and accepted (201).
	creates := auditCreates(t, e.cp, name)
	if len(creates) != 1 || creates[0] != 201 {
		t.Errorf("creates of nodes by system:node:%s: response codes %v, want exactly [201]", name, creates)
	}
}

// auditCreates returns the response codes of every completed create of nodes by system:node:<name>.
func auditCreates(t *testing.T, cp *framework.ControlPlane, name string) []int {
	t.Helper()
	events, err := framework.ReadAuditEventsBy(cp.AuditLogPath, "system:node:"+name, func(e framework.AuditEvent) bool {
		return e.Is("create", "nodes", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	for _, ev := range events {
		codes = append(codes, ev.Code())
	}
	return codes
}

// TestRegistrationRestartReusesNode: an agent restarted on the same node finds its Node (create answers 409,
// then get and reconcile), keeps the same object (same UID), restores the default labels and the
// attach-detach annotation an admin removed meanwhile, syncs its status and renews its Lease again.
func TestRegistrationRestartReusesNode(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeRestart
	client := e.cp.AdminClient
	a := startAgent(t, e.cp, name, e.ctrd)
	first := framework.WaitReady(t.Context(), t, client, name, 2*time.Minute)
	if err := a.Stop(); err != nil {
		t.Fatalf("first agent did not exit cleanly: %v", err)
	}

	// Meanwhile an admin drops a default label and the annotation; the restarted agent reconciles them.
	patch := `{"metadata":{"labels":{"beta.kubernetes.io/arch":null},"annotations":{"volumes.kubernetes.io/controller-managed-attach-detach":null}}}`
	if _, err := client.CoreV1().Nodes().Patch(t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	a2 := startAgent(t, e.cp, name, e.ctrd)
	// The restarted agent registered (found the Node) and synced its status (/readyz), and heartbeats
	// through the Lease. (An unchanged status is not re-posted until the report period has passed since
	// the Node's last heartbeat.)
	rctx, rcancel := context.WithTimeout(t.Context(), 2*time.Minute)
	err := a2.WaitHTTP(rctx, "/readyz", http.StatusOK)
	rcancel()
	if err != nil {
		t.Fatalf("restarted agent: %v", err)
	}
	times := framework.WaitLeaseRenewals(t.Context(), t, client, name, 1, time.Minute)
	if !times[len(times)-1].After(restarted) {
		t.Errorf("lease renewTime %v not after the restart at %v", times[len(times)-1], restarted)
	}
	node, _ := framework.WaitNode(t.Context(), t, client, name, time.Minute, "Ready, default label and annotation restored",
		func(n *corev1.Node) bool {
			return framework.IsReady(n) && n.Labels["beta.kubernetes.io/arch"] == runtime.GOARCH &&
				n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] == "true"
		})
	if node.UID != first.UID {
		t.Errorf("restarted agent's Node has UID %s, want the original %s", node.UID, first.UID)
	}
	l, err := framework.GetLease(t.Context(), client, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != first.UID {
		t.Errorf("lease owner references %v, want the original Node %s", l.OwnerReferences, first.UID)
	}
	creates := auditCreates(t, e.cp, name)
	if len(creates) != 2 || creates[0] != 201 || creates[1] != 409 {
		t.Errorf("creates of nodes by system:node:%s: response codes %v, want [201 409] (one object, found again on restart)", name, creates)
	}
	ms, err := a2.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := ms.Get("nodeagent_node_registration_attempts_total", map[string]string{"result": "existing"}); v != 1 {
		t.Errorf(`restarted agent: nodeagent_node_registration_attempts_total{result="existing"} = %v, want 1`, v)
	}
	if v, ok := ms.Get("nodeagent_node_registration_attempts_total", map[string]string{"result": "created"}); ok && v != 0 {
		t.Errorf(`restarted agent: nodeagent_node_registration_attempts_total{result="created"} = %v, want 0`, v)
	}
}

// TestRegisterNodeFalse: with --register-node=false the agent never creates the Node (it keeps running and
// would report status for a Node someone else created).
func TestRegisterNodeFalse(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeNoRegister
	a := startAgent(t, e.cp, name, e.ctrd, "--register-node=false")
	// Several fast-path ticks and two status periods.
	time.Sleep(25 * time.Second)
	if !a.Running() {
		t.Fatalf("agent exited with --register-node=false")
	}
	_, err := e.cp.AdminClient.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Get node %s with --register-node=false: %v, want NotFound", name, err)
	}
	if creates := auditCreates(t, e.cp, name); len(creates) != 0 {
		t.Errorf("creates of nodes by system:node:%s: %v, want none", name, creates)
	}
}

// TestNodeStatusReportsHost: the conditions, capacity, allocatable, nodeInfo and addresses of a Ready node
// are the host's and the runtime's, read independently here.
func TestNodeStatusReportsHost(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeStatus
	const maxPods = 57
	a := startAgent(t, e.cp, name, e.ctrd, "--max-pods="+strconv.Itoa(maxPods),
		"--system-reserved=cpu=100m,memory=100Mi,ephemeral-storage=1Gi",
		"--kube-reserved=cpu=200m,memory=50Mi,ephemeral-storage=512Mi",
		// A nodefs threshold no host near full trips (the default 10% does on a shared build machine:
		// framework.HarnessEvictionHard), merged into the harness's thresholds.
		"--eviction-hard=nodefs.available<100Mi")
	node := framework.WaitReady(t.Context(), t, e.cp.AdminClient, name, 2*time.Minute)

	// With default frequencies, the agent's own view agrees within a couple of status periods: Ready gauge,
	// Ready condition gauge, time to Ready and last sync (the metrics an operator alerts on).
	_, d := framework.WaitMetrics(t.Context(), t, a, 30*time.Second, "node_ready 1 with default flags", func(ms *framework.Metrics) bool {
		ready, _ := ms.Get("nodeagent_node_ready", nil)
		cond, _ := ms.Get("nodeagent_node_condition", map[string]string{"condition": "Ready", "status": "True"})
		startup, _ := ms.Get("nodeagent_startup_to_ready_duration_seconds", nil)
		last, _ := ms.Get("nodeagent_node_status_last_sync_timestamp_seconds", nil)
		return ready == 1 && cond == 1 && startup > 0 && last > 0
	})
	t.Logf("metrics agree the node is Ready %v after the Node did", d.Round(time.Millisecond))

	// Conditions, as the kubelet's.
	wantConds := []struct {
		typ            corev1.NodeConditionType
		status         corev1.ConditionStatus
		reason, messge string
	}{
		{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
		{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""},
		{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""},
		{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""},
	}
	for _, w := range wantConds {
		c := framework.NodeCondition(node, w.typ)
		if c == nil {
			t.Errorf("condition %s missing", w.typ)
			continue
		}
		if c.Status != w.status || c.Reason != w.reason || (w.messge != "" && c.Message != w.messge) {
			t.Errorf("condition %s = %s %q %q, want %s %q %q", w.typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.messge)
		}
		if c.LastHeartbeatTime.IsZero() || c.LastTransitionTime.IsZero() {
			t.Errorf("condition %s has zero heartbeat or transition time", w.typ)
		}
	}

	// Capacity: the host's.
	capacity, alloc := node.Status.Capacity, node.Status.Allocatable
	if got := capacity.Cpu().MilliValue(); got != int64(runtime.NumCPU())*1000 {
		t.Errorf("capacity cpu = %dm, want %dm (runtime.NumCPU %d)", got, runtime.NumCPU()*1000, runtime.NumCPU())
	}
	if out, err := exec.Command("nproc").Output(); err == nil {
		if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); int64(n) != capacity.Cpu().Value() {
			t.Errorf("capacity cpu = %v, nproc says %d", capacity.Cpu(), n)
		}
	}
	memTotal := memTotalBytes(t)
	if got := capacity.Memory().Value(); got != memTotal {
		t.Errorf("capacity memory = %d, want MemTotal %d bytes", got, memTotal)
	}
	if got := capacity.Pods().Value(); got != maxPods {
		t.Errorf("capacity pods = %d, want --max-pods %d", got, maxPods)
	}
	eph, ok := capacity[corev1.ResourceEphemeralStorage]
	if !ok || eph.Value() <= 0 {
		t.Fatalf("capacity ephemeral-storage = %v (present %v), want > 0", eph.String(), ok)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(a.RootDir, &st); err != nil {
		t.Fatal(err)
	}
	if fsBytes := int64(st.Blocks) * st.Bsize; absDiff(eph.Value(), fsBytes) > fsBytes/100 {
		t.Errorf("capacity ephemeral-storage = %d, want the root dir's filesystem size %d (±1%%)", eph.Value(), fsBytes)
	}

	// Allocatable = capacity − system-reserved − kube-reserved − eviction-hard (memory.available<100Mi,
	// nodefs.available<100Mi).
	const mi, gi = int64(1) << 20, int64(1) << 30
	if got, want := alloc.Cpu().MilliValue(), capacity.Cpu().MilliValue()-300; got != want {
		t.Errorf("allocatable cpu = %dm, want %dm", got, want)
	}
	if got, want := alloc.Memory().Value(), memTotal-150*mi-100*mi; got != want {
		t.Errorf("allocatable memory = %d, want %d (MemTotal − 150Mi reserved − 100Mi eviction)", got, want)
	}
	if got := alloc.Pods().Value(); got != maxPods {
		t.Errorf("allocatable pods = %d, want %d", got, maxPods)
	}
	wantEph := eph.Value() - gi - 512*mi - 100*mi
	if got := alloc[corev1.ResourceEphemeralStorage]; absDiff(got.Value(), wantEph) > mi {
		t.Errorf("allocatable ephemeral-storage = %d, want %d (capacity − 1.5Gi reserved − 100Mi eviction)", got.Value(), wantEph)
	}

	// nodeInfo.
	info := node.Status.NodeInfo
	// The kubelet parses the runtime's version (semver, else generic): Debian's "1.6.20~ds1" reads 1.6.20.
	raw := containerdVersion(t)
	want := raw
	if v, err := utilversion.ParseGeneric(raw); err == nil {
		want = v.String()
	}
	if want := "containerd://" + want; info.ContainerRuntimeVersion != want {
		t.Errorf("containerRuntimeVersion = %q, want %q (containerd --version says %s)", info.ContainerRuntimeVersion, want, raw)
	}
	var uts syscall.Utsname
	if err := syscall.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	if want := utsString(uts.Release[:]); info.KernelVersion != want {
		t.Errorf("kernelVersion = %q, want uname -r %q", info.KernelVersion, want)
	}
	if want := osReleasePrettyName(t); info.OSImage != want {
		t.Errorf("osImage = %q, want PRETTY_NAME %q", info.OSImage, want)
	}
	if want := firstFile("/etc/machine-id", "/var/lib/dbus/machine-id"); info.MachineID != want {
		t.Errorf("machineID = %q, want %q", info.MachineID, want)
	}
	if want := firstFile("/proc/sys/kernel/random/boot_id"); info.BootID != want {
		t.Errorf("bootID = %q, want %q", info.BootID, want)
	}
	// The Kubernetes version nodeagent mirrors, with the agent's own version as build metadata.
	if want := version.KubernetesVersion + "+nodeagent." + strings.TrimPrefix(agentVersion(t), "v"); info.KubeletVersion != want {
		t.Errorf("kubeletVersion = %q, want %q", info.KubeletVersion, want)
	}
	if info.OperatingSystem != runtime.GOOS || info.Architecture != runtime.GOARCH {
		t.Errorf("operatingSystem/architecture = %s/%s, want %s/%s", info.OperatingSystem, info.Architecture, runtime.GOOS, runtime.GOARCH)
	}

	// Addresses: Hostname is the node name; InternalIP is one of this host's addresses.
	var hostnames, internal []string
	for _, ad := range node.Status.Addresses {
		switch ad.Type {
		case corev1.NodeHostName:
			hostnames = append(hostnames, ad.Address)
		case corev1.NodeInternalIP:
			internal = append(internal, ad.Address)
		}
	}
	if !slices.Equal(hostnames, []string{name}) {
		t.Errorf("Hostname addresses = %v, want [%s]", hostnames, name)
	}
	hostIPs := hostAddresses(t)
	if len(internal) == 0 {
		t.Errorf("no InternalIP address; addresses %v", node.Status.Addresses)
	}
	for _, ip := range internal {
		if !slices.Contains(hostIPs, ip) {
			t.Errorf("InternalIP %s is not an address of this host %v", ip, hostIPs)
		}
	}
}

// TestNodeStatusImages: an image imported into the runtime shows up in status.images within a couple of
// status periods (default --node-status-update-frequency 10 s).
func TestNodeStatusImages(t *testing.T) {
	t.Parallel()
	e := shared(t)
	const name = nodeImages
	c := startContainerd(t, true) // its own runtime, so its image list is this test's alone
	startAgent(t, e.cp, name, c)
	node := framework.WaitReady(t.Context(), t, e.cp.AdminClient, name, 2*time.Minute)
	const ref = "example.com/nodeagent/status-image:v1"
	for _, im := range node.Status.Images {
		if slices.Contains(im.Names, ref) {
			t.Fatalf("image %s in status before it was imported", ref)
		}
	}
	tarPath := filepath.Join(t.TempDir(), "image.tar")
	if err := framework.WriteImageTar(tarPath, ref, map[string][]byte{"/hello": []byte("#!/bin/sh\necho hello\n")}); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(t.Context(), tarPath); err != nil {
		t.Fatal(err)
	}
	node, d := framework.WaitNode(t.Context(), t, e.cp.AdminClient, name, 90*time.Second, "imported image in status.images",
		func(n *corev1.Node) bool {
			return slices.ContainsFunc(n.Status.Images, func(im corev1.ContainerImage) bool { return slices.Contains(im.Names, ref) })
		})
	t.Logf("image in status.images %v after import", d.Round(time.Millisecond))
	if d > 35*time.Second {
		t.Errorf("image took %v to appear in status.images, want within a couple of 10 s status periods", d)
	}
	for _, im := range node.Status.Images {
		if slices.Contains(im.Names, ref) {
			if im.SizeBytes <= 0 {
				t.Errorf("image %s sizeBytes = %d, want > 0", ref, im.SizeBytes)
			}
			if len(im.Names) > 5 {
				t.Errorf("image %s has %d names, want at most 5", ref, len(im.Names))
			}
		}
	}
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// memTotalBytes reads MemTotal from /proc/meminfo, in bytes.
func memTotalBytes(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// containerdVersion is the version `containerd --version` prints (its third field, e.g. 1.6.20~ds1).
func containerdVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("containerd", "--version").Output()
	if err != nil {
		t.Fatalf("containerd --version: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		t.Fatalf("containerd --version printed %q", out)
	}
	return f[2]
}

// agentVersion is the version `nodeagent version` prints (its second field).
func agentVersion(t *testing.T) string {
	t.Helper()
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("nodeagent version: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		t.Fatalf("nodeagent version printed %q", out)
	}
	return f[1]
}

func utsString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// osReleasePrettyName is PRETTY_NAME from /etc/os-release, unquoted.
func osReleasePrettyName(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				return u
			}
			return strings.Trim(v, `"'`)
		}
	}
	t.Fatal("no PRETTY_NAME in /etc/os-release")
	return ""
}

// firstFile returns the trimmed content of the first readable file of paths, or "".
func firstFile(paths ...string) string {
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// hostAddresses lists the IP addresses of this host's interfaces.
func hostAddresses(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}
