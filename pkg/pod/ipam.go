package pod

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Errors of the pod IP allocator, wrapped with the CIDR or address concerned.
var (
	// ErrPodCIDRExhausted: every usable address of a pod CIDR is taken.
	ErrPodCIDRExhausted = errors.New("pod CIDR exhausted")
	// ErrAddressInUse: Restore was given an address another pod owns.
	ErrAddressInUse = errors.New("address already allocated to another pod")
	// ErrNotInPodCIDR: Restore was given an address outside the Node's usable pod CIDR ranges.
	ErrNotInPodCIDR = errors.New("address not in the node's pod CIDRs")
)

// DefaultFallbackClusterCIDR is the range FallbackPodCIDR carves per-Node /24s from when a Node has no
// spec.podCIDRs (kube-controller-manager's nodeipam not running): 10.128.0.0/9 holds 32768 Nodes and
// overlaps neither the default Service range 10.96.0.0/12 nor the usual --cluster-cidr 10.244.0.0/16.
var DefaultFallbackClusterCIDR = netip.MustParsePrefix("10.128.0.0/9")

// DefaultFallbackNodeMaskSize is the size of a fallback per-Node pod CIDR, as nodeipam's default
// --node-cidr-mask-size for IPv4: 254 usable addresses, above the kubelet's default 110 pods.
const DefaultFallbackNodeMaskSize = 24

// FallbackPodCIDR returns the index-th subnet of size maskSize inside cluster: the pod CIDR of the
// index-th Node (a simulated Node's global index) when the Node has no spec.podCIDRs. Errors when
// maskSize is not within cluster's family and longer than its prefix, or index is negative or beyond
// the subnets cluster holds.
func FallbackPodCIDR(cluster netip.Prefix, maskSize, index int) (netip.Prefix, error) {
	cluster = cluster.Masked()
	if !cluster.IsValid() || maskSize <= cluster.Bits() || maskSize > cluster.Addr().BitLen() {
		return netip.Prefix{}, fmt.Errorf("fallback pod CIDR: mask size %d does not fit in cluster CIDR %s", maskSize, cluster)
	}
	if bits := maskSize - cluster.Bits(); index < 0 || (bits < 62 && int64(index) >= int64(1)<<bits) {
		return netip.Prefix{}, fmt.Errorf("fallback pod CIDR: node index %d out of the %s subnets of cluster CIDR %s", index, fmt.Sprintf("/%d", maskSize), cluster)
	}
	n := new(big.Int).SetBytes(cluster.Addr().AsSlice())
	off := new(big.Int).Lsh(big.NewInt(int64(index)), uint(cluster.Addr().BitLen()-maskSize))
	n.Add(n, off)
	b := n.FillBytes(make([]byte, cluster.Addr().BitLen()/8))
	addr, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(addr, maskSize), nil
}

