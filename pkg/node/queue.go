package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// stepKey is a work queue item: one step of one Node's controller. The controller's pointer is the
// key, so a Node stopped and started again (a new Controller) never runs the old one's items.
type stepKey struct {
	c    *Controller
	step Step
}

// Defaults of QueueConfig.
const (
	// DefaultWorkers and DefaultLeaseWorkers serve one Node (the single agent): a hung runtime
	// call holds one worker, the status sync runs on the other, and the Lease has its own.
	DefaultWorkers      = 2
	DefaultLeaseWorkers = 1
	// DefaultPodWorkers serve the pods of a library Node with a PodProvider.
	DefaultPodWorkers = 2
	// DefaultStepTimeout bounds one run of any step, so that no call without a timeout of its own
	// can hold a worker for ever. The steps' own bounds are shorter: CRI calls StatusCallTimeout,
	// API calls the heartbeat client's timeout.
	DefaultStepTimeout = time.Minute
	// registrationBackoff and registrationMaxBackoff space failed registration attempts: 100 ms
	// doubling to 7 s, as the kubelet's registerWithAPIServer.
	registrationBackoff    = 100 * time.Millisecond
	registrationMaxBackoff = 7 * time.Second
	// podBackoff and podMaxBackoff space the retries of a failed pod step (an API write, the
	// provider), as client-go's default controller rate limiter per item.
	podBackoff    = 5 * time.Millisecond
	podMaxBackoff = 1000 * time.Second
	// closeAllConnsMinInterval spaces the closing of every API connection: when the API server goes
	// away every Node's heartbeat fails and asks for it, and closing once is what one agent does.
	closeAllConnsMinInterval = 10 * time.Second
)

// QueueConfig configures a Queue.
type QueueConfig struct {
	// Workers run the runtime, status and fast-update steps of every Node; LeaseWorkers run only
	// Lease steps, from a queue of their own, so that no slow status sync or hung runtime of any Node
	// delays any Node's Lease. Defaults DefaultWorkers and DefaultLeaseWorkers.
	Workers, LeaseWorkers int
	// PodWorkers run the pod steps of every Node that runs pods (Config.Pods), from a queue of their
	// own, so that no pod storm delays any Node's Lease or status. Default DefaultPodWorkers.
	PodWorkers int
	// StepTimeout bounds one run of a step (DefaultStepTimeout when 0).
	StepTimeout time.Duration
	// Clock drives the work queues' delays and every controller's timing; default the real clock.
	Clock clock.WithTicker
	// CloseAllConns, if set, closes every API connection of the process (the kubelet's
	// closeAllConns, which also resets the informers' watches). It is called on a Node's repeated
	// heartbeat failure only while the process's heartbeats fail as a whole (see Heartbeats), and
	// at most once per 10 s.
	CloseAllConns func()
	// Coalesce, when positive, moves each step's next run down onto a grid of Coalesce in the
	// clock's time (a run due at 12:00:07.3 runs at 12:00:07 with a 1 s grid), when its delay is at
	// least 2 × Coalesce; shorter delays and backoffs are kept. The runs of every Node due in one
	// grid interval then pop together: the delaying queue wakes once per interval instead of once
	// per step, and the workers serve a batch without parking between items. A run moves earlier
	// by less than Coalesce, never later, so a Lease is still renewed within its renew interval.
	// The simulator sets it (wake-ups are its cost at thousands of Nodes: BENCHMARKS.md); 0 (the
	// single agent) keeps every delay as the step returned it.
	Coalesce time.Duration
}

// Queue runs the steps of every Node of a process on client-go work queues (delaying and
// rate-limited) served by bounded pools of workers: one queue for the Lease steps, one for the other
// Node steps, one for the pods of the Nodes that run pods. No Node has a goroutine or a timer of its
// own. Build with NewQueue, add controllers with Start (before or while Run runs), run with Run.
//
// Its other jobs have types of their own: the process's heartbeat and outage policy (outagePolicy,
// over Heartbeats), the routing of the pod informer's events to the Nodes (podRouter), and the
// liveness of its pools (liveness).
//
// It follows KWOK's node lease controller (one delaying queue, a worker pool) and controller-runtime's
// controllers (a rate-limited work queue, Forget on success).
type Queue struct {
	cfg    QueueConfig
	queues [2]workqueue.TypedRateLimitingInterface[stepKey] // [0] Lease, [1] the others
	pods   workqueue.TypedRateLimitingInterface[podKey]

	outage *outagePolicy
	router podRouter
	alive  *liveness

	mu          sync.Mutex
	controllers map[*Controller]struct{}
	running     bool
}

