// Command cloud-node-controller runs k8s.io/cloud-provider's cloud node controller (controllers/node,
// which initialises Nodes tainted node.cloudprovider.kubernetes.io/uninitialized and keeps their addresses)
// and cloud node lifecycle controller (controllers/nodelifecycle) over the library's fake cloud, wired
// as cloud-controller-manager wires them (cloud-provider/app/core.go): one client, one shared informer
// factory, each controller's Run in a goroutine. It is the external cloud provider of nodeagent's tests.
//
// The fake cloud describes every Node the same way: providerID fake://<node name>, --instance-type,
// --zone, --region, the addresses --external-ip and an InternalIP, which is the one the Node asked for
// (its alpha.kubernetes.io/provided-node-ip annotation, set by a kubelet run with --node-ip) or else the
// InternalIP addresses it reports. Every instance exists and none is shut down, so the lifecycle controller
// never deletes or taints a Node.
//
//	cloud-node-controller --kubeconfig=admin.kubeconfig --node-status-update-frequency=5s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	nodelifecyclecontroller "k8s.io/cloud-provider/controllers/nodelifecycle"
	"k8s.io/cloud-provider/fake"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/klog/v2"
)

// options are the command's flags.
type options struct {
	kubeconfig string
	// instanceType, zone and region describe every instance; externalIP is every instance's ExternalIP.
	instanceType, zone, region string
	externalIP                 string
	// nodeStatusUpdateFrequency is the node controller's address reconcile period (cloud-controller-
	// manager's --node-status-update-frequency, default 5m); nodeMonitorPeriod the lifecycle
	// controller's (--node-monitor-period, default 5s).
	nodeStatusUpdateFrequency, nodeMonitorPeriod time.Duration
	// concurrentNodeSyncs and concurrentNodeStatusUpdates are the node controller's worker counts,
	// concurrentNodeLifecycleSyncs the lifecycle controller's (cloud-provider v0.37 and later).
	concurrentNodeSyncs, concurrentNodeStatusUpdates, concurrentNodeLifecycleSyncs int
	// healthzPort, if not 0, serves GET /healthz on 127.0.0.1: 200 once the Node informer has synced.
	healthzPort int
}

func main() {
	klog.InitFlags(nil)
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig of an identity that may update Nodes and their status (required).")
	flag.StringVar(&o.instanceType, "instance-type", "fake.medium", "Instance type of every instance (label node.kubernetes.io/instance-type).")
	flag.StringVar(&o.zone, "zone", "fake-zone-a", "Zone of every instance (label topology.kubernetes.io/zone).")
	flag.StringVar(&o.region, "region", "fake-region-1", "Region of every instance (label topology.kubernetes.io/region).")
	flag.StringVar(&o.externalIP, "external-ip", "203.0.113.10", "ExternalIP address of every instance.")
	flag.DurationVar(&o.nodeStatusUpdateFrequency, "node-status-update-frequency", 5*time.Minute, "How often the node controller reconciles the addresses of initialised Nodes.")
	flag.DurationVar(&o.nodeMonitorPeriod, "node-monitor-period", 5*time.Second, "How often the node lifecycle controller checks NotReady Nodes against the cloud.")
	flag.IntVar(&o.concurrentNodeSyncs, "concurrent-node-syncs", 1, "Workers initialising Nodes.")
	flag.IntVar(&o.concurrentNodeStatusUpdates, "concurrent-node-status-updates", 1, "Workers reconciling Node addresses.")
	flag.IntVar(&o.concurrentNodeLifecycleSyncs, "concurrent-node-lifecycle-syncs", 1, "Workers of the node lifecycle controller (ignored with k8s.io/cloud-provider before v0.37, which has one).")
	flag.IntVar(&o.healthzPort, "healthz-port", 0, "Port of GET /healthz on 127.0.0.1 (200 once the Node informer has synced); 0 disables it.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "cloud-node-controller: %v\n", err)
		os.Exit(1)
	}
}

