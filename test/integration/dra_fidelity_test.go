package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/simulation"
	"github.com/nodeagent/nodeagent/test/framework"
)

// draIntendedDifferences are the fields of a pod with a claim, and of its ResourceClaim, where the
// simulated Node differs from the reference kubelet with the e2e suite's DRA test driver on purpose, each
// with its reason; docs/simulation.md ("Devices": "Fidelity") lists the same. Pod fields are named as
// flattenPodStatus names them, claim fields as flattenClaim does ("claim" prefixed). TestDRAFidelity fails
// on any other difference (beyond podIntendedDifferences and podCgroupDifferences), and on one listed here
// that no longer shows.
var draIntendedDifferences = map[string]string{
	"/containerStatuses[main]/allocatedResourcesStatus[claim:dev]/resources[0]/resourceID": "the kubelet names a device by " +
		"the first CDI device ID its driver returned from NodePrepareResources (the test driver's is " +
		"test-driver.cdi.k8s.io/test=claim-<claim uid>-<request>), else <driver>/<pool>/<device> " +
		"(cm/dra/manager.go buildResourceHealth); a simulated driver writes no CDI spec and returns no CDI device IDs",
	"/containerStatuses[main]/allocatedResourcesStatus[claim:dev]/resources[0]/health": "the e2e test driver streams " +
		"health (DRAResourceHealth) but reports no device until its in-process control channel is told one, so the kubelet " +
		"says Unknown; a simulated driver reports each device Healthy until the control API says otherwise, as a " +
		"driver that monitors its devices does",
}

// draEventIntendedDifferences are the Events ("<type> <reason>") where the two sides differ on purpose.
var draEventIntendedDifferences = map[string]string{}

// The DRA fidelity test's names.
const (
	draFidKubeletNode = "drafid-kubelet"
	draFidSimPrefix   = "drafid-node-"
	draFidKubeletNS   = "drafid-ref"
	draFidSimNS       = "drafid-simulated"
	draFidDriverNS    = "drafid-driver"
	draFidClass       = "drafid-test-driver"
)

// draFidTemplate gives the simulated Node the devices the e2e test driver publishes with --num-devices=4:
// device-00 ... device-03 of test-driver.cdi.k8s.io, no attributes.
const draFidTemplate = `apiVersion: v1
kind: Node
devices:
  drivers:
  - driver: ` + framework.DRATestDriverName + `
    devices:
    - name: device-00
    - name: device-01
    - name: device-02
    - name: device-03
`

