package lease

import (
	"context"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultServingProbePeriod is how often a ServingProbe asks /readyz while someone waits: the Lease
// resumes at most this long (plus a round trip) after the API server serves again.
const DefaultServingProbePeriod = 250 * time.Millisecond

// ServingProbe tells when the API server serves again after a transport failure, for every Renewer of a
// process at once: while at least one caller waits in Wait, one goroutine GETs /readyz every Period (each
// bounded by Period·4) until it answers 200 OK, then releases every waiter. Nothing is sent while nobody
// waits, so a healthy agent pays nothing, and N simulated nodes waiting cost one request per Period.
//
// It exists because the component-helpers lease controller (like the kubelet's) backs off up to 7 s
// between attempts to find its Lease after failures: without the probe, renewal resumes up to 7 s after
// the API server is back, and a Node the node lifecycle controller marked Unknown stays Unknown that long.
type ServingProbe struct {
	client rest.Interface
	clock  clock.Clock
	period time.Duration

	mu      sync.Mutex
	serving chan struct{} // closed when the running probe saw 200; nil while no probe runs
	waiters int
}

// NewServingProbe returns a probe that GETs /readyz through client (the heartbeat client's REST client:
// same credentials and transport as the Lease writes) every period (DefaultServingProbePeriod if 0).
func NewServingProbe(client rest.Interface, clk clock.Clock, period time.Duration) *ServingProbe {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if period <= 0 {
		period = DefaultServingProbePeriod
	}
	return &ServingProbe{client: client, clock: clk, period: period}
}

// Wait blocks until the API server answers /readyz with 200 OK, or ctx ends (then it returns ctx's
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

// probe GETs /readyz every period until it answers 200 or nobody waits any more, then closes serving
// (on 200) and lets the next Wait start a new probe.
func (p *ServingProbe) probe(ctx context.Context, cancel context.CancelFunc, serving chan struct{}) {
	defer cancel()
	logger := klog.FromContext(ctx)
	for {
		reqCtx, reqCancel := context.WithTimeout(ctx, 4*p.period)
		var code int
		err := p.client.Get().AbsPath("/readyz").Do(reqCtx).StatusCode(&code).Error()
		reqCancel()
		p.mu.Lock()
		if err == nil && code == http.StatusOK {
			close(serving)
			p.serving = nil
			p.mu.Unlock()
			logger.V(2).Info("API server serves again")
			return
		}
		if p.waiters == 0 {
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
