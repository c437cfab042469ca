// Package nodecache decides whether the Node informer's cache can be trusted for a Node: the one
// place that knows it. A Node's cache turns stale when a heartbeat to the API server fails (the
// connection, and so the informer's watch, may be gone: changes such as the node lifecycle
// controller's Ready=Unknown can be missed) or when the informer's watch ends with an error; it is
// current again only when the informer delivers an event for that Node, or any Node's event at or
// past the resourceVersion at which the syncer last read the Node from the API server (ReadAt): either
// proves its watch is live again and past the Node's last change (a GET that finds the cache at the
// API server's resourceVersion does not: the watch may still be down and miss the next change). While
// stale, the status syncer reads the Node from the API server.
//
// One Tracker serves every Node of a process (one for the agent, N for the simulation) and is fed by
// the one shared Node informer: wire EventHandler and WatchErrorHandler to it.
package nodecache

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"unique"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// StripManagedFields is a cache.TransformFunc for the Node informer (informers.WithTransform): it
// drops metadata.managedFields from every object before it is stored, as controller-runtime's
// cache.TransformStripManagedFields. Nothing here reads them, and they are most of a Node's metadata
// (a few hundred bytes per field manager): at thousands of simulated Nodes, megabytes of heap. Objects
// that are not metav1.Objects (tombstones) pass through unchanged; it never fails.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// TrimNode is StripManagedFields for the Node informer plus interning: every string a Node shares
// with the others of its kind (label and annotation keys and values, condition types, reasons and
// messages, nodeInfo's versions, resource names, image names, taints, address types) is replaced by
// one canonical copy (package unique), and a capacity, allocatable or image list equal to one an
// earlier Node had is replaced by that one (see sharedValues), so that thousands of simulated Nodes
// of one template cost one copy of each instead of one per Node. The Node is otherwise unchanged
// (it is equal to the original by reflect.DeepEqual). Objects in an informer's store are read-only to
// everyone (client-go's rule), which is what makes sharing them between Nodes safe: whoever changes
// a Node copies it first (statussync does).
func TrimNode(obj any) (any, error) {
	obj, _ = StripManagedFields(obj)
	n, ok := obj.(*v1.Node)
	if !ok {
		return obj, nil
	}
	n.Labels = internMap(n.Labels)
	n.Annotations = internMap(n.Annotations)
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		t.Key, t.Value, t.Effect = intern(t.Key), intern(t.Value), v1.TaintEffect(intern(string(t.Effect)))
	}
	st := &n.Status
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type, c.Status = v1.NodeConditionType(intern(string(c.Type))), v1.ConditionStatus(intern(string(c.Status)))
		c.Reason, c.Message = intern(c.Reason), intern(c.Message)
	}
	for i := range st.Addresses {
		st.Addresses[i].Type = v1.NodeAddressType(intern(string(st.Addresses[i].Type)))
	}
	st.Capacity, st.Allocatable = shareResources(st.Capacity), shareResources(st.Allocatable)
	ni := &st.NodeInfo
	for _, f := range []*string{&ni.KernelVersion, &ni.OSImage, &ni.ContainerRuntimeVersion, &ni.KubeletVersion,
		&ni.KubeProxyVersion, &ni.OperatingSystem, &ni.Architecture} {
		*f = intern(*f)
	}
	st.Images = shareImages(st.Images)
	for i := range st.RuntimeHandlers {
		st.RuntimeHandlers[i].Name = intern(st.RuntimeHandlers[i].Name)
	}
	return n, nil
}

func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

func internMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = intern(v)
	}
	return out
}

func internResources(l v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(l))
	for k, q := range l {
		out[v1.ResourceName(intern(string(k)))] = q
	}
	return out
}

// sharedValues keeps one canonical copy of each value of one kind (a ResourceList, an image list)
// that the Nodes of a process hold, by a key that is equal exactly when the values are: TrimNode
// gives every Node holding an equal value the canonical copy. For a simulated Node of the default
// template's shape that is 2.3 KiB of heap in the informer's store instead of 4.5 KiB with strings
// interned only, and 6.6 KiB as decoded (BenchmarkTrimNodeHeap). It is bounded: once
// it holds sharedValuesMax values it forgets them all and starts again (Nodes keep what they were
// given; only later Nodes get new canonical copies), so a process whose Nodes all differ (real Nodes
// of changing capacity) keeps at most that many. Safe for concurrent use.
type sharedValues[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

// sharedValuesMax bounds each sharedValues: a simulation has a few templates, not 64.
const sharedValuesMax = 64

// get returns the canonical value for key, building it with build the first time.
func (s *sharedValues[T]) get(key string, build func() T) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[key]; ok {
		return v
	}
	if len(s.m) >= sharedValuesMax || s.m == nil {
		s.m = map[string]T{}
	}
	v := build()
	s.m[key] = v
	return v
}

