package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"net"
	goruntime "runtime"
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2/ktesting"
	netutils "k8s.io/utils/net"

	"github.com/nodeagent/nodeagent/pkg/criruntime"
)

const (
	testNodeName = "test-node"
	testHostname = "hostname"
)

// testEvent is one recorded event, as the kubelet's setters_test.go testEvent.
type testEvent struct {
	eventType, reason, message string
}

func ip(s string) net.IP { return netutils.ParseIPSloppy(s) }

// TestNodeAddress mirrors the kubelet's TestNodeAddress and TestNodeAddress_NoCloudProvider, plus the
// DNS-lookup step the kubelet cannot mock (our setter takes lookupIP).
func TestNodeAddress(t *testing.T) {
	existing := v1.NodeAddress{Type: v1.NodeInternalIP, Address: "10.1.1.2"}
	lookupFails := func(string) ([]net.IP, error) { return nil, errors.New("no such host") }
	cases := []struct {
		name                string
		nodeIPs             []net.IP
		hostname            string
		cloudProvider       bool
		lookup              func(string) ([]net.IP, error)
		resolvedIP          net.IP
		resolveErr          error
		invalid             map[string]bool // IPs the validator rejects
		existingAddresses   []v1.NodeAddress
		existingAnnotations map[string]string
		wantAddresses       []v1.NodeAddress
		wantAnnotations     map[string]string
		wantErr             string
	}{
		{
			name:          "using cloud provider and nodeIP specified",
			nodeIPs:       []net.IP{ip("10.0.0.1")},
			cloudProvider: true,
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "no cloud provider and nodeIP IPv4 unspecified",
			nodeIPs:       []net.IP{ip("0.0.0.0")},
			resolvedIP:    ip("10.0.0.2"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "no cloud provider and nodeIP IPv6 unspecified",
			nodeIPs:       []net.IP{ip("::")},
			resolvedIP:    ip("2001:db2::2"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "2001:db2::2"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "using cloud provider and nodeIP IPv4 unspecified",
			nodeIPs:       []net.IP{ip("0.0.0.0")},
			resolvedIP:    ip("10.0.0.2"),
			cloudProvider: true,
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "using cloud provider and nodeIP IPv6 unspecified",
			nodeIPs:       []net.IP{ip("::")},
			resolvedIP:    ip("2001:db2::2"),
			cloudProvider: true,
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "2001:db2::2"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "no cloud provider and no nodeIP resolve IPv4",
			resolvedIP:    ip("10.0.0.2"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "no cloud provider and no nodeIP resolve IPv6",
			resolvedIP:    ip("2001:db2::2"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "2001:db2::2"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "using cloud provider and no nodeIP: hostname only, the cloud sets the addresses",
			resolvedIP:    ip("10.0.0.2"),
			cloudProvider: true,
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:            "cloud provider gets nodeIP annotation",
			nodeIPs:         []net.IP{ip("10.1.1.1")},
			cloudProvider:   true,
			wantAddresses:   []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeHostName, Address: testHostname}},
			wantAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
		},
		{
			name:              "using cloud provider and node address is already set: addresses kept, annotation set",
			nodeIPs:           []net.IP{ip("10.1.1.1")},
			cloudProvider:     true,
			existingAddresses: []v1.NodeAddress{existing},
			wantAddresses:     []v1.NodeAddress{existing},
			wantAnnotations:   map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
		},
		{
			name:          "using cloud provider and the cloud's addresses are set: kept as the cloud ordered them",
			nodeIPs:       []net.IP{ip("10.1.1.1")},
			cloudProvider: true,
			existingAddresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeExternalIP, Address: "203.0.113.10"},
				{Type: v1.NodeInternalDNS, Address: "ip-10-1-1-1.internal"}, {Type: v1.NodeHostName, Address: "cloud-host"},
			},
			existingAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
			wantAddresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeExternalIP, Address: "203.0.113.10"},
				{Type: v1.NodeInternalDNS, Address: "ip-10-1-1-1.internal"}, {Type: v1.NodeHostName, Address: "cloud-host"},
			},
			wantAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
		},
		{
			name:                "using cloud provider and no nodeIP: stale annotation removed, the cloud's addresses kept",
			cloudProvider:       true,
			existingAddresses:   []v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "203.0.113.10"}, {Type: v1.NodeHostName, Address: testHostname}},
			existingAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
			wantAddresses:       []v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "203.0.113.10"}, {Type: v1.NodeHostName, Address: testHostname}},
			wantAnnotations:     map[string]string{},
		},
		{
			name:                "using cloud provider and nodeIP unspecified: no annotation (stale one removed), address resolved",
			nodeIPs:             []net.IP{ip("0.0.0.0")},
			cloudProvider:       true,
			resolvedIP:          ip("10.0.0.2"),
			existingAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
			wantAddresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: testHostname}},
			wantAnnotations:     map[string]string{},
		},
		{
			name:            "no cloud provider does not get nodeIP annotation",
			nodeIPs:         []net.IP{ip("10.1.1.1")},
			wantAddresses:   []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeHostName, Address: testHostname}},
			wantAnnotations: map[string]string{},
		},
		{
			name:                "stale nodeIP annotation is removed when not using cloud provider",
			nodeIPs:             []net.IP{ip("10.1.1.1")},
			existingAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.3"},
			wantAddresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeHostName, Address: testHostname}},
			wantAnnotations:     map[string]string{},
		},
		{
			name:                "incorrect nodeIP annotation is fixed",
			nodeIPs:             []net.IP{ip("10.1.1.1")},
			cloudProvider:       true,
			existingAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.3"},
			wantAddresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeHostName, Address: testHostname}},
			wantAnnotations:     map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
		},
		{
			name:          "dual-stack cloud, with dual-stack nodeIPs",
			nodeIPs:       []net.IP{ip("2600:1f14:1d4:d101::ba3d"), ip("10.1.1.2")},
			cloudProvider: true,
			wantAddresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "2600:1f14:1d4:d101::ba3d"},
				{Type: v1.NodeInternalIP, Address: "10.1.1.2"},
				{Type: v1.NodeHostName, Address: testHostname},
			},
			wantAnnotations: map[string]string{annotationProvidedIPAddr: "2600:1f14:1d4:d101::ba3d,10.1.1.2"},
		},
		{
			name:                "upgrade to cloud dual-stack nodeIPs",
			nodeIPs:             []net.IP{ip("10.1.1.1"), ip("2600:1f14:1d4:d101::ba3d")},
			cloudProvider:       true,
			existingAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
			wantAddresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "10.1.1.1"},
				{Type: v1.NodeInternalIP, Address: "2600:1f14:1d4:d101::ba3d"},
				{Type: v1.NodeHostName, Address: testHostname},
			},
			wantAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1,2600:1f14:1d4:d101::ba3d"},
		},
		{
			name:                "downgrade from cloud dual-stack nodeIPs",
			nodeIPs:             []net.IP{ip("10.1.1.1")},
			cloudProvider:       true,
			existingAnnotations: map[string]string{annotationProvidedIPAddr: "10.1.1.1,2600:1f14:1d4:d101::ba3d"},
			wantAddresses:       []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.1.1"}, {Type: v1.NodeHostName, Address: testHostname}},
			wantAnnotations:     map[string]string{annotationProvidedIPAddr: "10.1.1.1"},
		},
		{
			name:    "dual --node-ips without cloud provider",
			nodeIPs: []net.IP{ip("10.1.1.1"), ip("fd01::1234")},
			wantAddresses: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "10.1.1.1"},
				{Type: v1.NodeInternalIP, Address: "fd01::1234"},
				{Type: v1.NodeHostName, Address: testHostname},
			},
		},
		{
			name:    "invalid single --node-ip",
			nodeIPs: []net.IP{ip("127.0.0.1")},
			invalid: map[string]bool{"127.0.0.1": true},
			wantErr: "failed to validate nodeIP: invalid",
		},
		{
			name:    "dual --node-ips with an invalid secondary IP",
			nodeIPs: []net.IP{ip("10.1.1.1"), ip("ff02::1")},
			invalid: map[string]bool{"ff02::1": true},
			wantErr: "failed to validate secondaryNodeIP: invalid",
		},
		{
			name:          "hostname is an IP",
			hostname:      "10.2.3.4",
			resolvedIP:    ip("10.9.9.9"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.2.3.4"}, {Type: v1.NodeHostName, Address: "10.2.3.4"}},
		},
		{
			name: "DNS lookup of the node name prefers IPv4",
			lookup: func(host string) ([]net.IP, error) {
				if host != testNodeName {
					return nil, fmt.Errorf("looked up %q, want the node name", host)
				}
				return []net.IP{ip("fd00::5"), ip("10.0.0.5")}, nil
			},
			resolvedIP:    ip("10.9.9.9"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.5"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "DNS lookup with nodeIP :: prefers IPv6",
			nodeIPs:       []net.IP{ip("::")},
			lookup:        func(string) ([]net.IP, error) { return []net.IP{ip("10.0.0.5"), ip("fd00::5")}, nil },
			resolvedIP:    ip("10.9.9.9"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "fd00::5"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "DNS lookup with only the other family takes it",
			lookup:        func(string) ([]net.IP, error) { return []net.IP{ip("fd00::5")}, nil },
			resolvedIP:    ip("10.9.9.9"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "fd00::5"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "DNS lookup skips addresses that fail validation",
			lookup:        func(string) ([]net.IP, error) { return []net.IP{ip("127.0.1.1"), ip("10.0.0.6")}, nil },
			invalid:       map[string]bool{"127.0.1.1": true},
			resolvedIP:    ip("10.9.9.9"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.6"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:          "DNS lookup with no valid address falls back to the default route's address",
			lookup:        func(string) ([]net.IP, error) { return []net.IP{ip("127.0.1.1")}, nil },
			invalid:       map[string]bool{"127.0.1.1": true},
			resolvedIP:    ip("10.9.9.9"),
			wantAddresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.9.9.9"}, {Type: v1.NodeHostName, Address: testHostname}},
		},
		{
			name:       "nothing resolves: error",
			resolveErr: errors.New("no default route"),
			wantErr:    "can't get ip address of node test-node: no default route",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &v1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: testNodeName, Annotations: tc.existingAnnotations},
				Status:     v1.NodeStatus{Addresses: tc.existingAddresses},
			}
			hostname := tc.hostname
			if hostname == "" {
				hostname = testHostname
			}
			lookup := tc.lookup
			if lookup == nil {
				lookup = lookupFails
			}
			validate := func(i net.IP) error {
				if tc.invalid[i.String()] {
					return errors.New("invalid")
				}
				return nil
			}
			resolve := func(net.IP) (net.IP, error) { return tc.resolvedIP, tc.resolveErr }
			err := NodeAddress(tc.nodeIPs, validate, hostname, tc.cloudProvider, resolve, lookup)(ctx, node)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !apiequality.Semantic.DeepEqual(tc.wantAddresses, node.Status.Addresses) {
				t.Errorf("addresses: %s", diff.Diff(tc.wantAddresses, node.Status.Addresses))
			}
			if tc.wantAnnotations != nil && !apiequality.Semantic.DeepEqual(tc.wantAnnotations, node.Annotations) {
				t.Errorf("annotations: %s", diff.Diff(tc.wantAnnotations, node.Annotations))
			}
		})
	}
}

