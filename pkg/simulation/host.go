package simulation

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"sync/atomic"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodeagent/nodeagent/pkg/node"
)

// FirstNodeIP is the InternalIP of the simulated Node with index 0; Node i has FirstNodeIP + i
// (100.64.0.1, 100.64.0.2, ...: RFC 6598 shared address space, which no real Node is likely to use).
var FirstNodeIP = net.IPv4(100, 64, 0, 1).To4()

// nodeIP returns the InternalIP of the Node with index i.
func nodeIP(i int) net.IP {
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, binary.BigEndian.Uint32(FirstNodeIP)+uint32(i))
	return ip
}

// host is one simulated machine as a node.Host: the template's capacity and node info, IDs derived
// from the Node's name (stable across restarts of the simulator, so no NodeRebooted), and pressure
// flags the control API sets.
type host struct {
	t                             *Template
	machineID, systemUUID, bootID string

	memoryPressure, diskPressure, pidPressure atomic.Bool
}

var _ node.Host = (*host)(nil)

func newHost(t *Template, name string) *host {
	h := &host{t: t}
	sum := sha256.Sum256([]byte("nodeagent-simulation/" + name))
	h.machineID = hex.EncodeToString(sum[:16])
	h.systemUUID = uuidString(sum[:16])
	h.bootID = uuidString(sum[16:])
	return h
}

func uuidString(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (h *host) MachineInfo() (*cadvisorapi.MachineInfo, error) {
	return &cadvisorapi.MachineInfo{
		NumCores:       int(h.t.Capacity.Cpu().Value()),
		MemoryCapacity: uint64(h.t.Capacity.Memory().Value()),
		HugePages:      h.t.hugePages(),
		MachineID:      h.machineID,
		SystemUUID:     h.systemUUID,
		BootID:         h.bootID,
	}, nil
}

func (h *host) EphemeralStorageCapacity() (resource.Quantity, error) {
	return *h.t.Capacity.StorageEphemeral(), nil
}

func (h *host) KernelVersion() string { return h.t.KernelVersion }
func (h *host) OSImage() string       { return h.t.OSImage }

// ValidateNodeIP accepts the Node's simulated IP: it is on no interface of this machine.
func (h *host) ValidateNodeIP(net.IP) error { return nil }

// LookupIP and ResolveAddress are not reached: every simulated Node has its --node-ip.
func (h *host) LookupIP(string) ([]net.IP, error) { return nil, nil }
func (h *host) ResolveAddress(ip net.IP) (net.IP, error) {
	return nil, fmt.Errorf("simulated node has no address to resolve")
}

func (h *host) IsUnderMemoryPressure() bool { return h.memoryPressure.Load() }
func (h *host) IsUnderDiskPressure() bool   { return h.diskPressure.Load() }
func (h *host) IsUnderPIDPressure() bool    { return h.pidPressure.Load() }

// RunningInUserNamespace is false: a simulated node stands for a machine whose agent runs in the host's
// user namespace, as a kubelet's does.
func (h *host) RunningInUserNamespace() *bool { return ptr.To(false) }