// NewQueue validates cfg and builds the queues. It starts nothing.
func NewQueue(cfg QueueConfig) (*Queue, error) {
	if cfg.Workers < 0 || cfg.LeaseWorkers < 0 || cfg.PodWorkers < 0 {
		return nil, fmt.Errorf("node: QueueConfig.Workers %d, LeaseWorkers %d and PodWorkers %d must not be negative", cfg.Workers, cfg.LeaseWorkers, cfg.PodWorkers)
	}
	if cfg.PodWorkers == 0 {
		cfg.PodWorkers = DefaultPodWorkers
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.LeaseWorkers == 0 {
		cfg.LeaseWorkers = DefaultLeaseWorkers
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Coalesce < 0 {
		return nil, fmt.Errorf("node: QueueConfig.Coalesce %s must not be negative", cfg.Coalesce)
	}
	s := &Queue{cfg: cfg, controllers: map[*Controller]struct{}{}}
	s.outage = newOutagePolicy(cfg.Clock, cfg.CloseAllConns)
	s.alive = newLiveness(cfg.Clock, cfg.StepTimeout)
	for i, name := range []string{"node_lease", "node_steps"} {
		limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[stepKey](registrationBackoff, registrationMaxBackoff)
		s.queues[i] = workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
			workqueue.TypedRateLimitingQueueConfig[stepKey]{Name: name, Clock: cfg.Clock})
	}
	s.pods = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[podKey](podBackoff, podMaxBackoff),
		workqueue.TypedRateLimitingQueueConfig[podKey]{Name: "node_pods", Clock: cfg.Clock})
	return s, nil
}

// Heartbeats returns the process's heartbeat tracker: whether its heartbeats fail as a whole.
func (s *Queue) Heartbeats() *Heartbeats { return s.outage.heartbeats }

// Len returns how many controllers the queue runs.
func (s *Queue) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.controllers)
}

func (s *Queue) queue(step Step) workqueue.TypedRateLimitingInterface[stepKey] {
	if step == StepLease {
		return s.queues[0]
	}
	return s.queues[1]
}

// Start adds c to the queue and queues its first steps (Controller.StartupSteps: the Lease, the
// runtime poll and registration, see startup.go). It returns an error when c runs on a queue
// already or has been stopped.
func (s *Queue) Start(c *Controller) error {
	if err := c.attach(s); err != nil {
		return err
	}
	s.mu.Lock()
	s.controllers[c] = struct{}{}
	s.mu.Unlock()
	if c.pods != nil {
		s.router.add(c)
	}
	c.deps.Recorder.Eventf(c.EventRef(), v1.EventTypeNormal, "Starting", "Starting nodeagent.")
	for _, step := range c.StartupSteps() {
		s.add(c, step)
	}
	if c.registered.Load() { // RegisterNode false: no registration step queues the pods
		c.queueAllPods()
	}
	return nil
}

// remove forgets a stopped controller.
func (s *Queue) remove(c *Controller) {
	s.mu.Lock()
	delete(s.controllers, c)
	s.mu.Unlock()
	s.router.remove(c)
	for step := range numSteps {
		s.queue(step).Forget(stepKey{c, step})
	}
}

// add queues c's step now.
func (s *Queue) add(c *Controller, step Step) { s.queue(step).Add(stepKey{c, step}) }

// Run starts the workers and a liveness probe and blocks until ctx ends; then it stops every
// controller, shuts the queues down and returns once the workers have returned (a step still
// running after its context ended is waited for). It returns nil, or an error if called twice.
func (s *Queue) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("node: Queue.Run called twice")
	}
	s.running = true
	s.mu.Unlock()
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Starting node step queue", "workers", s.cfg.Workers, "leaseWorkers", s.cfg.LeaseWorkers, "podWorkers", s.cfg.PodWorkers)

	var wg sync.WaitGroup
	for i, n := range []int{s.cfg.LeaseWorkers, s.cfg.Workers} {
		q := s.queues[i]
		p := pool(i) // queues[0] is poolLease, queues[1] poolSteps
		for range n {
			wg.Go(func() {
				for processNext(ctx, s, q, p, s.runStep, s.woke) {
				}
			})
		}
		q.Add(stepKey{c: nil, step: Step(i)}) // the pool's liveness probe
	}
	s.pods.Add(podKey{}) // the pod pool's liveness probe
	for range s.cfg.PodWorkers {
		wg.Go(func() {
			for processNext(ctx, s, s.pods, poolPods, s.runPod, nil) {
			}
		})
	}
	<-ctx.Done()
	controllers := s.snapshot()
	for _, c := range controllers {
		c.Stop()
	}
	for _, q := range s.queues {
		q.ShutDown()
	}
	s.pods.ShutDown()
	wg.Wait()
	for _, c := range controllers {
		<-c.Done()
	}
	return nil
}

