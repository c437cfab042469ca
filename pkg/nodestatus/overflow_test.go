package nodestatus

import (
	"math"
	"testing"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestCapacityFromMachineInfoNoOverflow: values whose kubelet arithmetic (NumCores*1000,
// int64(MemoryCapacity), PageSize*1024*NumPages) overflows int64 come out exact, never negative (issue 27,
// item 2: a template's cpu "9223372036854775807" was posted as "-1").
func TestCapacityFromMachineInfoNoOverflow(t *testing.T) {
	for _, tc := range []struct {
		name string
		info cadvisorapi.MachineInfo
		res  v1.ResourceName
		want string
	}{
		{"cpu at the millicore bound", cadvisorapi.MachineInfo{NumCores: math.MaxInt64 / 1000}, v1.ResourceCPU, "9223372036854775"},
		{"cpu beyond the millicore bound", cadvisorapi.MachineInfo{NumCores: math.MaxInt64}, v1.ResourceCPU, "9223372036854775807"},
		{"memory beyond int64", cadvisorapi.MachineInfo{MemoryCapacity: math.MaxUint64}, v1.ResourceMemory, "18446744073709551615"},
		{"memory at int64", cadvisorapi.MachineInfo{MemoryCapacity: math.MaxInt64}, v1.ResourceMemory, "9223372036854775807"},
		{"hugepages beyond int64", cadvisorapi.MachineInfo{HugePages: []cadvisorapi.HugePagesInfo{{PageSize: 1 << 20, NumPages: 1 << 44}}},
			"hugepages-1Gi", "18889465931478580854784"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CapacityFromMachineInfo(&tc.info)[tc.res]
			if got.Sign() < 0 || got.Cmp(resource.MustParse(tc.want)) != 0 {
				t.Errorf("%s = %s, want %s", tc.res, got.String(), tc.want)
			}
		})
	}
}