// TestValidateNodeIP mirrors the kubelet's TestValidateNodeIPParam.
func TestValidateNodeIP(t *testing.T) {
	cases := []struct {
		ip      string
		wantErr string
	}{
		{"127.0.0.1", "nodeIP can't be loopback address"},
		{"::1", "nodeIP can't be loopback address"},
		{"224.0.0.1", "nodeIP can't be a multicast address"},
		{"ff00::1", "nodeIP can't be a multicast address"},
		{"169.254.0.1", "nodeIP can't be a link-local unicast address"},
		{"fe80::1", "nodeIP can't be a link-local unicast address"},
		{"0.0.0.0", "nodeIP can't be an all zeros address"},
		{"::", "nodeIP can't be an all zeros address"},
		{"192.0.2.123", `node IP: "192.0.2.123" not found in the host's network interfaces`},
	}
	// An address of this host's interfaces is valid (when it has a usable one).
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() && !n.IP.IsMulticast() {
				cases = append(cases, struct {
					ip      string
					wantErr string
				}{n.IP.String(), ""})
				break
			}
		}
	}
	for _, tc := range cases {
		t.Run(tc.ip, func(t *testing.T) {
			err := ValidateNodeIP(ip(tc.ip))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Errorf("ValidateNodeIP(%s) = %q, want %q", tc.ip, got, tc.wantErr)
			}
		})
	}
}