// run starts both controllers and blocks until ctx ends.
func run(ctx context.Context, o options) error {
	if o.kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	extIP := net.ParseIP(o.externalIP)
	if o.externalIP != "" && extIP == nil {
		return fmt.Errorf("--external-ip %q: not an IP address", o.externalIP)
	}
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", o.kubeconfig, err)
	}
	// cloud-controller-manager gives each controller a client named after it (ClientBuilder.ClientOrDie).
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(config, "cloud-node-controller"))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}

	cloud := &fake.Cloud{
		EnableInstancesV2:  true,
		ExistsByProviderID: true,
		Zone:               cloudprovider.Zone{FailureDomain: o.zone, Region: o.region},
		OverrideInstanceMetadata: func(_ context.Context, node *v1.Node) (*cloudprovider.InstanceMetadata, error) {
			return instanceMetadata(node, o.instanceType, o.zone, o.region, extIP), nil
		},
	}

	// As cloud-controller-manager: one shared informer factory for both controllers (its resync period is
	// 12-24 h; none is needed here), started after the controllers have registered their informers.
	factory := informers.NewSharedInformerFactory(client, 0)
	nodeInformer := factory.Core().V1().Nodes()
	cnc, err := nodecontroller.NewCloudNodeController(nodeInformer, client, cloud,
		o.nodeStatusUpdateFrequency, int32(o.concurrentNodeSyncs), int32(o.concurrentNodeStatusUpdates))
	if err != nil {
		return fmt.Errorf("cloud node controller: %w", err)
	}
	cnlc, err := newCloudNodeLifecycleController(nodeInformer, client, cloud, o.nodeMonitorPeriod, o.concurrentNodeLifecycleSyncs)
	if err != nil {
		return fmt.Errorf("cloud node lifecycle controller: %w", err)
	}
	metrics := controllersmetrics.NewControllerManagerMetrics("cloud-controller-manager")

	if o.healthzPort != 0 {
		if err := serveHealthz(ctx, o.healthzPort, nodeInformer.Informer().HasSynced); err != nil {
			return err
		}
	}

	klog.InfoS("Starting cloud node controllers", "instanceType", o.instanceType, "zone", o.zone, "region", o.region,
		"externalIP", o.externalIP, "nodeStatusUpdateFrequency", o.nodeStatusUpdateFrequency, "nodeMonitorPeriod", o.nodeMonitorPeriod)
	done := make(chan struct{}, 2)
	go func() { cnc.RunWithContext(ctx, metrics); done <- struct{}{} }()
	go func() { cnlc.Run(ctx, metrics); done <- struct{}{} }()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.Informer().HasSynced) {
		return ctx.Err()
	}
	klog.InfoS("Node informer synced")

	<-ctx.Done()
	<-done
	<-done
	factory.Shutdown()
	klog.InfoS("Stopped")
	return nil
}

// newCloudNodeLifecycleController calls nodelifecycle.NewCloudNodeLifecycleController, whose signature
// changed in k8s.io/cloud-provider v0.37 (a worker count was added), so that this command builds against
// v0.36 and v0.37 alike: only the case matching the module's version is taken.
func newCloudNodeLifecycleController(nodeInformer coreinformers.NodeInformer, client kubernetes.Interface,
	cloud cloudprovider.Interface, monitorPeriod time.Duration, workers int) (*nodelifecyclecontroller.CloudNodeLifecycleController, error) {
	type ctor036 = func(coreinformers.NodeInformer, kubernetes.Interface, cloudprovider.Interface, time.Duration) (*nodelifecyclecontroller.CloudNodeLifecycleController, error)
	type ctor037 = func(coreinformers.NodeInformer, kubernetes.Interface, cloudprovider.Interface, time.Duration, int) (*nodelifecyclecontroller.CloudNodeLifecycleController, error)
	switch newController := any(nodelifecyclecontroller.NewCloudNodeLifecycleController).(type) {
	case ctor036:
		return newController(nodeInformer, client, cloud, monitorPeriod)
	case ctor037:
		return newController(nodeInformer, client, cloud, monitorPeriod, workers)
	default:
		return nil, fmt.Errorf("unknown signature of nodelifecycle.NewCloudNodeLifecycleController: %T", newController)
	}
}

// instanceMetadata is the fake cloud's description of node's instance.
func instanceMetadata(node *v1.Node, instanceType, zone, region string, externalIP net.IP) *cloudprovider.InstanceMetadata {
	var addrs []v1.NodeAddress
	for _, ip := range internalIPs(node) {
		addrs = append(addrs, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	if externalIP != nil {
		addrs = append(addrs, v1.NodeAddress{Type: v1.NodeExternalIP, Address: externalIP.String()})
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:    "fake://" + node.Name,
		InstanceType:  instanceType,
		NodeAddresses: addrs,
		Zone:          zone,
		Region:        region,
	}
}

// internalIPs are the IPs the instance has on the cluster network, as a real cloud would know them: those
// of the provided-node-ip annotation if set (the cloud node controller refuses to initialise a Node whose
// annotation names an IP the cloud does not report), else the Node's own InternalIP addresses.
func internalIPs(node *v1.Node) []string {
	if a := node.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]; a != "" {
		return strings.Split(a, ",")
	}
	var ips []string
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	return ips
}

// serveHealthz serves GET /healthz on 127.0.0.1:port until ctx ends: 200 "ok" once synced() is true.
func serveHealthz(ctx context.Context, port int, synced func() bool) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("--healthz-port %d: %w", port, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced() {
			http.Error(w, "node informer not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