// processNext is one turn of a worker of pool p: it takes one item from q and runs it (run), then
// does what its result says: again after its delay (Forget: a success resets the backoff), never
// again until queued (r.after < 0), or after the queue's backoff (AddRateLimited) on an error; an
// item run reports not live (its Node stopped) is forgotten. woke, if set, is then told of the
// item's result (the steps it wakes). The item with a nil Controller is the pool's liveness probe,
// queued again every livenessPeriod. It returns false once q is shut down. Each pool (Lease, Node
// steps, pods) runs this one loop over its own queue and item type.
func processNext[K interface {
	comparable
	controller() *Controller
}](ctx context.Context, s *Queue, q workqueue.TypedRateLimitingInterface[K], p pool,
	run func(context.Context, K) (r result, live bool), woke func(K, result)) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	defer s.alive.served(p)
	if key.controller() == nil { // the liveness probe
		if ctx.Err() == nil {
			q.AddAfter(key, livenessPeriod)
		}
		return true
	}
	r, live := run(ctx, key)
	switch {
	case !live:
		q.Forget(key)
		return true
	case r.err != nil:
		q.AddRateLimited(key)
	case r.after >= 0:
		q.Forget(key)
		q.AddAfter(key, coalesce(s.cfg.Clock.Now(), r.after, s.cfg.Coalesce))
	default:
		q.Forget(key)
	}
	if woke != nil {
		woke(key, r)
	}
	return true
}

func (k stepKey) controller() *Controller { return k.c }
func (k podKey) controller() *Controller  { return k.c }

// runStep runs one popped step of one controller: live false when the controller has stopped
// (before or during the run).
func (s *Queue) runStep(ctx context.Context, key stepKey) (r result, live bool) {
	c, step := key.c, key.step
	stepCtx, ok := c.begin(ctx, step, s.cfg.StepTimeout)
	if !ok {
		return result{}, false
	}
	r = c.runStep(stepCtx, step)
	return r, !c.end(step)
}

// woke queues now the steps a step's result wakes.
func (s *Queue) woke(key stepKey, r result) {
	for w := range numSteps {
		if r.wake.has(w) {
			s.add(key.c, w)
		}
	}
}

// coalesce returns after, the delay from now of a step's next run, moved down so that the run
// falls on a multiple of grid in the clock's time; after unchanged when grid is 0 or after is
// shorter than two grid intervals (a backoff, a fast update tick). The result is in (after − grid,
// after].
func coalesce(now time.Time, after, grid time.Duration) time.Duration {
	if grid <= 0 || after < 2*grid {
		return after
	}
	return now.Add(after).Truncate(grid).Sub(now)
}

// runPod runs one popped pod item of one Node's pod workers: live false when the Node has stopped
// (before or during the run), or runs no pods.
func (s *Queue) runPod(ctx context.Context, key podKey) (r result, live bool) {
	stepCtx, cancel, ok := key.c.beginPod(ctx, key.key, s.cfg.StepTimeout)
	if !ok {
		return result{}, false
	}
	r = key.c.pods.podStep(stepCtx, key.key)
	cancel()
	if key.c.endPod() {
		return r, false
	}
	if r.err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("Pod step failed; retrying", "node", key.c.cfg.NodeName, "pod", key.key, "err", r.err)
	}
	return r, true
}

// PodEventHandler returns the handler of the process's pod informer: each pod added, changed or
// deleted is routed to the running Controller of its Node (spec.nodeName), if that Node runs pods
// (podRouter).
func (s *Queue) PodEventHandler() cache.ResourceEventHandler { return s.router.handler() }

// Alive reports whether the queue's workers are serving their queues: nil while a worker of each
// pool (Lease, Node steps, pods) finished an item within the last bound (3 liveness periods plus a
// step timeout: a worker may be in one step for that long). It says nothing of the API server or the
// runtime: a step that fails, or waits in backoff, has been served. It is the systemd watchdog's and
// /healthz syncloop's test, as the kubelet's syncloop check tests its own loop.
func (s *Queue) Alive() error { return s.alive.check() }

// recovered runs when the process's heartbeats succeed again after an outage: every Node reads its
// Node from the API server for a while and re-syncs its status at once and twice more (see
// Controller.recover), as the lifecycle controller may have marked any of them Unknown meanwhile.
func (s *Queue) recovered() {
	for _, c := range s.snapshot() {
		c.recover()
	}
}

// snapshot returns the controllers the queue runs now, to call outside its lock.
func (s *Queue) snapshot() []*Controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.controllers))
}