func cpu(milli int64) resource.Quantity             { return *resource.NewMilliQuantity(milli, resource.DecimalSI) }
func bytes(n int64) resource.Quantity               { return *resource.NewQuantity(n, resource.BinarySI) }
func count(n int64) resource.Quantity               { return *resource.NewQuantity(n, resource.DecimalSI) }
func noReservation(v1.ResourceList) v1.ResourceList { return nil }

// TestMachineInfo mirrors the kubelet's TestMachineInfo (the cases without device plugins, podsPerCore
// or swap, which nodeagent does not have) plus hugepages from machine info and ephemeral storage.
func TestMachineInfo(t *testing.T) {
	basicInfo := &cadvisorapi.MachineInfo{MachineID: "MachineID", SystemUUID: "SystemUUID", BootID: "BootID", NumCores: 2, MemoryCapacity: 1024}
	cases := []struct {
		desc             string
		node             *v1.Node
		maxPods          int
		machineInfo      *cadvisorapi.MachineInfo
		machineInfoErr   error
		userNS           *bool // what runningInUserNSFunc answers
		ephemeral        *resource.Quantity
		ephemeralErr     error
		reservation      v1.ResourceList
		wantCapacityArg  v1.ResourceList // what reservationFunc must be given, when set
		wantStatus       v1.NodeStatus
		wantEvents       []testEvent
		wantNoEphemeral  bool
		wantEphemeralHit bool
	}{
		{
			desc:        "machine identifiers, basic capacity and allocatable",
			node:        &v1.Node{},
			maxPods:     110,
			machineInfo: basicInfo,
			wantStatus: v1.NodeStatus{
				NodeInfo:    v1.NodeSystemInfo{MachineID: "MachineID", SystemUUID: "SystemUUID", BootID: "BootID"},
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
			},
		},
		{
			desc:        "pods capacity is maxPods",
			node:        &v1.Node{},
			maxPods:     17,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(17)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(17)},
			},
		},
		{
			desc:        "allocatable should equal capacity minus reservations",
			node:        &v1.Node{},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			reservation: v1.ResourceList{
				v1.ResourceCPU: cpu(1), v1.ResourceMemory: bytes(1), v1.ResourcePods: count(1), v1.ResourceEphemeralStorage: bytes(1),
			},
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(1999), v1.ResourceMemory: bytes(1023), v1.ResourcePods: count(109)},
			},
		},
		{
			desc:        "reservation larger than capacity gives 0 allocatable, never negative",
			node:        &v1.Node{},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			reservation: v1.ResourceList{v1.ResourceCPU: cpu(3000), v1.ResourceMemory: bytes(2048)},
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(0), v1.ResourceMemory: bytes(0), v1.ResourcePods: count(110)},
			},
		},
		{
			desc: "allocatable memory does not double-count hugepages reservations",
			node: &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{
				v1.ResourceHugePagesPrefix + "test": bytes(1),
			}}},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				Capacity: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110),
					v1.ResourceHugePagesPrefix + "test": bytes(1),
				},
				Allocatable: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1023), v1.ResourcePods: count(110),
					v1.ResourceHugePagesPrefix + "test": bytes(1),
				},
			},
		},
		{
			desc:    "hugepages from machine info are capacity and come off allocatable memory",
			node:    &v1.Node{},
			maxPods: 110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 4, MemoryCapacity: 4 << 30, HugePages: []cadvisorapi.HugePagesInfo{
				{PageSize: 2048, NumPages: 10},   // 2Mi pages: 20Mi
				{PageSize: 1048576, NumPages: 1}, // 1Gi pages: 1Gi
			}},
			wantStatus: v1.NodeStatus{
				Capacity: v1.ResourceList{
					v1.ResourceCPU: cpu(4000), v1.ResourceMemory: bytes(4 << 30), v1.ResourcePods: count(110),
					"hugepages-2Mi": bytes(20 << 20), "hugepages-1Gi": bytes(1 << 30),
				},
				Allocatable: v1.ResourceList{
					v1.ResourceCPU: cpu(4000), v1.ResourceMemory: bytes(4<<30 - 20<<20 - 1<<30), v1.ResourcePods: count(110),
					"hugepages-2Mi": bytes(20 << 20), "hugepages-1Gi": bytes(1 << 30),
				},
			},
		},
		{
			desc: "negative capacity resources should be set to 0 in allocatable",
			node: &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{
				"negative-resource": bytes(-1),
			}}},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				Capacity: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110), "negative-resource": bytes(-1),
				},
				Allocatable: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110), "negative-resource": bytes(0),
				},
			},
		},
		{
			desc: "hugepages reservation greater than node memory capacity should result in memory capacity set to 0",
			node: &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{
				v1.ResourceHugePagesPrefix + "test": bytes(1025),
			}}},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				Capacity: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110),
					v1.ResourceHugePagesPrefix + "test": bytes(1025),
				},
				Allocatable: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(0), v1.ResourcePods: count(110),
					v1.ResourceHugePagesPrefix + "test": bytes(1025),
				},
			},
		},
		{
			desc:        "ephemeral storage is reflected in capacity and allocatable, and the reservation sees the capacity",
			node:        &v1.Node{},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			ephemeral:   ptrTo(bytes(5000)),
			reservation: v1.ResourceList{v1.ResourceEphemeralStorage: bytes(500)},
			wantCapacityArg: v1.ResourceList{
				v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110), v1.ResourceEphemeralStorage: bytes(5000),
			},
			wantStatus: v1.NodeStatus{
				Capacity: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110), v1.ResourceEphemeralStorage: bytes(5000),
				},
				Allocatable: v1.ResourceList{
					v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110), v1.ResourceEphemeralStorage: bytes(4500),
				},
			},
		},
		{
			desc:         "ephemeral storage error leaves it out of capacity",
			node:         &v1.Node{},
			maxPods:      110,
			machineInfo:  &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			ephemeralErr: errors.New("statfs failed"),
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
			},
		},
		{
			desc: "extended resources not present in capacity are removed from allocatable",
			node: &v1.Node{Status: v1.NodeStatus{Allocatable: v1.ResourceList{
				"example.com/extended": bytes(1),
			}}},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
			},
		},
		{
			desc: "extended resources still in capacity stay in allocatable",
			node: &v1.Node{Status: v1.NodeStatus{
				Capacity:    v1.ResourceList{"example.com/extended": count(2)},
				Allocatable: v1.ResourceList{"example.com/extended": count(2)},
			}},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110), "example.com/extended": count(2)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110), "example.com/extended": count(2)},
			},
		},
		{
			desc:           "on failure to get machine info, allocatable and capacity for memory and cpu are set to 0, pods to maxPods",
			node:           &v1.Node{},
			maxPods:        110,
			machineInfoErr: errors.New("foo"),
			ephemeral:      ptrTo(bytes(5000)), // not consulted without machine info, as the kubelet
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(0), v1.ResourceMemory: resource.MustParse("0Gi"), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(0), v1.ResourceMemory: resource.MustParse("0Gi"), v1.ResourcePods: count(110)},
			},
		},
		{
			desc:        "node reboot event is recorded",
			node:        &v1.Node{Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: "foo"}}},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{BootID: "bar", NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				NodeInfo:    v1.NodeSystemInfo{BootID: "bar"},
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
			},
			wantEvents: []testEvent{{v1.EventTypeWarning, "NodeRebooted", "Node test-node has been rebooted, boot id: bar"}},
		},
		{
			desc:        "swap capacity and runningInUserNamespace, as the 1.37 kubelet",
			node:        &v1.Node{},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 1024, SwapCapacity: 4096},
			userNS:      ptrTo(false),
			wantStatus: v1.NodeStatus{
				NodeInfo:    v1.NodeSystemInfo{Swap: &v1.NodeSwapStatus{Capacity: ptrTo(int64(4096))}, RunningInUserNamespace: ptrTo(false)},
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
			},
		},
		{
			desc:           "without machine info neither swap nor runningInUserNamespace is set",
			node:           &v1.Node{},
			maxPods:        110,
			machineInfoErr: errors.New("foo"),
			userNS:         ptrTo(true),
			wantStatus: v1.NodeStatus{
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(0), v1.ResourceMemory: resource.MustParse("0Gi"), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(0), v1.ResourceMemory: resource.MustParse("0Gi"), v1.ResourcePods: count(110)},
			},
		},
		{
			desc:        "same boot id records no event",
			node:        &v1.Node{Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: "bar"}}},
			maxPods:     110,
			machineInfo: &cadvisorapi.MachineInfo{BootID: "bar", NumCores: 2, MemoryCapacity: 1024},
			wantStatus: v1.NodeStatus{
				NodeInfo:    v1.NodeSystemInfo{BootID: "bar"},
				Capacity:    v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
				Allocatable: v1.ResourceList{v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(1024), v1.ResourcePods: count(110)},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var events []testEvent
			record := func(eventType, reason, message string) {
				events = append(events, testEvent{eventType, reason, message})
			}
			ephemeral := func() (resource.Quantity, error) {
				if tc.ephemeralErr != nil {
					return resource.Quantity{}, tc.ephemeralErr
				}
				if tc.ephemeral == nil {
					return resource.Quantity{}, errors.New("no ephemeral storage in this case")
				}
				return *tc.ephemeral, nil
			}
			var gotCapacityArg v1.ResourceList
			reservation := func(capacity v1.ResourceList) v1.ResourceList {
				gotCapacityArg = capacity.DeepCopy()
				return tc.reservation
			}
			setter := MachineInfo(testNodeName, tc.maxPods,
				func() (*cadvisorapi.MachineInfo, error) { return tc.machineInfo, tc.machineInfoErr },
				ephemeral, reservation, record, func() *bool { return tc.userNS })
			if err := setter(ctx, tc.node); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !apiequality.Semantic.DeepEqual(tc.wantStatus, tc.node.Status) {
				t.Errorf("status: %s", diff.Diff(tc.wantStatus, tc.node.Status))
			}
			if tc.wantCapacityArg != nil && !apiequality.Semantic.DeepEqual(tc.wantCapacityArg, gotCapacityArg) {
				t.Errorf("reservationFunc capacity: %s", diff.Diff(tc.wantCapacityArg, gotCapacityArg))
			}
			if !equalEvents(tc.wantEvents, events) {
				t.Errorf("events = %v, want %v", events, tc.wantEvents)
			}
		})
	}
}

