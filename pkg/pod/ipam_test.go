package pod

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestNewIPAllocatorErrors(t *testing.T) {
	for _, tc := range []struct {
		cidrs   []netip.Prefix
		wantErr string
	}{
		{nil, "want one or two"},
		{prefixes("10.0.0.0/24", "fd00::/64", "10.1.0.0/24"), "want one or two"},
		{prefixes("10.0.0.1/24"), "host bits set, the network is 10.0.0.0/24"},
		{prefixes("10.0.0.0/31"), "too small"},
		{prefixes("fd00::/127"), "too small"},
		{prefixes("10.0.0.0/24", "10.1.0.0/24"), "same IP family"},
		{prefixes("10.0.0.0/30"), ""},
		{prefixes("10.0.0.0/24", "fd00::/64"), ""},
	} {
		_, err := NewIPAllocator(tc.cidrs...)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("NewIPAllocator(%v) = %v, want error containing %q", tc.cidrs, err, tc.wantErr)
		}
	}
}

func TestIPAllocatorAllocate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cidrs []netip.Prefix
		pods  int
		want  [][]string // per pod
		// wantExhausted: the pod index whose allocation fails
		wantExhausted int
	}{
		{name: "IPv4 skips network and gateway", cidrs: prefixes("10.244.1.0/24"), pods: 2,
			want: [][]string{{"10.244.1.2"}, {"10.244.1.3"}}, wantExhausted: -1},
		{name: "a /30 has one address, then exhausted", cidrs: prefixes("10.0.0.0/30"), pods: 2,
			want: [][]string{{"10.0.0.2"}}, wantExhausted: 1},
		{name: "a /29 ends before broadcast", cidrs: prefixes("10.0.0.0/29"), pods: 6,
			want: [][]string{{"10.0.0.2"}, {"10.0.0.3"}, {"10.0.0.4"}, {"10.0.0.5"}, {"10.0.0.6"}}, wantExhausted: 5},
		{name: "IPv6 /126 has no broadcast", cidrs: prefixes("fd00::/126"), pods: 3,
			want: [][]string{{"fd00::2"}, {"fd00::3"}}, wantExhausted: 2},
		{name: "dual-stack: one per family in CIDR order", cidrs: prefixes("fd00:1::/64", "10.0.0.0/24"), pods: 2,
			want: [][]string{{"fd00:1::2", "10.0.0.2"}, {"fd00:1::3", "10.0.0.3"}}, wantExhausted: -1},
		{name: "dual-stack: the small family exhausts", cidrs: prefixes("10.0.0.0/30", "fd00::/64"), pods: 2,
			want: [][]string{{"10.0.0.2", "fd00::2"}}, wantExhausted: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewIPAllocator(tc.cidrs...)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.pods {
				uid := types.UID(fmt.Sprint("pod-", i))
				ips, err := a.Allocate(uid)
				if i == tc.wantExhausted {
					if !errors.Is(err, ErrPodCIDRExhausted) || !strings.Contains(err.Error(), tc.cidrs[0].String()) && !strings.Contains(err.Error(), "10.0.0.0/30") {
						t.Fatalf("pod %d: err = %v, want ErrPodCIDRExhausted naming the CIDR", i, err)
					}
					if got := a.Allocated(); got != i*len(tc.cidrs) {
						t.Errorf("after a failed allocation %d addresses allocated, want %d (nothing kept)", got, i*len(tc.cidrs))
					}
					return
				}
				if err != nil {
					t.Fatalf("pod %d: %v", i, err)
				}
				if fmt.Sprint(ips) != fmt.Sprint(addrs(tc.want[i]...)) {
					t.Errorf("pod %d got %v, want %v", i, ips, tc.want[i])
				}
				again, _ := a.Allocate(uid)
				if fmt.Sprint(again) != fmt.Sprint(ips) {
					t.Errorf("pod %d allocated again got %v, want the same %v", i, again, ips)
				}
			}
		})
	}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestIPAllocatorRoundRobinAndRelease(t *testing.T) {
	a, _ := NewIPAllocator(prefixes("10.0.0.0/29")...) // .2 to .6
	for i := range 3 {
		a.Allocate(types.UID(fmt.Sprint(i))) // .2 .3 .4
	}
	a.Release("0")
	a.Release("never-allocated")
	got, _ := a.Allocate("x")
	if got[0] != netip.MustParseAddr("10.0.0.5") {
		t.Errorf("after releasing .2 the next allocation is %v, want 10.0.0.5 (host-local's round-robin)", got)
	}
	a.Allocate("y") // .6
	got, _ = a.Allocate("z")
	if got[0] != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("wrapping allocation is %v, want the freed 10.0.0.2", got)
	}
	if _, err := a.Allocate("full"); !errors.Is(err, ErrPodCIDRExhausted) {
		t.Errorf("allocation in a full range: %v, want ErrPodCIDRExhausted", err)
	}
}

