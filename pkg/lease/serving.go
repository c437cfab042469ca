package lease

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclientv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultServingProbePeriod is how often a ServingProbe asks /readyz while someone waits: the Lease
// resumes at most this long (plus a round trip) after the API server serves again.
const DefaultServingProbePeriod = 250 * time.Millisecond

// ServingProbe tells when the API server serves again after a transport failure, for every Renewer of a
// process at once: while at least one caller waits in Wait, one goroutine GETs one Lease (in
// kube-node-lease; a node identity may read its own) every Period (each bounded by Period·4) until the API
// server answers from storage (the Lease, or NotFound, Forbidden and the like; not a transport error, a
// timeout, 429 or a 5xx), then releases every waiter. Not /readyz: after a restart the API server serves
// storage a second or more before all its post-start hooks report ready, and a node may not read the
// per-check paths (/readyz/etcd). Nothing is sent while nobody waits, so a healthy agent pays nothing, and N
// simulated nodes waiting cost one request per Period.
//
// It exists because the component-helpers lease controller (like the kubelet's) backs off up to 7 s
// between attempts to find its Lease after failures: without the probe, renewal resumes up to 7 s after
// the API server is back, and a Node the node lifecycle controller marked Unknown stays Unknown that long.
type ServingProbe struct {
	leases coordinationclientv1.LeaseInterface
	name   string
	clock  clock.Clock
	period time.Duration

	mu      sync.Mutex
	serving chan struct{} // closed when the running probe saw 200; nil while no probe runs
	waiters int
	// callbacks are OnServing's functions, called once when the running probe sees an answer.
	callbacks []func()
}

// NewServingProbe returns a probe that GETs the Lease leaseName in kube-node-lease through client (the
// heartbeat client: same credentials and transport as the Lease writes) every period
// (DefaultServingProbePeriod if 0).
func NewServingProbe(client kubernetes.Interface, leaseName string, clk clock.Clock, period time.Duration) *ServingProbe {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if period <= 0 {
		period = DefaultServingProbePeriod
	}
	return &ServingProbe{leases: client.CoordinationV1().Leases(Namespace), name: leaseName, clock: clk, period: period}
}

// Wait blocks until the API server answers from storage, or ctx ends (then it returns ctx's
// error). Concurrent callers share one probe.
func (p *ServingProbe) Wait(ctx context.Context) error {
	p.mu.Lock()
	if p.serving == nil {
		p.serving = make(chan struct{})
		probeCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		go p.probe(probeCtx, cancel, p.serving)
	}
	serving := p.serving
	p.waiters++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
	}()
	select {
	case <-serving:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// OnServing calls fn once, from the probe's goroutine, as soon as the API server answers again (see
// Wait); it never blocks. The queue's Lease steps use it instead of Wait, so that no worker
// waits: fn queues the step again.
func (p *ServingProbe) OnServing(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.callbacks = append(p.callbacks, fn)
	if p.serving == nil {
		p.serving = make(chan struct{})
		probeCtx, cancel := context.WithCancel(context.Background())
		go p.probe(probeCtx, cancel, p.serving)
	}
}

// probe GETs the Lease every period until the API server answers from storage or nobody waits any
// more, then closes serving (on an answer) and lets the next Wait start a new probe.
func (p *ServingProbe) probe(ctx context.Context, cancel context.CancelFunc, serving chan struct{}) {
	defer cancel()
	logger := klog.FromContext(ctx)
	for {
		reqCtx, reqCancel := context.WithTimeout(ctx, 4*p.period)
		_, err := p.leases.Get(reqCtx, p.name, metav1.GetOptions{})
		reqCancel()
		p.mu.Lock()
		if answered(err) {
			close(serving)
			p.serving = nil
			callbacks := p.callbacks
			p.callbacks = nil
			p.mu.Unlock()
			for _, fn := range callbacks {
				fn()
			}
			logger.V(2).Info("API server serves again")
			return
		}
		if p.waiters == 0 && len(p.callbacks) == 0 {
			p.serving = nil // the waiters left (their contexts ended): stop asking
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(p.period):
		}
	}
}

// answered reports whether err (of a GET) means the API server answered from storage: no error, or an API
// status other than a timeout, throttling or a server error.
func answered(err error) bool {
	if err == nil {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code != 0 && code < http.StatusInternalServerError && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout
}