// TestMachineInfoRebootEventOnce: as the kubelet (rebootEvent sync.Once), a retried status update that
// starts again from the old boot ID does not record the reboot twice.
func TestMachineInfoRebootEventOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var events []testEvent
	setter := MachineInfo(testNodeName, 110,
		func() (*cadvisorapi.MachineInfo, error) {
			return &cadvisorapi.MachineInfo{BootID: "new", NumCores: 1, MemoryCapacity: 1}, nil
		},
		func() (resource.Quantity, error) { return bytes(1), nil }, noReservation,
		func(eventType, reason, message string) {
			events = append(events, testEvent{eventType, reason, message})
		}, func() *bool { return nil })
	for i := 0; i < 3; i++ {
		node := &v1.Node{Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: "old"}}}
		if err := setter(ctx, node); err != nil {
			t.Fatal(err)
		}
		if node.Status.NodeInfo.BootID != "new" {
			t.Errorf("boot id = %q", node.Status.NodeInfo.BootID)
		}
	}
	if len(events) != 1 {
		t.Errorf("events = %v, want one NodeRebooted", events)
	}
}

func ptrTo[T any](v T) *T { return &v }

func equalEvents(want, got []testEvent) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if want[i] != got[i] {
			return false
		}
	}
	return true
}

func TestCapacityFromMachineInfo(t *testing.T) {
	got := CapacityFromMachineInfo(&cadvisorapi.MachineInfo{NumCores: 3, MemoryCapacity: 2048,
		HugePages: []cadvisorapi.HugePagesInfo{{PageSize: 2048, NumPages: 0}, {PageSize: 64, NumPages: 3}}})
	want := v1.ResourceList{
		v1.ResourceCPU: cpu(3000), v1.ResourceMemory: bytes(2048),
		"hugepages-2Mi": bytes(0), "hugepages-64Ki": bytes(3 * 64 * 1024),
	}
	if !apiequality.Semantic.DeepEqual(want, got) {
		t.Errorf("capacity: %s", diff.Diff(want, got))
	}
}