// NodePodCIDRs returns a Node's pod CIDRs from spec.podCIDRs (spec.podCIDR when that is empty), at
// most one per IP family. Errors name the field and the value.
func NodePodCIDRs(node *v1.Node) ([]netip.Prefix, error) {
	raw := node.Spec.PodCIDRs
	if len(raw) == 0 && node.Spec.PodCIDR != "" {
		raw = []string{node.Spec.PodCIDR}
	}
	out := make([]netip.Prefix, 0, len(raw))
	for i, s := range raw {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("node %s: spec.podCIDRs[%d] %q: %w", node.Name, i, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ipRange is the usable part of one pod CIDR: first..last, as the CNI host-local plugin's default range
// (containernetworking/plugins host-local allocator Range.Canonicalize): from the network address + 1,
// skipping the gateway (network + 1), to the last address (for IPv4 the one before broadcast).
type ipRange struct {
	prefix      netip.Prefix
	first, last netip.Addr
	size        uint64 // usable addresses, capped at MaxUint64
	used        uint64 // allocated in this range
	next        netip.Addr
}

// IPAllocator hands out pod IPs on one Node: one address per pod CIDR (one per IP family, so two for a
// dual-stack Node, in the CIDRs' order), never one address to two pods, round-robin from the address
// after the last one handed out (host-local's order, so that a freed address is not reused at once).
// It holds one map entry per allocated address and nothing per free one. Safe for concurrent use.
type IPAllocator struct {
	mu     sync.Mutex
	ranges []ipRange
	owners map[netip.Addr]types.UID
	// byPod is owners inverted: each pod's addresses (a lookup per pod, not a scan of every address).
	byPod map[types.UID][]netip.Addr
}

// NewIPAllocator returns an allocator over cidrs (a Node's spec.podCIDRs, or FallbackPodCIDR). Errors,
// naming the CIDR: no CIDR, more than two, two of one family, host bits set, or too small (a /31 or /32,
// a /127 or /128: host-local refuses them).
func NewIPAllocator(cidrs ...netip.Prefix) (*IPAllocator, error) {
	if len(cidrs) == 0 || len(cidrs) > 2 {
		return nil, fmt.Errorf("pod CIDRs %v: want one or two (one per IP family)", cidrs)
	}
	a := &IPAllocator{owners: map[netip.Addr]types.UID{}, byPod: map[types.UID][]netip.Addr{}}
	for _, p := range cidrs {
		if !p.IsValid() {
			return nil, fmt.Errorf("pod CIDR %v is not valid", p)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("pod CIDR %s has host bits set, the network is %s", p, p.Masked())
		}
		if p.Bits() > p.Addr().BitLen()-2 {
			return nil, fmt.Errorf("pod CIDR %s is too small to allocate from", p)
		}
		for _, r := range a.ranges {
			if r.prefix.Addr().Is4() == p.Addr().Is4() {
				return nil, fmt.Errorf("pod CIDRs %s and %s are of the same IP family", r.prefix, p)
			}
		}
		last := lastAddr(p)
		if p.Addr().Is4() {
			last = last.Prev()
		}
		hostBits := p.Addr().BitLen() - p.Bits()
		size := ^uint64(0)
		if hostBits < 64 {
			size = uint64(1) << hostBits
			size -= 2 // network address and gateway
			if p.Addr().Is4() {
				size-- // broadcast
			}
		}
		first := p.Addr().Next().Next()
		a.ranges = append(a.ranges, ipRange{prefix: p, first: first, last: last, size: size, next: first})
	}
	return a, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Allocate returns pod's addresses, one per pod CIDR, allocating them on first call (later calls return
// the same). When one CIDR is exhausted nothing is allocated and the error wraps ErrPodCIDRExhausted
// with that CIDR.
func (a *IPAllocator) Allocate(pod types.UID) ([]netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ips := a.lookup(pod); len(ips) > 0 {
		return ips, nil
	}
	ips := make([]netip.Addr, 0, len(a.ranges))
	for i := range a.ranges {
		r := &a.ranges[i]
		if r.used >= r.size {
			for _, ip := range ips {
				a.free(ip)
			}
			return nil, fmt.Errorf("pod %s: %w: %s (%d addresses in use)", pod, ErrPodCIDRExhausted, r.prefix, r.used)
		}
		ip := r.next
		for { // at most used+1 steps: fewer than size addresses are taken
			if _, taken := a.owners[ip]; !taken {
				break
			}
			ip = r.after(ip)
		}
		a.take(ip, pod)
		r.next = r.after(ip)
		ips = append(ips, ip)
	}
	return ips, nil
}

func (r *ipRange) after(ip netip.Addr) netip.Addr {
	if ip == r.last {
		return r.first
	}
	return ip.Next()
}

func (r *ipRange) contains(ip netip.Addr) bool {
	return r.prefix.Contains(ip) && ip.Compare(r.first) >= 0 && ip.Compare(r.last) <= 0
}

// lookup returns pod's addresses in range order.
func (a *IPAllocator) lookup(pod types.UID) []netip.Addr {
	ips := slices.Clone(a.byPod[pod])
	slices.SortFunc(ips, func(x, y netip.Addr) int { return a.rangeIndex(x) - a.rangeIndex(y) })
	return ips
}

// take records ip as pod's, in its range's count.
func (a *IPAllocator) take(ip netip.Addr, pod types.UID) {
	a.owners[ip] = pod
	a.byPod[pod] = append(a.byPod[pod], ip)
	a.ranges[a.rangeIndex(ip)].used++
}

func (a *IPAllocator) rangeIndex(ip netip.Addr) int {
	for i := range a.ranges {
		if a.ranges[i].contains(ip) {
			return i
		}
	}
	return len(a.ranges)
}

func (a *IPAllocator) free(ip netip.Addr) {
	if pod, ok := a.owners[ip]; ok {
		if rest := slices.DeleteFunc(a.byPod[pod], func(x netip.Addr) bool { return x == ip }); len(rest) > 0 {
			a.byPod[pod] = rest
		} else {
			delete(a.byPod, pod)
		}
	}
	delete(a.owners, ip)
	if i := a.rangeIndex(ip); i < len(a.ranges) {
		a.ranges[i].used--
	}
}

// Release frees pod's addresses; releasing a pod without any is a no-op.
func (a *IPAllocator) Release(pod types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ip := range a.lookup(pod) {
		a.free(ip)
	}
}

// Restore records ips as pod's, for pods already bound with addresses when the process starts (their
// status.podIPs). Addresses pod already owns are accepted again. Errors, with nothing recorded: an
// address another pod owns (wraps ErrAddressInUse, naming both pods) or outside the usable ranges
// (wraps ErrNotInPodCIDR, naming the CIDRs).
func (a *IPAllocator) Restore(pod types.UID, ips []netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ip := range ips {
		ip = ip.Unmap()
		if owner, ok := a.owners[ip]; ok && owner != pod {
			return fmt.Errorf("restore %s for pod %s: %w: %s", ip, pod, ErrAddressInUse, owner)
		}
		if a.rangeIndex(ip) == len(a.ranges) {
			return fmt.Errorf("restore %s for pod %s: %w %v", ip, pod, ErrNotInPodCIDR, a.CIDRs())
		}
	}
	for _, ip := range ips {
		ip = ip.Unmap()
		if _, ok := a.owners[ip]; !ok {
			a.take(ip, pod)
		}
	}
	return nil
}

// Allocated returns how many addresses are allocated.
func (a *IPAllocator) Allocated() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.owners)
}

// CIDRs returns the pod CIDRs the allocator hands addresses out of, in the order NewIPAllocator was
// given them.
func (a *IPAllocator) CIDRs() []netip.Prefix {
	out := make([]netip.Prefix, len(a.ranges))
	for i := range a.ranges {
		out[i] = a.ranges[i].prefix
	}
	return out
}
