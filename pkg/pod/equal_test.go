package pod

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeagent/nodeagent/pkg/apiequal/apiequaltest"
)

// TestStatusEqualCoversPodStatus fails when PodStatus, or a type StatusEqual compares field by field,
// has a field StatusEqual does not know: it would then miss a change of it. (The structs it compares with
// ==, such as PodIP and ContainerStateWaiting, compare a new field by themselves, or stop compiling.)
func TestStatusEqualCoversPodStatus(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[v1.PodStatus](), []string{"ObservedGeneration", "Phase", "Conditions", "Message", "Reason",
			"NominatedNodeName", "HostIP", "HostIPs", "PodIP", "PodIPs", "StartTime", "InitContainerStatuses",
			"ContainerStatuses", "QOSClass", "EphemeralContainerStatuses", "Resize", "ResourceClaimStatuses",
			"ExtendedResourceClaimStatus", "AllocatedResources", "Resources", "NodeAllocatableResourceClaimStatuses",
			"VolumeHealth"}},
		{reflect.TypeFor[v1.PodCondition](), []string{"Type", "ObservedGeneration", "Status", "LastProbeTime",
			"LastTransitionTime", "Reason", "Message"}},
		{reflect.TypeFor[v1.ContainerStatus](), []string{"Name", "State", "LastTerminationState", "Ready", "RestartCount",
			"Image", "ImageID", "ContainerID", "Started", "AllocatedResources", "Resources", "VolumeMounts", "User",
			"AllocatedResourcesStatus", "StopSignal"}},
		{reflect.TypeFor[v1.ContainerState](), []string{"Waiting", "Running", "Terminated"}},
		{reflect.TypeFor[v1.ContainerStateRunning](), []string{"StartedAt"}},
		{reflect.TypeFor[v1.ContainerStateTerminated](), []string{"ExitCode", "Signal", "Reason", "Message",
			"StartedAt", "FinishedAt", "ContainerID"}},
		{reflect.TypeFor[v1.VolumeMountStatus](), []string{"Name", "MountPath", "ReadOnly", "RecursiveReadOnly", "VolumeStatus"}},
		{reflect.TypeFor[v1.ResourceRequirements](), []string{"Limits", "Requests", "Claims"}},
		{reflect.TypeFor[v1.PodResourceClaimStatus](), []string{"Name", "ResourceClaimName"}},
	} {
		apiequaltest.Fields(t, "StatusEqual", tc.typ, tc.want)
	}
}

// TestStatusEqualAgreesWithSemantic compares StatusEqual with apiequality.Semantic.DeepEqual (the
// kubelet's comparison) on random statuses and copies of them with one field changed at any depth.
func TestStatusEqualAgreesWithSemantic(t *testing.T) {
	apiequaltest.Agree(t, 4000, StatusEqual, nil)
}

// runningStatus returns the status GenerateStatus makes for a running, ready pod of two containers
// with requests, its volume mounts, IPs and conditions, and that status as the pod informer has it
// once written (through JSON: times in the local zone, empty lists dropped).
func runningStatus(t testing.TB) (generated, informer v1.PodStatus) {
	p := runningPod()
	rt := RuntimeStatus{RuntimeName: "containerd", Sandbox: SandboxReady, PodIPs: ip, HostIPs: host,
		Containers: []ContainerStatus{running("a", true), running("b", true)}}
	s, err := GenerateStatus(p, &rt, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &informer); err != nil {
		t.Fatal(err)
	}
	return s, informer
}

// runningPod is runningStatus's pod: two containers with requests and a volume mount.
func runningPod() *v1.Pod {
	p := basePod(v1.RestartPolicyAlways, "a", "b")
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}
		p.Spec.Containers[i].VolumeMounts = []v1.VolumeMount{{Name: "token", MountPath: "/var/run/secrets", ReadOnly: true}}
	}
	return p
}

// TestStatusPatchUnchangedAllocatesNothing: a status equal to the informer's copy makes no patch, and
// finding that out allocates nothing (no status is marshalled, no patch built).
func TestStatusPatchUnchangedAllocatesNothing(t *testing.T) {
	generated, informer := runningStatus(t)
	var patch []byte
	var err error
	allocs := testing.AllocsPerRun(100, func() { patch, err = StatusPatch("uid-1", &informer, &generated) })
	if patch != nil || err != nil {
		t.Fatalf("StatusPatch of an unchanged status = %s, %v; want nil, nil", patch, err)
	}
	if allocs != 0 {
		t.Errorf("StatusPatch of an unchanged status made %v allocations, want 0", allocs)
	}
}

// BenchmarkStatusPatchUnchanged: the pass over a pod that changed nothing, as StatusPatch answers it
// (StatusEqual), against what it cost before (both statuses marshalled, a two-way merge patch built and
// found empty).
func BenchmarkStatusPatchUnchanged(b *testing.B) {
	generated, informer := runningStatus(b)
	b.Run("StatusEqual", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if patch, err := StatusPatch("uid-1", &informer, &generated); patch != nil || err != nil {
				b.Fatal(string(patch), err)
			}
		}
	})
	b.Run("marshal and patch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if patch, err := statusPatch("uid-1", &informer, &generated); patch != nil || err != nil {
				b.Fatal(string(patch), err)
			}
		}
	})
}