// TestIsExtendedResourceName mirrors v1helper's TestIsExtendedResourceName cases.
func TestIsExtendedResourceName(t *testing.T) {
	for name, want := range map[v1.ResourceName]bool{
		"example.com/gpu":             true,
		"foo.bar/dongle":              true,
		"cpu":                         false,
		"memory":                      false,
		"hugepages-2Mi":               false,
		"kubernetes.io/thing":         false,
		"requests.example.com/gpu":    false,
		"example.kubernetes.io/thing": false,
	} {
		if got := IsExtendedResourceName(name); got != want {
			t.Errorf("IsExtendedResourceName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestVersionInfo mirrors the kubelet's TestVersionInfo.
func TestVersionInfo(t *testing.T) {
	cases := []struct {
		desc           string
		runtimeVersion string
		runtimeErr     error
		want           v1.NodeSystemInfo
	}{
		{
			desc:           "versions set in node info",
			runtimeVersion: "1.7.24",
			want: v1.NodeSystemInfo{KernelVersion: "6.1.0-kernel", OSImage: "Debian GNU/Linux 12 (bookworm)",
				ContainerRuntimeVersion: "containerd://1.7.24", KubeletVersion: "v0.1.0"},
		},
		{
			desc:       "error getting runtime version results in Unknown runtime",
			runtimeErr: errors.New("runtime down"),
			want: v1.NodeSystemInfo{KernelVersion: "6.1.0-kernel", OSImage: "Debian GNU/Linux 12 (bookworm)",
				ContainerRuntimeVersion: "containerd://Unknown", KubeletVersion: "v0.1.0"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &v1.Node{}
			setter := VersionInfo(func() string { return "6.1.0-kernel" }, func() string { return "Debian GNU/Linux 12 (bookworm)" },
				func(context.Context) (string, string, error) { return "containerd", tc.runtimeVersion, tc.runtimeErr }, "v0.1.0")
			if err := setter(ctx, node); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if node.Status.NodeInfo != tc.want {
				t.Errorf("node info: %s", diff.Diff(tc.want, node.Status.NodeInfo))
			}
		})
	}
}

func TestDaemonEndpoints(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, want := range []v1.NodeDaemonEndpoints{{}, {KubeletEndpoint: v1.DaemonEndpoint{Port: 10250}}} {
		node := &v1.Node{}
		if err := DaemonEndpoints(&want)(ctx, node); err != nil {
			t.Fatal(err)
		}
		if node.Status.DaemonEndpoints != want {
			t.Errorf("daemon endpoints = %v, want %v", node.Status.DaemonEndpoints, want)
		}
	}
}

func makeImages(n, tags int, sizes ...int64) []Image {
	images := make([]Image, n)
	for i := range images {
		for j := 0; j < tags; j++ {
			images[i].RepoTags = append(images[i].RepoTags, fmt.Sprintf("registry.k8s.io/img%d:v%d", i, j))
		}
		images[i].Size = int64(i+1) * 1000
		if i < len(sizes) {
			images[i].Size = sizes[i]
		}
	}
	return images
}

// TestImages mirrors the kubelet's TestImages; nodeagent sorts in the setter rather than relying on
// the image manager's sorted list.
func TestImages(t *testing.T) {
	cases := []struct {
		desc      string
		maxImages int32
		images    []Image
		listErr   error
		want      []v1.ContainerImage
		wantErr   string
	}{
		{
			desc:      "max images enforced, largest kept",
			maxImages: 1,
			images:    makeImages(2, 1, 100, 200),
			want:      []v1.ContainerImage{{Names: []string{"registry.k8s.io/img1:v0"}, SizeBytes: 200}},
		},
		{
			desc:      "no max images cap for -1",
			maxImages: -1,
			images:    makeImages(3, 1, 100, 300, 200),
			want: []v1.ContainerImage{
				{Names: []string{"registry.k8s.io/img1:v0"}, SizeBytes: 300},
				{Names: []string{"registry.k8s.io/img2:v0"}, SizeBytes: 200},
				{Names: []string{"registry.k8s.io/img0:v0"}, SizeBytes: 100},
			},
		},
		{
			desc:      "max images larger than the list",
			maxImages: 50,
			images:    makeImages(1, 1, 100),
			want:      []v1.ContainerImage{{Names: []string{"registry.k8s.io/img0:v0"}, SizeBytes: 100}},
		},
		{
			desc:      "max images 0 reports none",
			maxImages: 0,
			images:    makeImages(2, 1),
			want:      nil,
		},
		{
			desc:      "max names per image enforced",
			maxImages: -1,
			images:    makeImages(1, MaxNamesPerImageInNodeStatus+1, 100),
			want: []v1.ContainerImage{{Names: []string{
				"registry.k8s.io/img0:v0", "registry.k8s.io/img0:v1", "registry.k8s.io/img0:v2", "registry.k8s.io/img0:v3", "registry.k8s.io/img0:v4",
			}, SizeBytes: 100}},
		},
		{
			desc:      "images are sorted by size, descending",
			maxImages: -1,
			images:    []Image{{Size: 3}, {Size: 1}, {Size: 4}, {Size: 2}},
			want:      []v1.ContainerImage{{SizeBytes: 4}, {SizeBytes: 3}, {SizeBytes: 2}, {SizeBytes: 1}},
		},
		{
			desc:      "repo digests and tags both show up in image names, digests first",
			maxImages: -1,
			images:    []Image{{RepoDigests: []string{"foo", "bar"}, RepoTags: []string{"baz", "quux"}}},
			want:      []v1.ContainerImage{{Names: []string{"foo", "bar", "baz", "quux"}}},
		},
		{
			desc:      "digests first when truncating to five names",
			maxImages: -1,
			images:    []Image{{RepoDigests: []string{"d1", "d2", "d3"}, RepoTags: []string{"t1", "t2", "t3", "t4"}, Size: 7}},
			want:      []v1.ContainerImage{{Names: []string{"d1", "d2", "d3", "t1", "t2"}, SizeBytes: 7}},
		},
		{
			desc:      "error getting image list, image list on node is reset to empty",
			maxImages: -1,
			listErr:   errors.New("foo"),
			wantErr:   "error getting image list: foo",
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &v1.Node{Status: v1.NodeStatus{Images: []v1.ContainerImage{{Names: []string{"stale"}, SizeBytes: 1}}}}
			var digestsBefore []string
			if len(tc.images) > 0 {
				digestsBefore = append([]string(nil), tc.images[0].RepoDigests...)
			}
			err := Images(tc.maxImages, func(context.Context) ([]Image, error) { return tc.images, tc.listErr })(ctx, node)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.wantErr {
				t.Fatalf("error = %q, want %q", gotErr, tc.wantErr)
			}
			if !apiequality.Semantic.DeepEqual(tc.want, node.Status.Images) {
				t.Errorf("images: %s", diff.Diff(tc.want, node.Status.Images))
			}
			if tc.wantErr != "" && node.Status.Images != nil {
				t.Errorf("images after an error = %v, want nil", node.Status.Images)
			}
			for _, img := range tc.images {
				if len(digestsBefore) > 0 && len(img.RepoDigests) == len(digestsBefore) && img.RepoDigests[0] != digestsBefore[0] {
					t.Errorf("the setter modified the runtime's image names: %v", img.RepoDigests)
				}
			}
		})
	}
}

func TestGoRuntime(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := &v1.Node{}
	if err := GoRuntime()(ctx, node); err != nil {
		t.Fatal(err)
	}
	if node.Status.NodeInfo.OperatingSystem != goruntime.GOOS || node.Status.NodeInfo.Architecture != goruntime.GOARCH {
		t.Errorf("os/arch = %s/%s, want %s/%s", node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture, goruntime.GOOS, goruntime.GOARCH)
	}
}

func TestRuntimeHandlers(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		desc     string
		handlers []criruntime.Handler
		want     []v1.NodeRuntimeHandler
	}{
		{desc: "none", handlers: nil, want: []v1.NodeRuntimeHandler{}},
		{
			desc: "each handler with its features",
			handlers: []criruntime.Handler{
				{Name: "", SupportsRecursiveReadOnlyMounts: true, SupportsUserNamespaces: true},
				{Name: "runc", SupportsRecursiveReadOnlyMounts: true},
			},
			want: []v1.NodeRuntimeHandler{
				{Name: "", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &yes}},
				{Name: "runc", Features: &v1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &no}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &v1.Node{}
			if err := RuntimeHandlers(func() []criruntime.Handler { return tc.handlers })(ctx, node); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(tc.want, node.Status.RuntimeHandlers) {
				t.Errorf("handlers: %s", diff.Diff(tc.want, node.Status.RuntimeHandlers))
			}
			if node.Status.RuntimeHandlers == nil {
				t.Errorf("handlers are nil, want an empty list as the kubelet")
			}
		})
	}
}

func TestNodeFeatures(t *testing.T) {
	yes := true
	cases := []struct {
		desc     string
		existing *v1.NodeFeatures
		features *criruntime.Features
		want     *v1.NodeFeatures
	}{
		{desc: "no features reported leaves the node alone", features: nil, want: nil},
		{desc: "no features reported keeps existing", existing: &v1.NodeFeatures{SupplementalGroupsPolicy: &yes}, want: &v1.NodeFeatures{SupplementalGroupsPolicy: &yes}},
		{desc: "supplemental groups policy", features: &criruntime.Features{SupplementalGroupsPolicy: true}, want: &v1.NodeFeatures{SupplementalGroupsPolicy: &yes}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := &v1.Node{Status: v1.NodeStatus{Features: tc.existing}}
			if err := NodeFeatures(func() *criruntime.Features { return tc.features })(ctx, node); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(tc.want, node.Status.Features) {
				t.Errorf("features: %s", diff.Diff(tc.want, node.Status.Features))
			}
		})
	}
}

