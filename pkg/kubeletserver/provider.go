package kubeletserver

import (
	"context"
	"io"
	"time"

	v1 "k8s.io/api/core/v1"
)

// PodLister is what the server reads of the pods bound to its Node: pkg/node.IndexedPodLister over
// the process's pod informer implements it. The pods returned are read-only.
type PodLister interface {
	// Get returns a pod by namespace and name, or an error (NotFound when absent).
	Get(namespace, name string) (*v1.Pod, error)
	// OnNode returns the pods whose spec.nodeName is nodeName.
	OnNode(nodeName string) ([]*v1.Pod, error)
}

// ContainerLogOpts are the options of a container log request, Virtual Kubelet's
// api.ContainerLogOpts: the v1.PodLogOptions the API server's pods/log sends, decoded and
// validated as the kubelet's getContainerLogs decodes them. Zero means unset: Tail 0 is all lines
// unless TailSet, LimitBytes 0 no limit, SinceSeconds 0 and a zero SinceTime from the start.
type ContainerLogOpts struct {
	// Tail is tailLines: the last Tail lines only (TailSet says it was given; tailLines=0 asks for
	// none).
	Tail    int
	TailSet bool
	// LimitBytes is limitBytes: stop after that many bytes.
	LimitBytes int
	// Timestamps is timestamps: each line begins with its RFC3339Nano time and a space.
	Timestamps bool
	// Follow is follow: keep the stream open and send new lines until the request ends.
	Follow bool
	// Previous is previous: the log of the container's last terminated run.
	Previous bool
	// SinceSeconds and SinceTime are sinceSeconds and sinceTime: only lines written at or after.
	SinceSeconds int
	SinceTime    time.Time
}

// TermSize is a terminal's size (Virtual Kubelet's api.TermSize; cri-streaming's TerminalSize).
type TermSize struct {
	Width, Height uint16
}

// AttachIO is the streams of an exec or attach session, Virtual Kubelet's api.AttachIO. Stdin,
// Stdout and Stderr are nil when the client did not ask for them; Resize is closed when the
// session ends.
type AttachIO interface {
	Stdin() io.Reader
	Stdout() io.WriteCloser
	Stderr() io.WriteCloser
	TTY() bool
	Resize() <-chan TermSize
}

// ContainerLogsGetter serves /containerLogs (kubectl logs): Virtual Kubelet's
// PodLifecycleHandler.GetContainerLogs. It returns the log as the options ask (the provider applies
// Tail, LimitBytes, Since*, Timestamps, Previous; with Follow the reader blocks for new lines until
// ctx ends); an error answers 400 with its text, as the kubelet's GetKubeletContainerLogs error.
type ContainerLogsGetter interface {
	GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts ContainerLogOpts) (io.ReadCloser, error)
}

// ContainerRunner serves /exec and /run (kubectl exec): Virtual Kubelet's RunInContainer. It
// returns when the command has ended; a k8s.io/utils/exec.ExitError (exec.CodeExitError) gives the
// client the command's exit code, any other error ends the session with that message.
type ContainerRunner interface {
	RunInContainer(ctx context.Context, namespace, podName, containerName string, cmd []string, attach AttachIO) error
}

// ContainerAttacher serves /attach (kubectl attach): Virtual Kubelet's AttachToContainer. It
// returns when the session ends (ctx ends when the client goes).
type ContainerAttacher interface {
	AttachToContainer(ctx context.Context, namespace, podName, containerName string, attach AttachIO) error
}

// PortForwarder serves /portForward (kubectl port-forward): Virtual Kubelet's PortForward. It
// copies between stream and the pod's port until either ends, and closes stream.
type PortForwarder interface {
	PortForward(ctx context.Context, namespace, podName string, port int32, stream io.ReadWriteCloser) error
}
