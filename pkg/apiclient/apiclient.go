// Package apiclient builds what every mode of nodeagent needs to talk to the API server, in one
// place: the main client (protobuf, rate-limited: registration, the informer), the heartbeat client
// (no client-side rate limit and a short timeout: status patches and Leases, as the kubelet's
// heartbeat client), optionally an events client with a rate limit of its own, one rotating dialer
// under all of them (closing its connections also resets the informer's watch: the kubelet's
// closeAllConns), the Node informer (by name for one agent, by label for the simulation) with the
// nodecache tracker fed by it, and the event broadcaster.
package apiclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/nodecache"
)

// Config configures New.
type Config struct {
	// REST is the API server and credentials; required. It is copied, not changed.
	REST *rest.Config
	// CloseAllConns, if set, closes the connections of REST's own dialer (the certificate manager
	// rotates its connections): no rotating dialer is added. Otherwise New adds one.
	CloseAllConns func()
	// UserAgent is every client's user agent.
	UserAgent string
	// QPS and Burst limit the main client (--kube-api-qps, --kube-api-burst).
	QPS   float32
	Burst int
	// HeartbeatTimeout is the heartbeat client's request timeout: min(status frequency, lease duration).
	HeartbeatTimeout time.Duration
	// EventQPS and EventBurst, if positive, give Events a client of their own with this limit (as the
	// kubelet's --event-qps); otherwise Events go through the main client.
	EventQPS   float32
	EventBurst int
	// PodQPS and PodBurst, if positive, give pod writes (status patches, deletions) a client of their
	// own with this limit (`nodeagent simulate --pod-api-qps`), so that a pod storm never queues behind
	// registration nor registration behind it; otherwise pods go through the main client.
	PodQPS   float32
	PodBurst int
	// NodeName makes the Node informer watch that Node only; NodeLabelSelector, if NodeName is empty,
	// the Nodes with these labels. One of them is required.
	NodeName, NodeLabelSelector string
	// Clock is the tracker's; default the real clock.
	Clock clock.PassiveClock
}

// Set is the clients, the Node informer and the event broadcaster of one process.
type Set struct {
	Client, Heartbeat, Events kubernetes.Interface
	// Pods writes pod status and deletes pods: a client of its own with Config.PodQPS, or Client.
	Pods kubernetes.Interface
	// PodMetadata patches pod status and reads the answer as the pod's metadata only (client-go's
	// metadata client: PartialObjectMetadata, not the whole pod decoded), on the rate limit of Pods.
	PodMetadata metadata.Interface
	// CloseAllConns closes every API connection (and so resets the watch).
	CloseAllConns func()
	// Informers has the Node informer (Core().V1().Nodes()), its objects without managedFields;
	// NodeCache hears its events and watch errors.
	Informers   informers.SharedInformerFactory
	NodeCache   *nodecache.Tracker
	Broadcaster record.EventBroadcaster
}

// New builds the Set. It makes no API call. Errors say which client could not be built.
func New(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.REST == nil {
		return nil, errors.New("apiclient: Config.REST is required")
	}
	if cfg.NodeName == "" && cfg.NodeLabelSelector == "" {
		return nil, errors.New("apiclient: Config.NodeName or NodeLabelSelector is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	restConfig := rest.CopyConfig(cfg.REST)
	s := &Set{CloseAllConns: cfg.CloseAllConns}
	if s.CloseAllConns == nil {
		// One rotating dialer serves every client, so closing its connections after repeated
		// heartbeat failures also resets the watch.
		dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
		s.CloseAllConns = dialer.CloseAll
		restConfig.Dial = dialer.DialContext
	}
	restConfig.ContentType = "application/vnd.kubernetes.protobuf"
	restConfig.UserAgent = cfg.UserAgent
	restConfig.QPS, restConfig.Burst = cfg.QPS, cfg.Burst
	var err error
	if s.Client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, fmt.Errorf("building client: %w", err)
	}
	heartbeatConfig := rest.CopyConfig(restConfig)
	heartbeatConfig.QPS = -1
	heartbeatConfig.Timeout = cfg.HeartbeatTimeout
	if s.Heartbeat, err = kubernetes.NewForConfig(heartbeatConfig); err != nil {
		return nil, fmt.Errorf("building heartbeat client: %w", err)
	}
	s.Events = s.Client
	if cfg.EventQPS > 0 && cfg.EventBurst > 0 {
		eventConfig := rest.CopyConfig(restConfig)
		eventConfig.QPS, eventConfig.Burst = cfg.EventQPS, cfg.EventBurst
		if s.Events, err = kubernetes.NewForConfig(eventConfig); err != nil {
			return nil, fmt.Errorf("building events client: %w", err)
		}
	}
	s.Pods = s.Client
	podConfig := restConfig
	if cfg.PodQPS > 0 && cfg.PodBurst > 0 {
		podConfig = rest.CopyConfig(restConfig)
		podConfig.QPS, podConfig.Burst = cfg.PodQPS, cfg.PodBurst
		// One limiter for the pod writes of both clients (typed and metadata).
		podConfig.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.PodQPS, cfg.PodBurst)
		if s.Pods, err = kubernetes.NewForConfig(podConfig); err != nil {
			return nil, fmt.Errorf("building pods client: %w", err)
		}
	} else {
		podConfig = rest.CopyConfig(restConfig)
		podConfig.RateLimiter = s.Client.CoreV1().RESTClient().GetRateLimiter() // the main client's
	}
	if s.PodMetadata, err = metadata.NewForConfig(podConfig); err != nil {
		return nil, fmt.Errorf("building pods metadata client: %w", err)
	}

	s.NodeCache = nodecache.New(cfg.Clock)
	s.Informers = informers.NewSharedInformerFactoryWithOptions(s.Client, 0,
		informers.WithTransform(nodecache.TrimNode),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			if cfg.NodeName != "" {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
			} else {
				o.LabelSelector = cfg.NodeLabelSelector
			}
		}))
	nodeInformer := s.Informers.Core().V1().Nodes().Informer()
	if _, err := nodeInformer.AddEventHandler(s.NodeCache.EventHandler()); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	if err := nodeInformer.SetWatchErrorHandlerWithContext(s.NodeCache.WatchErrorHandler()); err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	s.Broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	return s, nil
}