// pressureKind describes one pressure condition as the kubelet's make*PressureCondition helpers.
type pressureKind struct {
	name                      string
	setter                    func(func() time.Time, func() bool, RecordEventFunc) Setter
	condType                  v1.NodeConditionType
	trueReason, trueMessage   string
	falseReason, falseMessage string
	trueEvent, falseEvent     string
}

var pressureKinds = []pressureKind{
	{
		name: "MemoryPressure", setter: MemoryPressureCondition, condType: v1.NodeMemoryPressure,
		trueReason: "KubeletHasInsufficientMemory", trueMessage: "kubelet has insufficient memory available",
		falseReason: "KubeletHasSufficientMemory", falseMessage: "kubelet has sufficient memory available",
		trueEvent: "NodeHasInsufficientMemory", falseEvent: "NodeHasSufficientMemory",
	},
	{
		name: "DiskPressure", setter: DiskPressureCondition, condType: v1.NodeDiskPressure,
		trueReason: "KubeletHasDiskPressure", trueMessage: "kubelet has disk pressure",
		falseReason: "KubeletHasNoDiskPressure", falseMessage: "kubelet has no disk pressure",
		trueEvent: "NodeHasDiskPressure", falseEvent: "NodeHasNoDiskPressure",
	},
	{
		name: "PIDPressure", setter: PIDPressureCondition, condType: v1.NodePIDPressure,
		trueReason: "KubeletHasInsufficientPID", trueMessage: "kubelet has insufficient PID available",
		falseReason: "KubeletHasSufficientPID", falseMessage: "kubelet has sufficient PID available",
		trueEvent: "NodeHasInsufficientPID", falseEvent: "NodeHasSufficientPID",
	},
}

func (k pressureKind) condition(pressure bool, transition, heartbeat time.Time) v1.NodeCondition {
	c := v1.NodeCondition{Type: k.condType, Status: v1.ConditionFalse, Reason: k.falseReason, Message: k.falseMessage,
		LastTransitionTime: metav1.NewTime(transition), LastHeartbeatTime: metav1.NewTime(heartbeat)}
	if pressure {
		c.Status, c.Reason, c.Message = v1.ConditionTrue, k.trueReason, k.trueMessage
	}
	return c
}