var (
	sharedResources sharedValues[v1.ResourceList]
	sharedImages    sharedValues[[]v1.ContainerImage]
)

// shareResources returns the canonical copy of l (its names interned): equal names, quantities
// (their canonical strings) and formats share one map. Nil and empty lists stay as they are.
func shareResources(l v1.ResourceList) v1.ResourceList {
	if len(l) == 0 {
		return l
	}
	names := make([]string, 0, len(l))
	for k := range l {
		names = append(names, string(k))
	}
	slices.Sort(names)
	var b strings.Builder
	for _, k := range names {
		q := l[v1.ResourceName(k)]
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(q.String())
		b.WriteByte(0)
		b.WriteString(string(q.Format))
		b.WriteByte(1)
	}
	return sharedResources.get(b.String(), func() v1.ResourceList { return internResources(l) })
}

// shareImages returns the canonical copy of images (its names interned): lists with the same images,
// names and sizes in the same order share one slice. Nil and empty lists stay as they are.
func shareImages(images []v1.ContainerImage) []v1.ContainerImage {
	if len(images) == 0 {
		return images
	}
	var b strings.Builder
	for _, img := range images {
		for _, name := range img.Names {
			b.WriteString(name)
			b.WriteByte(0)
		}
		b.WriteString(strconv.FormatInt(img.SizeBytes, 10))
		b.WriteByte(1)
	}
	return sharedImages.get(b.String(), func() []v1.ContainerImage {
		for i := range images {
			for j, name := range images[i].Names {
				images[i].Names[j] = intern(name)
			}
		}
		return images
	})
}

// Tracker tracks, per Node name, whether the informer cache is current. The zero value is not
// usable; call New. Safe for concurrent use.
type Tracker struct {
	clock clock.PassiveClock

	mu    sync.Mutex
	stale map[string]Staleness
	// allStale is set by MarkAllStale; it holds for every Node without a later event.
	allStale    *Staleness
	allStaleSeq uint64
	freshSeq    map[string]uint64 // the allStaleSeq a Node's last MarkFresh saw
	// watchRV is the highest resourceVersion of a Node event the informer delivered since the watch last
	// failed: the watch stream has passed that point, for every Node.
	watchRV string
}

// Staleness says why and since when a Node's cache is not trusted.
type Staleness struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// Until, when set, is before when no informer event makes the cache current (MarkStaleUntil).
	Until time.Time `json:"until,omitzero"`

	eventSeen bool   // an event came before Until
	readRV    string // the resourceVersion of the Node as last read from the API server (ReadAt)
}

// New returns a Tracker in which every Node's cache is current.
func New(clk clock.PassiveClock) *Tracker {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Tracker{clock: clk, stale: map[string]Staleness{}, freshSeq: map[string]uint64{}}
}

// MarkStale marks one Node's cache stale for reason (kept if it is already stale).
func (t *Tracker) MarkStale(name, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.stale[name]; !ok {
		t.stale[name] = Staleness{Reason: reason, Since: t.clock.Now()}
	}
}

// MarkStaleUntil marks one Node's cache stale for reason until at least until: events before then
// do not make it current (the first event after, or one seen before and the time passing, does).
// After an outage the API server's watch cache can lag behind etcd, so its events prove little for
// a while; the status syncer reads the Node from the API server meanwhile.
func (t *Tracker) MarkStaleUntil(name, reason string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.stale[name]
	if !ok {
		s = Staleness{Reason: reason, Since: t.clock.Now()}
	}
	if until.After(s.Until) {
		s.Until = until
	}
	s.eventSeen = false
	t.stale[name] = s
}