func TestIPAllocatorRestore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     types.UID
		ips     []string
		wantErr error
	}{
		{name: "free address", pod: "b", ips: []string{"10.0.0.9"}},
		{name: "own address again", pod: "a", ips: []string{"10.0.0.2"}},
		{name: "another pod's address", pod: "b", ips: []string{"10.0.0.9", "10.0.0.2"}, wantErr: ErrAddressInUse},
		{name: "the gateway", pod: "b", ips: []string{"10.0.0.1"}, wantErr: ErrNotInPodCIDR},
		{name: "outside the CIDR", pod: "b", ips: []string{"10.9.0.5"}, wantErr: ErrNotInPodCIDR},
		{name: "IPv4-mapped IPv6 form", pod: "b", ips: []string{"::ffff:10.0.0.9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := NewIPAllocator(prefixes("10.0.0.0/24")...)
			if _, err := a.Allocate("a"); err != nil { // 10.0.0.2
				t.Fatal(err)
			}
			err := a.Restore(tc.pod, addrs(tc.ips...))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Restore = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if a.Allocated() != 1 {
					t.Errorf("a refused Restore recorded addresses: %d allocated", a.Allocated())
				}
				return
			}
			// Restored addresses are never handed out again.
			for i := range 300 {
				ips, err := a.Allocate(types.UID(fmt.Sprint("new-", i)))
				if err != nil {
					break
				}
				for _, ip := range ips {
					for _, r := range addrs(tc.ips...) {
						if ip == r.Unmap() {
							t.Fatalf("restored %v handed out again to new-%d", r, i)
						}
					}
				}
			}
		})
	}
}

// TestIPAllocatorNeverTwice drives random allocations, releases and restores and checks after each that
// no address has two owners and every pod has one address per family.
func TestIPAllocatorNeverTwice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, _ := NewIPAllocator(prefixes("10.0.0.0/27", "fd00::/123")...) // 29 and 30 usable
	live := map[types.UID][]netip.Addr{}
	for step := range 5000 {
		uid := types.UID(fmt.Sprint("p", rng.IntN(40)))
		switch rng.IntN(3) {
		case 0, 1:
			ips, err := a.Allocate(uid)
			if err != nil {
				if !errors.Is(err, ErrPodCIDRExhausted) || len(live) < 29 {
					t.Fatalf("step %d: %v with %d pods", step, err, len(live))
				}
				continue
			}
			if old, ok := live[uid]; ok && fmt.Sprint(old) != fmt.Sprint(ips) {
				t.Fatalf("step %d: %s got %v, had %v", step, uid, ips, old)
			}
			live[uid] = ips
		case 2:
			a.Release(uid)
			delete(live, uid)
		}
		seen := map[netip.Addr]types.UID{}
		for p, ips := range live {
			if len(ips) != 2 {
				t.Fatalf("step %d: %s has %v", step, p, ips)
			}
			for _, ip := range ips {
				if other, dup := seen[ip]; dup {
					t.Fatalf("step %d: %v given to %s and %s", step, ip, other, p)
				}
				seen[ip] = p
			}
		}
		if a.Allocated() != 2*len(live) {
			t.Fatalf("step %d: %d allocated, want %d", step, a.Allocated(), 2*len(live))
		}
	}
}

func TestFallbackPodCIDR(t *testing.T) {
	for _, tc := range []struct {
		cluster string
		mask    int
		index   int
		want    string
		wantErr string
	}{
		{cluster: "10.128.0.0/9", mask: 24, index: 0, want: "10.128.0.0/24"},
		{cluster: "10.128.0.0/9", mask: 24, index: 257, want: "10.129.1.0/24"},
		{cluster: "10.128.0.0/9", mask: 24, index: 32767, want: "10.255.255.0/24"},
		{cluster: "10.128.0.0/9", mask: 24, index: 32768, wantErr: "out of the /24 subnets"},
		{cluster: "10.128.0.0/9", mask: 24, index: -1, wantErr: "node index -1"},
		{cluster: "10.128.0.0/9", mask: 8, index: 0, wantErr: "does not fit"},
		{cluster: "fd00::/48", mask: 64, index: 3, want: "fd00:0:0:3::/64"},
	} {
		got, err := FallbackPodCIDR(netip.MustParsePrefix(tc.cluster), tc.mask, tc.index)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("FallbackPodCIDR(%s, %d, %d) error %v, want %q", tc.cluster, tc.mask, tc.index, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("FallbackPodCIDR(%s, %d, %d) = %v, %v; want %s", tc.cluster, tc.mask, tc.index, got, err, tc.want)
		}
	}
}

func TestNodePodCIDRs(t *testing.T) {
	for _, tc := range []struct {
		spec    v1.NodeSpec
		want    string
		wantErr string
	}{
		{spec: v1.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24", "fd00::/64"}}, want: "[10.0.0.0/24 fd00::/64]"},
		{spec: v1.NodeSpec{PodCIDR: "10.0.0.0/24"}, want: "[10.0.0.0/24]"},
		{spec: v1.NodeSpec{}, want: "[]"},
		{spec: v1.NodeSpec{PodCIDRs: []string{"nope"}}, wantErr: `spec.podCIDRs[0] "nope"`},
	} {
		got, err := NodePodCIDRs(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: tc.spec})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NodePodCIDRs(%+v) error %v, want %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("NodePodCIDRs(%+v) = %v, %v; want %s", tc.spec, got, err, tc.want)
		}
	}
}

// BenchmarkIPAllocatorFullNode: one pod's Allocate and Release on a Node that already holds 10 000 pods
// (scenario 1 of make bench-pods): a lookup by pod, not a scan of every address.
func BenchmarkIPAllocatorFullNode(b *testing.B) {
	a, err := NewIPAllocator(netip.MustParsePrefix("172.16.0.0/16"))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		if _, err := a.Allocate(types.UID(fmt.Sprintf("pod-%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Allocate("new"); err != nil {
			b.Fatal(err)
		}
		a.Release("new")
	}
}