// TestPressureConditions mirrors the kubelet's TestMemoryPressureCondition, TestDiskPressureCondition
// and TestPIDPressureCondition for each of the three conditions.
func TestPressureConditions(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	before := now.Add(-time.Second)
	ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
		LastTransitionTime: metav1.NewTime(before), LastHeartbeatTime: metav1.NewTime(before)}
	for _, k := range pressureKinds {
		cases := []struct {
			desc       string
			conditions []v1.NodeCondition
			pressure   bool
			want       []v1.NodeCondition
			wantEvents []testEvent
		}{
			{
				desc: "new, no pressure", pressure: false,
				want:       []v1.NodeCondition{k.condition(false, now, now)},
				wantEvents: []testEvent{{v1.EventTypeNormal, k.falseEvent, ""}},
			},
			{
				desc: "new, pressure", pressure: true,
				want:       []v1.NodeCondition{k.condition(true, now, now)},
				wantEvents: []testEvent{{v1.EventTypeNormal, k.trueEvent, ""}},
			},
			{
				desc: "new, appended after other conditions", conditions: []v1.NodeCondition{ready}, pressure: false,
				want:       []v1.NodeCondition{ready, k.condition(false, now, now)},
				wantEvents: []testEvent{{v1.EventTypeNormal, k.falseEvent, ""}},
			},
			{
				desc: "transition to pressure", conditions: []v1.NodeCondition{k.condition(false, before, before)}, pressure: true,
				want:       []v1.NodeCondition{k.condition(true, now, now)},
				wantEvents: []testEvent{{v1.EventTypeNormal, k.trueEvent, ""}},
			},
			{
				desc: "transition to no pressure", conditions: []v1.NodeCondition{k.condition(true, before, before)}, pressure: false,
				want:       []v1.NodeCondition{k.condition(false, now, now)},
				wantEvents: []testEvent{{v1.EventTypeNormal, k.falseEvent, ""}},
			},
			{
				desc: "pressure, no transition: heartbeat only", conditions: []v1.NodeCondition{k.condition(true, before, before)}, pressure: true,
				want: []v1.NodeCondition{k.condition(true, before, now)},
			},
			{
				desc: "no pressure, no transition: heartbeat only", conditions: []v1.NodeCondition{ready, k.condition(false, before, before)}, pressure: false,
				want: []v1.NodeCondition{ready, k.condition(false, before, now)},
			},
			{
				desc: "unknown (set by the node lifecycle controller) flips to false",
				conditions: []v1.NodeCondition{{Type: k.condType, Status: v1.ConditionUnknown, Reason: "NodeStatusUnknown",
					Message: "Kubelet stopped posting node status.", LastTransitionTime: metav1.NewTime(before), LastHeartbeatTime: metav1.NewTime(before)}},
				pressure:   false,
				want:       []v1.NodeCondition{k.condition(false, now, now)},
				wantEvents: []testEvent{{v1.EventTypeNormal, k.falseEvent, ""}},
			},
		}
		for _, tc := range cases {
			t.Run(k.name+"/"+tc.desc, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				node := &v1.Node{Status: v1.NodeStatus{Conditions: append([]v1.NodeCondition(nil), tc.conditions...)}}
				var events []testEvent
				record := func(eventType, reason string) { events = append(events, testEvent{eventType, reason, ""}) }
				setter := k.setter(func() time.Time { return now }, func() bool { return tc.pressure }, record)
				if err := setter(ctx, node); err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if !apiequality.Semantic.DeepEqual(tc.want, node.Status.Conditions) {
					t.Errorf("conditions: %s", diff.Diff(tc.want, node.Status.Conditions))
				}
				if !equalEvents(tc.wantEvents, events) {
					t.Errorf("events = %v, want %v", events, tc.wantEvents)
				}
			})
		}
	}
}

func makeReadyCondition(ready bool, message string, transition, heartbeat time.Time) v1.NodeCondition {
	if ready {
		return v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: message,
			LastTransitionTime: metav1.NewTime(transition), LastHeartbeatTime: metav1.NewTime(heartbeat)}
	}
	return v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: message,
		LastTransitionTime: metav1.NewTime(transition), LastHeartbeatTime: metav1.NewTime(heartbeat)}
}