// MarkAllStale marks every Node's cache stale for reason, e.g. when the shared watch failed.
func (t *Tracker) MarkAllStale(reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.allStaleSeq++
	t.allStale = &Staleness{Reason: reason, Since: t.clock.Now()}
	t.watchRV = ""
}

// ReadAt records that the Node was read from the API server at resourceVersion rv while its cache was
// stale. Once the informer has delivered any Node's event at or past rv (and Until has passed), the
// Node's cache is current: the watch is live and past the Node's last change, so it holds that change and
// will deliver the next. Without this, a stale Node stays stale until an event for that very Node (its
// next status patch, up to the report frequency), and every sync meanwhile GETs it: at thousands of
// simulated Nodes after an API server hiccup, that is thousands of GETs per status period.
func (t *Tracker) ReadAt(name, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.stale[name]; ok {
		s.readRV = rv
		t.stale[name] = s
	}
}

// passed reports whether the watch has delivered an event at or past rv. Call with t.mu held.
func (t *Tracker) passed(rv string) bool {
	if rv == "" || t.watchRV == "" {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(t.watchRV, rv)
	return err == nil && c >= 0
}

// observe raises watchRV to rv. Call with t.mu held.
func (t *Tracker) observe(rv string) {
	if rv == "" {
		return
	}
	if t.watchRV == "" {
		t.watchRV = rv
		return
	}
	if c, err := resourceversion.CompareResourceVersion(rv, t.watchRV); err == nil && c > 0 {
		t.watchRV = rv
	}
}

// MarkFresh marks one Node's cache current.
func (t *Tracker) MarkFresh(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.freshSeq[name] = t.allStaleSeq
	if s, ok := t.stale[name]; ok && t.clock.Now().Before(s.Until) {
		s.eventSeen = true
		t.stale[name] = s
		return
	}
	delete(t.stale, name)
}

// Stale returns why the Node's cache is not trusted, or nil when it is current.
func (t *Tracker) Stale(name string) *Staleness {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.stale[name]; ok {
		untilPassed := s.Until.IsZero() || !t.clock.Now().Before(s.Until)
		switch {
		case !s.Until.IsZero() && untilPassed && s.eventSeen:
			delete(t.stale, name)
		case untilPassed && t.passed(s.readRV):
			delete(t.stale, name)
		default:
			return &s
		}
	}
	if t.allStale != nil && t.freshSeq[name] < t.allStaleSeq {
		s := *t.allStale
		return &s
	}
	return nil
}

// Node returns the view of one Node, for the status syncer and the Lease renewer of that Node.
func (t *Tracker) Node(name string) *Node { return &Node{t: t, name: name} }

// EventHandler returns the informer event handler that marks a Node current on each of its events
// (a re-list after a broken watch delivers an update for every Node, changed or not).
func (t *Tracker) EventHandler() cache.ResourceEventHandler {
	fresh := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if n, ok := obj.(*v1.Node); ok {
			t.mu.Lock()
			t.observe(n.ResourceVersion)
			t.mu.Unlock()
			t.MarkFresh(n.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { fresh(obj) },
		UpdateFunc: func(_, obj any) { fresh(obj) },
		DeleteFunc: fresh,
	}
}

// WatchErrorHandler returns the informer's watch error handler: it marks every Node stale, then
// logs as client-go's DefaultWatchErrorHandler.
func (t *Tracker) WatchErrorHandler() cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		t.MarkAllStale(fmt.Sprintf("node watch failed: %v", err))
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}
}

// Node is one Node's view of a Tracker.
type Node struct {
	t    *Tracker
	name string
}

// MarkStale marks this Node's cache stale for reason.
func (n *Node) MarkStale(reason string) { n.t.MarkStale(n.name, reason) }

// MarkFresh marks this Node's cache current.
func (n *Node) MarkFresh() { n.t.MarkFresh(n.name) }

// MarkStaleUntil marks this Node's cache stale for reason until at least until.
func (n *Node) MarkStaleUntil(reason string, until time.Time) {
	n.t.MarkStaleUntil(n.name, reason, until)
}

// ReadAt records that this Node was read from the API server at resourceVersion rv (see Tracker.ReadAt).
func (n *Node) ReadAt(rv string) { n.t.ReadAt(n.name, rv) }

// Stale returns why this Node's cache is not trusted, or nil.
func (n *Node) Stale() *Staleness { return n.t.Stale(n.name) }