// TestDRAFidelity (issue 49): the same pod with a claim from a ResourceClaimTemplate (one device of a
// DeviceClass of the e2e suite's DRA test driver) on the reference kubelet's Node, whose driver is the e2e
// suite's test driver (k8s.io/kubernetes/test/e2e/dra/test-driver, a kubelet plugin beside it with the
// suite's RBAC), and on a simulated Node whose template has the same driver and devices; the real
// kube-scheduler allocates and kube-controller-manager's resourceclaim controller makes and deletes the
// claims. Compared field by field: the pod status (conditions, phase, containerStatuses with
// allocatedResourcesStatus), the claim (allocation, reservedFor, finalizers), the pod's Events by reason;
// after deletion the last pod status, the claim gone, the reference driver's CDI spec removed (its
// unprepare). Then a preparation failure: the test driver fails a claim whose opaque config parameters are
// not a JSON object of strings, the simulated Node a pod with simulation.AnnotationPrepareError; both pods
// wait ContainerCreating with the kubelet's Event FailedPrepareDynamicResources, compared the same way.
func TestDRAFidelity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A short directory: the kubelet's and the driver's unix sockets under its root dir must fit 108 bytes.
	dir, err := os.MkdirTemp("", "drafid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if _, err := framework.EnsureDRATestDriver(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctrd := startContainerd(t, false)
	sctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	if err := ctrd.ImportPodImages(sctx, dir); err != nil {
		t.Fatal(err)
	}
	cp := startSchedulingControlPlane(sctx, t, framework.ControlPlaneOptions{Dir: filepath.Join(dir, "cp"), NodeNames: []string{draFidKubeletNode}},
		[]string{draFidKubeletNS, draFidSimNS}, "garbage-collector-controller", "resourceclaim-controller")
	admin := cp.AdminClient

	// The reference kubelet, with a cluster DNS address (else a MissingClusterDNS Event), and its DRA plugin
	// manager's registration logged (V(3)).
	kubelet := framework.StartTestKubelet(ctx, t, framework.KubeletOptions{Dir: filepath.Join(dir, "k"), NodeName: draFidKubeletNode,
		Kubeconfig: cp.KubeconfigFor(draFidKubeletNode), RuntimeEndpoint: ctrd.Endpoint,
		Args: []string{"--cluster-dns=10.0.0.10", "--cluster-domain=cluster.local", "--vmodule=dra_plugin_manager=3"}})
	var kubeletNode *corev1.Node
	if err := framework.WaitFor(sctx, 200*time.Millisecond, func() (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(sctx, draFidKubeletNode, metav1.GetOptions{})
		kubeletNode = n
		return err == nil && n.Spec.PodCIDR != "", nil
	}); err != nil {
		t.Fatalf("kubelet Node %s: no podCIDR from nodeipam: %v", draFidKubeletNode, err)
	}
	if err := ctrd.SetPodCIDR(kubeletNode.Spec.PodCIDR); err != nil {
		t.Fatal(err)
	}
	if err := ctrd.WaitNetwork(sctx, true); err != nil {
		t.Fatal(err)
	}
	framework.WaitReady(ctx, t, admin, draFidKubeletNode, 2*time.Minute)
	kubeconfig, err := cp.DRATestDriverKubeconfig(sctx, draFidDriverNS, framework.DRATestDriverName, draFidKubeletNode)
	if err != nil {
		t.Fatal(err)
	}
	driver := framework.StartTestDRATestDriver(ctx, t, cp, framework.DRATestDriverOptions{Dir: filepath.Join(dir, "d"),
		Kubelet: kubelet, Kubeconfig: kubeconfig, NumDevices: 4})

	startTemplatedNodes(ctx, t, cp, draFidSimPrefix, 1, writeNodeTemplate(t, draFidTemplate))
	simNode := draFidSimPrefix + "0000"
	t.Logf("control plane, kubelet Node with the DRA test driver registered, simulated Node ready after %v", time.Since(start).Round(10*time.Millisecond))

	// The two Nodes' slices: the same devices.
	sliceDevices := func(node string) string {
		l, err := admin.ResourceV1().ResourceSlices().List(sctx, metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + node})
		if err != nil || len(l.Items) != 1 {
			return fmt.Sprintf("%d slices, %v", len(l.Items), err)
		}
		s := l.Items[0]
		b, _ := json.Marshal(s.Spec.Devices)
		return fmt.Sprintf("driver %s pool %s generation %d count %d devices %s", s.Spec.Driver,
			strings.ReplaceAll(s.Spec.Pool.Name, node, "<node>"), s.Spec.Pool.Generation, s.Spec.Pool.ResourceSliceCount, b)
	}
	var ks, ss string
	if err := framework.WaitFor(sctx, 200*time.Millisecond, func() (bool, error) {
		ks, ss = sliceDevices(draFidKubeletNode), sliceDevices(simNode)
		return ks == ss, nil
	}); err != nil {
		t.Errorf("ResourceSlices differ:\nkubelet's driver: %s\nsimulated: %s", ks, ss)
	}

	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: draFidClass}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + framework.DRATestDriverName + `"`}}}}}
	if _, err := admin.ResourceV1().DeviceClasses().Create(sctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writes := newStatusWriteCounter("")
	for _, ns := range []string{draFidKubeletNS, draFidSimNS} {
		if err := writes.watch(ctx, admin, ns); err != nil {
			t.Fatal(err)
		}
		for name, config := range map[string]string{"one-device": "", "bad-config": `{"fail": 1}`} {
			spec := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
				{Name: "dev", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draFidClass}}}}}
			if config != "" {
				// Parameters the test driver cannot decode (it wants a JSON object of strings): its
				// NodePrepareResources fails for the claim.
				spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
					Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: framework.DRATestDriverName, Parameters: runtime.RawExtension{Raw: []byte(config)}}}}}
			}
			if _, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(sctx, &resourcev1.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type side struct{ ns, node string }
	sides := []side{{draFidKubeletNS, draFidKubeletNode}, {draFidSimNS, simNode}}
	nodes := map[string]*corev1.Node{}
	for _, sd := range sides {
		n, err := admin.CoreV1().Nodes().Get(sctx, sd.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[sd.ns] = n
	}
	pod := func(name, template, node string, annotations map[string]string) *corev1.Pod {
		c := podFidContainer("main")
		c.Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To(template)}},
			Containers:                    []corev1.Container{c},
		}}
	}
	podIntended := maps.Clone(podIntendedDifferences)
	maps.Copy(podIntended, podCgroupDifferences)
	maps.Copy(podIntended, draIntendedDifferences)
	seen := map[string]bool{}
	compare := func(t *testing.T, what string, final map[string]*corev1.Pod, claims map[string]*resourcev1.ResourceClaim) []string {
		t.Helper()
		kf := flattenClaimPodStatus(final[draFidKubeletNS], nodes[draFidKubeletNS], claims[draFidKubeletNS])
		sf := flattenClaimPodStatus(final[draFidSimNS], nodes[draFidSimNS], claims[draFidSimNS])
		diffs := comparePodStatuses("kubelet", kf, sf)
		claimFields := 0
		if claims[draFidKubeletNS] != nil && claims[draFidSimNS] != nil {
			kc := flattenClaim(claims[draFidKubeletNS], final[draFidKubeletNS], nodes[draFidKubeletNS])
			claimFields = len(kc)
			diffs = append(diffs, comparePodStatuses("kubelet", kc, flattenClaim(claims[draFidSimNS], final[draFidSimNS], nodes[draFidSimNS]))...)
			if os.Getenv("DRAFID_DUMP") != "" {
				for _, k := range slices.Sorted(maps.Keys(kc)) {
					t.Logf("%s: kubelet's claim field %s = %s", what, k, kc[k])
				}
			}
		}
		t.Logf("%s: %d pod fields and %d claim fields compared", what, len(kf), claimFields)
		for _, d := range diffs {
			t.Logf("%s: difference from the kubelet: %s", what, d)
			seen[intendedPodDiff(d, podIntended)] = true
		}
		return unintendedPodDiffs(diffs, podIntended)
	}
	claimOf := func(ctx context.Context, p *corev1.Pod) (*resourcev1.ResourceClaim, error) {
		if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return nil, nil
		}
		return admin.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	}
	// settle polls until both sides' pods satisfy ok and neither pod nor claim changed since the poll
	// before, then compares them; it fails the test on differences beyond the intended ones.
	settle := func(t *testing.T, what, name string, ok func(*corev1.Pod) bool) (map[string]*corev1.Pod, map[string]*resourcev1.ResourceClaim) {
		t.Helper()
		final := map[string]*corev1.Pod{}
		claims := map[string]*resourcev1.ResourceClaim{}
		prev := ""
		var unintended []string
		wctx, cancel := context.WithTimeout(sctx, 2*time.Minute)
		defer cancel()
		err := framework.WaitFor(wctx, time.Second, func() (bool, error) {
			versions := ""
			for _, sd := range sides {
				p, err := admin.CoreV1().Pods(sd.ns).Get(wctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				c, err := claimOf(wctx, p)
				if err != nil && !apierrors.IsNotFound(err) {
					return false, err
				}
				final[sd.ns], claims[sd.ns] = p, c
				versions += p.ResourceVersion
				if c != nil {
					versions += "/" + c.ResourceVersion
				}
				if !ok(p) {
					return false, nil
				}
			}
			settled := versions == prev
			prev = versions
			if !settled {
				return false, nil
			}
			unintended = compare(t, what, final, claims)
			return len(unintended) == 0, nil
		})
		if err != nil {
			b := func(ns string) string {
				j, _ := json.MarshalIndent(struct {
					Pod   corev1.PodStatus
					Claim *resourcev1.ResourceClaim
				}{final[ns].Status, claims[ns]}, "", "  ")
				return string(j)
			}
			t.Fatalf("%s: %v; unintended differences:\n%s\nkubelet:\n%s\nsimulated:\n%s", what, err,
				strings.Join(unintended, "\n"), b(draFidKubeletNS), b(draFidSimNS))
		}
		return final, claims
	}
	compareEvents := func(t *testing.T, what string, final map[string]*corev1.Pod, messages bool) {
		t.Helper()
		var kev, sev map[string]int
		var diffs []string
		ectx, cancel := context.WithTimeout(sctx, 20*time.Second)
		defer cancel()
		prevKeys := ""
		err := framework.WaitFor(ectx, time.Second, func() (bool, error) {
			var err error
			if kev, err = draPodEvents(ectx, admin, final[draFidKubeletNS], messages); err != nil {
				return false, err
			}
			if sev, err = draPodEvents(ectx, admin, final[draFidSimNS], messages); err != nil {
				return false, err
			}
			diffs = comparePodEvents(kev, sev)
			keys := strings.Join(slices.Sorted(maps.Keys(kev)), ",") + "|" + strings.Join(slices.Sorted(maps.Keys(sev)), ",")
			settled := keys == prevKeys
			prevKeys = keys
			return settled && len(unintendedPodDiffs(diffs, draEventIntendedDifferences)) == 0, nil
		})
		t.Logf("%s: Events (type reason=count): kubelet %v; simulated %v", what, kev, sev)
		if err != nil {
			t.Errorf("%s: Events differ: %v\n%s", what, err, strings.Join(unintendedPodDiffs(diffs, draEventIntendedDifferences), "\n"))
		}
	}

	t.Run("running", func(t *testing.T) {
		for _, sd := range sides {
			if _, err := admin.CoreV1().Pods(sd.ns).Create(sctx, pod("gpu-pod", "one-device", sd.node, nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		final, claims := settle(t, "running", "gpu-pod", func(p *corev1.Pod) bool { return podReady(p) })
		compareEvents(t, "running", final, false)
		kclaim := claims[draFidKubeletNS]
		// The reference driver prepared the claim: its CDI spec is in its CDI directory. The container's
		// environment has none of it: containerd 1.6.20 here has no CDI support (CDI injection came with
		// containerd 1.7's enable_cdi), so the kubelet's CDI device IDs are dropped.
		specs, _ := filepath.Glob(filepath.Join(driver.CDIDir, "*"+string(kclaim.UID)+"*"))
		if len(specs) != 1 {
			t.Errorf("the test driver's CDI spec for claim %s: %v, want one file in %s", kclaim.Name, specs, driver.CDIDir)
		}
		env := draContainerEnv(t, ctrd, final[draFidKubeletNS].Status.ContainerStatuses[0].ContainerID)
		claimEnv := "claim_" + strings.NewReplacer("-", "_", ".", "_").Replace(kclaim.Name) + "_dev=true"
		if slices.Contains(env, claimEnv) {
			t.Errorf("the reference container's environment has the CDI spec's %s: containerd applied CDI; docs/simulation.md says it does not", claimEnv)
		}
		t.Logf("reference container's environment (runtime spec, from containerd): %q; the CDI spec's %s not in it", env, claimEnv)

		// Deleted: the last status each Node wrote, the claims deleted by the resourceclaim controller, and the
		// reference driver's unprepare (its CDI spec removed).
		for _, sd := range sides {
			if err := admin.CoreV1().Pods(sd.ns).Delete(sctx, "gpu-pod", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		gone := map[string]*corev1.Pod{}
		wctx, wcancel := context.WithTimeout(sctx, 2*time.Minute)
		defer wcancel()
		if err := framework.WaitFor(wctx, 250*time.Millisecond, func() (bool, error) {
			for _, sd := range sides {
				d, ok := writes.deleted(final[sd.ns])
				if !ok {
					return false, nil
				}
				gone[sd.ns] = d
				if _, err := admin.ResourceV1().ResourceClaims(sd.ns).Get(wctx, claims[sd.ns].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			t.Fatalf("pods and claims not gone after the delete: %v", err)
		}
		for _, sd := range sides {
			t.Logf("%s: status writes from creation to deletion: %s", sd.ns, writes.summary(final[sd.ns].UID))
		}
		if unintended := compare(t, "deleted", gone, map[string]*resourcev1.ResourceClaim{}); len(unintended) > 0 {
			t.Errorf("deleted: the last statuses differ beyond the intended differences:\n%s", strings.Join(unintended, "\n"))
		}
		if specs, _ := filepath.Glob(filepath.Join(driver.CDIDir, "*"+string(kclaim.UID)+"*")); len(specs) != 0 {
			t.Errorf("the test driver's CDI spec for claim %s still there after the pod was deleted: %v (no unprepare)", kclaim.Name, specs)
		}
		if !strings.Contains(driver.Logs(), "CDI file removed") {
			t.Errorf("the test driver logged no unprepare (\"CDI file removed\")")
		}
	})

	t.Run("prepare failure", func(t *testing.T) {
		for _, sd := range sides {
			var ann map[string]string
			if sd.ns == draFidSimNS {
				ann = map[string]string{simulation.AnnotationPrepareError: "parameters in config #0: decoding user parameters: " +
					"json: cannot unmarshal number into Go value of type string"}
			}
			if _, err := admin.CoreV1().Pods(sd.ns).Create(sctx, pod("bad-pod", "bad-config", sd.node, ann), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		final := map[string]*corev1.Pod{}
		for _, sd := range sides {
			var p *corev1.Pod
			if err := framework.WaitFor(sctx, 250*time.Millisecond, func() (bool, error) {
				var err error
				p, err = admin.CoreV1().Pods(sd.ns).Get(sctx, "bad-pod", metav1.GetOptions{})
				return err == nil && len(p.Status.ResourceClaimStatuses) == 1, nil
			}); err != nil {
				t.Fatalf("%s/bad-pod: no claim: %v", sd.ns, err)
			}
			claim := ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, "")
			waitEvent(sctx, t, admin, sd.ns, "bad-pod", "FailedPrepareDynamicResources",
				"Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim "+claim+
					": parameters in config #0: decoding user parameters: json: cannot unmarshal number into Go value of type string")
			final[sd.ns] = p
		}
		final, _ = settle(t, "prepare failure", "bad-pod", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil
		})
		compareEvents(t, "prepare failure", final, true)
		for _, sd := range sides {
			if err := admin.CoreV1().Pods(sd.ns).Delete(sctx, "bad-pod", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	if !t.Failed() {
		for field := range draIntendedDifferences {
			if !seen[field] {
				t.Errorf("intended difference %s did not show: draIntendedDifferences (and docs/simulation.md) is stale", field)
			}
		}
	}
}

// podReady reports whether p is Running with its Ready condition True.
func podReady(p *corev1.Pod) bool {
	c := podCondition(p, corev1.PodReady)
	return p.Status.Phase == corev1.PodRunning && c != nil && c.Status == corev1.ConditionTrue
}

// draNormalizer replaces in s the claim's UID and name ("<claim uid>", "<claim>") of claim, if any, and of
// the pod's claim statuses.
func draNormalizer(p *corev1.Pod, claim *resourcev1.ResourceClaim) *strings.Replacer {
	var r []string
	if claim != nil {
		r = append(r, string(claim.UID), "<claim uid>", claim.Name, "<claim>")
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			r = append(r, *s.ResourceClaimName, "<claim>")
		}
	}
	return strings.NewReplacer(r...)
}

// flattenClaimPodStatus is flattenPodStatus with the pod's claim's name and UID (generated by the
// resourceclaim controller) replaced first, so that both sides compare.
func flattenClaimPodStatus(p *corev1.Pod, node *corev1.Node, claim *resourcev1.ResourceClaim) map[string]string {
	b, _ := json.Marshal(p.Status)
	q := p.DeepCopy()
	q.Status = corev1.PodStatus{}
	_ = json.Unmarshal([]byte(draNormalizer(p, claim).Replace(string(b))), &q.Status)
	return flattenPodStatus(q, node)
}

// flattenClaim flattens claim's status, finalizers and the pod-claim-name annotation as flattenPodStatus
// does a pod status, under "claim", with the pod's and the claim's names and UIDs and the Node's name
// replaced, and times as "<set>".
func flattenClaim(claim *resourcev1.ResourceClaim, p *corev1.Pod, node *corev1.Node) map[string]string {
	view := struct {
		Status      resourcev1.ResourceClaimStatus `json:"status"`
		Finalizers  []string                       `json:"finalizers"`
		Annotations map[string]string              `json:"annotations"`
		Owners      []metav1.OwnerReference        `json:"ownerReferences"`
	}{claim.Status, claim.Finalizers, claim.Annotations, claim.OwnerReferences}
	b, _ := json.Marshal(view)
	s := draNormalizer(p, claim).Replace(string(b))
	s = strings.NewReplacer(string(p.UID), "<uid>", p.Name, "<pod>", node.Name, "<node>").Replace(s)
	var m map[string]any
	_ = json.Unmarshal([]byte(s), &m)
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case string:
			if _, err := time.Parse(time.RFC3339, x); err == nil {
				x = "<set>"
			}
			out[path] = x
		default:
			out[path] = fmt.Sprint(x)
		}
	}
	walk("claim", m)
	return out
}

// draPodEvents is podEvents, with each Event's message (its claim's name replaced) in the key when messages.
func draPodEvents(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, messages bool) (map[string]int, error) {
	if !messages {
		return podEvents(ctx, client, p)
	}
	l, err := client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
	if err != nil {
		return nil, fmt.Errorf("list the Events of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	r := draNormalizer(p, nil)
	out := map[string]int{}
	for _, e := range l.Items {
		msg := r.Replace(e.Message)
		if e.Reason == "Scheduled" {
			msg = "" // names the namespace and Node
		}
		out[e.Type+" "+e.Reason+" "+msg] += max(int(e.Count), 1)
	}
	return out, nil
}

// draContainerEnv returns the environment of container id ("containerd://<id>") as containerd gave it to
// runc: the runtime spec's process.env in CRI ContainerStatus's verbose info.
func draContainerEnv(t *testing.T, c *framework.Containerd, id string) []string {
	t.Helper()
	_, id, _ = strings.Cut(id, "://")
	st, err := c.RuntimeClient().ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("CRI ContainerStatus %s: %v", id, err)
	}
	var info struct {
		RuntimeSpec struct {
			Process struct {
				Env []string `json:"env"`
			} `json:"process"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		t.Fatalf("CRI ContainerStatus %s: verbose info: %v", id, err)
	}
	return info.RuntimeSpec.Process.Env
}