// TestReadyCondition mirrors the kubelet's TestReadyCondition (without the container-manager soft
// requirements and the shutdown manager, which nodeagent does not have).
func TestReadyCondition(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	before := now.Add(-time.Second)
	withCapacity := &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{
		v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(10e9), v1.ResourcePods: count(100), v1.ResourceEphemeralStorage: bytes(5000),
	}}}
	withConditions := func(conds ...v1.NodeCondition) *v1.Node {
		n := withCapacity.DeepCopy()
		n.Status.Conditions = conds
		return n
	}
	// The runtime's own aggregate errors, as criruntime.State returns them.
	runtimeDown := utilerrors.NewAggregate([]error{errors.New("container runtime is down")})
	networkNotReady := utilerrors.NewAggregate([]error{errors.New("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")})
	cases := []struct {
		desc                   string
		node                   *v1.Node
		runtimeErr, networkErr error
		storageErr             error
		want                   []v1.NodeCondition
		wantEvents             []testEvent
	}{
		{
			desc: "new, ready",
			node: withCapacity.DeepCopy(),
			want: []v1.NodeCondition{makeReadyCondition(true, "kubelet is posting ready status", now, now)},
		},
		{
			desc:       "new, not ready: storage errors",
			node:       withCapacity.DeepCopy(),
			storageErr: errors.New("some storage error"),
			want:       []v1.NodeCondition{makeReadyCondition(false, "some storage error", now, now)},
		},
		{
			desc:       "new, not ready: runtime and network errors",
			node:       withCapacity.DeepCopy(),
			runtimeErr: errors.New("runtime"),
			networkErr: errors.New("network"),
			want:       []v1.NodeCondition{makeReadyCondition(false, "[runtime, network]", now, now)},
		},
		{
			desc:       "new, not ready: the runtime state's aggregates are flattened as the kubelet's",
			node:       withCapacity.DeepCopy(),
			runtimeErr: runtimeDown,
			networkErr: networkNotReady,
			want: []v1.NodeCondition{makeReadyCondition(false,
				"[container runtime is down, container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized]", now, now)},
		},
		{
			desc:       "new, not ready: network only",
			node:       withCapacity.DeepCopy(),
			networkErr: networkNotReady,
			want: []v1.NodeCondition{makeReadyCondition(false,
				"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized", now, now)},
		},
		{
			desc: "new, not ready: missing capacities",
			node: &v1.Node{},
			want: []v1.NodeCondition{makeReadyCondition(false, "missing node capacity for resources: cpu, memory, pods, ephemeral-storage", now, now)},
		},
		{
			desc: "new, not ready: missing ephemeral-storage only",
			node: &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceCPU: cpu(1), v1.ResourceMemory: bytes(1), v1.ResourcePods: count(1)}}},
			want: []v1.NodeCondition{makeReadyCondition(false, "missing node capacity for resources: ephemeral-storage", now, now)},
		},
		{
			desc:       "new, not ready: runtime error and missing capacity",
			node:       &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceCPU: cpu(1), v1.ResourceMemory: bytes(1), v1.ResourcePods: count(1)}}},
			runtimeErr: errors.New("container runtime status check may not have completed yet"),
			want: []v1.NodeCondition{makeReadyCondition(false,
				"[container runtime status check may not have completed yet, missing node capacity for resources: ephemeral-storage]", now, now)},
		},
		{
			desc:       "transition to ready",
			node:       withConditions(makeReadyCondition(false, "", before, before)),
			want:       []v1.NodeCondition{makeReadyCondition(true, "kubelet is posting ready status", now, now)},
			wantEvents: []testEvent{{v1.EventTypeNormal, "NodeReady", ""}},
		},
		{
			desc:       "transition to not ready",
			node:       withConditions(makeReadyCondition(true, "", before, before)),
			runtimeErr: errors.New("foo"),
			want:       []v1.NodeCondition{makeReadyCondition(false, "foo", now, now)},
			wantEvents: []testEvent{{v1.EventTypeNormal, "NodeNotReady", ""}},
		},
		{
			desc: "ready, no transition",
			node: withConditions(makeReadyCondition(true, "", before, before)),
			want: []v1.NodeCondition{makeReadyCondition(true, "kubelet is posting ready status", before, now)},
		},
		{
			desc:       "not ready, no transition: message changes, transition time kept",
			node:       withConditions(makeReadyCondition(false, "old", before, before)),
			runtimeErr: errors.New("foo"),
			want:       []v1.NodeCondition{makeReadyCondition(false, "foo", before, now)},
		},
		{
			desc: "unknown (set by the node lifecycle controller) to ready is a transition",
			node: withConditions(v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown, Reason: "NodeStatusUnknown",
				LastTransitionTime: metav1.NewTime(before), LastHeartbeatTime: metav1.NewTime(before)}),
			want:       []v1.NodeCondition{makeReadyCondition(true, "kubelet is posting ready status", now, now)},
			wantEvents: []testEvent{{v1.EventTypeNormal, "NodeReady", ""}},
		},
		{
			desc: "ready is updated in place among other conditions",
			node: withConditions(pressureKinds[0].condition(false, before, before), makeReadyCondition(true, "", before, before),
				pressureKinds[1].condition(false, before, before)),
			want: []v1.NodeCondition{pressureKinds[0].condition(false, before, before), makeReadyCondition(true, "kubelet is posting ready status", before, now),
				pressureKinds[1].condition(false, before, before)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var events []testEvent
			record := func(eventType, reason string) { events = append(events, testEvent{eventType, reason, ""}) }
			setter := ReadyCondition(func() time.Time { return now },
				func() error { return tc.runtimeErr }, func() error { return tc.networkErr }, func() error { return tc.storageErr }, record)
			if err := setter(ctx, tc.node); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !apiequality.Semantic.DeepEqual(tc.want, tc.node.Status.Conditions) {
				t.Errorf("conditions: %s", diff.Diff(tc.want, tc.node.Status.Conditions))
			}
			if !equalEvents(tc.wantEvents, events) {
				t.Errorf("events = %v, want %v", events, tc.wantEvents)
			}
		})
	}
}

// TestReadyConditionWithState runs the Ready setter on a real criruntime.State, so the message is the
// one the kubelet would post for the same runtime answers.
func TestReadyConditionWithState(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	node := &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{
		v1.ResourceCPU: cpu(2000), v1.ResourceMemory: bytes(10e9), v1.ResourcePods: count(100), v1.ResourceEphemeralStorage: bytes(5000),
	}}}
	state := criruntime.NewState(fixedClock{now}, 30*time.Second)
	setter := ReadyCondition(func() time.Time { return now }, state.RuntimeErrors, state.NetworkErrors, state.StorageErrors, func(string, string) {})
	_, ctx := ktesting.NewTestContext(t)
	if err := setter(ctx, node); err != nil {
		t.Fatal(err)
	}
	want := "[container runtime status check may not have completed yet, network state unknown]"
	if got := node.Status.Conditions[0].Message; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

// fixedClock is a clock.PassiveClock that always says t.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                  { return c.t }
func (c fixedClock) Since(t time.Time) time.Duration { return c.t.Sub(t) }

// TestSchedulableEvent mirrors the kubelet's recordNodeSchedulableEvent: lastNodeUnschedulable starts
// false, so a schedulable node records nothing at first and each change records one event.
func TestSchedulableEvent(t *testing.T) {
	cases := []struct {
		desc          string
		unschedulable []bool // spec.unschedulable on successive calls
		want          []string
	}{
		{desc: "schedulable from the start records nothing", unschedulable: []bool{false, false}},
		{desc: "unschedulable from the start records NodeNotSchedulable once", unschedulable: []bool{true, true}, want: []string{"NodeNotSchedulable"}},
		{desc: "cordon then uncordon", unschedulable: []bool{false, true, true, false, false}, want: []string{"NodeNotSchedulable", "NodeSchedulable"}},
		{desc: "unschedulable then schedulable", unschedulable: []bool{true, false}, want: []string{"NodeNotSchedulable", "NodeSchedulable"}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var got []string
			setter := SchedulableEvent(func(eventType, reason string) {
				if eventType != v1.EventTypeNormal {
					t.Errorf("event type %q, want Normal", eventType)
				}
				got = append(got, reason)
			})
			for _, u := range tc.unschedulable {
				node := &v1.Node{Spec: v1.NodeSpec{Unschedulable: u}}
				before := node.DeepCopy()
				if err := setter(ctx, node); err != nil {
					t.Fatal(err)
				}
				if !apiequality.Semantic.DeepEqual(before, node) {
					t.Errorf("SchedulableEvent changed the node: %s", diff.Diff(before, node))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("events = %v, want %v", got, tc.want)
			}
		})
	}
}
