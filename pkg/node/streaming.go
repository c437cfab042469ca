package node

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
)

// The optional interfaces a PodProvider implements to serve its pods' logs, exec, attach and
// port-forward through the kubelet's API (KubeletServer), named as Virtual Kubelet's
// PodLifecycleHandler names them; see pkg/kubeletserver for their contracts. A provider implements
// what it can: a path whose interface it lacks answers 501.
type (
	// ContainerLogsGetter is GetContainerLogs (kubectl logs).
	ContainerLogsGetter = kubeletserver.ContainerLogsGetter
	// ContainerRunner is RunInContainer (kubectl exec); an exec.CodeExitError gives the exit code.
	ContainerRunner = kubeletserver.ContainerRunner
	// ContainerAttacher is AttachToContainer (kubectl attach).
	ContainerAttacher = kubeletserver.ContainerAttacher
	// PortForwarder is PortForward (kubectl port-forward).
	PortForwarder = kubeletserver.PortForwarder
	// ContainerLogOpts, AttachIO and TermSize are Virtual Kubelet's api types of the same names.
	ContainerLogOpts = kubeletserver.ContainerLogOpts
	AttachIO         = kubeletserver.AttachIO
	TermSize         = kubeletserver.TermSize
)

// KubeletServer returns the kubelet's API for this Node (kubeletserver.Server): /healthz with the
// Controller's Healthy as its syncloop check, /pods from Dependencies.Pods, and the container paths
// served by Config.Pods' optional interfaces (ContainerLogsGetter, ContainerRunner,
// ContainerAttacher, PortForwarder), /stats/summary, /metrics/resource and /metrics/cadvisor as
// statsProvider says, and /metrics/probes from Config.Pods' GetProbeCounts (ProbeCountsGetter;
// without it, the kubelet's registry with no prober worker: process_start_time_seconds only). auth
// is the process's one kubeletserver.BuildAuth. Serve it with kubeletserver.Serve on the address and
// port the Node gives in Config.KubeletPort. It errors when the Node has no pod lister
// (Dependencies.Pods) or auth is nil.
func (c *Controller) KubeletServer(auth *kubeletserver.Auth) (*kubeletserver.Server, error) {
	if c.deps.Pods == nil {
		return nil, fmt.Errorf("node %q: the kubelet's API needs Dependencies.Pods (the pod informer's lister)", c.cfg.NodeName)
	}
	if auth == nil {
		return nil, errors.New("node: KubeletServer needs an Auth (kubeletserver.BuildAuth)")
	}
	var provider any
	if c.cfg.Pods != nil {
		provider = c.cfg.Pods
	}
	cfg := kubeletserver.Config{
		NodeName: c.cfg.NodeName, Pods: c.deps.Pods, Auth: auth,
		SyncLoop: func(*http.Request) error { return c.Healthy() },
	}
	// The PodProvider's optional interfaces, one per capability (a nil one answers 501).
	cfg.ContainerLogs, _ = provider.(ContainerLogsGetter)
	cfg.Runner, _ = provider.(ContainerRunner)
	cfg.Attacher, _ = provider.(ContainerAttacher)
	cfg.PortForwarder, _ = provider.(PortForwarder)
	cfg.Probes, _ = provider.(ProbeCountsGetter) // none: the kubelet's registry with no prober worker
	cfg.StatsSummary, cfg.MetricsResource, cfg.CadvisorCollectors = c.statsProvider(provider)
	return kubeletserver.New(cfg)
}
