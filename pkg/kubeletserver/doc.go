// Package kubeletserver is the kubelet's API for one Node: the kubelet's pkg/kubelet/server
// (server.go, auth.go) for the paths a Node without a CRI streaming server can answer, over
// Kubernetes' own packages and nothing of nodeagent's own:
//
//	GET  /healthz                                              healthz.InstallHandler (ping, log, syncloop)
//	GET  /pods                                                 the pods bound to the Node, a v1 PodList
//	GET  /containerLogs/{namespace}/{pod}/{container}           v1.PodLogOptions as query parameters
//	GET|POST /exec/{namespace}/{pod}[/{uid}]/{container}        cri-streaming's remotecommand.ServeExec
//	GET|POST /attach/{namespace}/{pod}[/{uid}]/{container}      remotecommand.ServeAttach
//	GET|POST /portForward/{namespace}/{pod}[/{uid}]             portforward.ServePortForward
//	POST /run/{namespace}/{pod}[/{uid}]/{container}?cmd=...     the command's output
//	GET|POST /stats/summary                                    the kubelet's stats/v1alpha1 Summary (Config.Stats)
//	GET  /metrics/resource                                     the kubelet's resource metrics (Config.Stats)
//	GET  /metrics/cadvisor                                     cadvisor's collectors (Config.CadvisorCollectors; none: 501)
//	GET  /metrics/probes                                       the prober's counts (Config.Probes)
//
// A path whose source is not configured answers 501 Not Implemented; any other path 404.
//
// Every request is authenticated and authorized as the kubelet's InstallAuthFilter does it: an
// authenticator.Request and an authorizer.Authorizer that BuildAuth makes from the kubelet's
// authentication and authorization configuration (k8s.io/apiserver's delegating authenticator and
// authorizer: x509 client certificates, TokenReview, SubjectAccessReview), and the kubelet's
// mapping of a path to the nodes subresources (nodes/proxy, nodes/log, nodes/stats,
// nodes/metrics, nodes/healthz, nodes/pods; fine-grained, as locked on since 1.36).
//
// What a Node's containers say comes from a provider implementing any of the optional interfaces
// named as Virtual Kubelet's node/api names them (ContainerLogsGetter.GetContainerLogs,
// ContainerRunner.RunInContainer, ContainerAttacher.AttachToContainer, PortForwarder.PortForward);
// a path whose interface the provider lacks answers 501 Not Implemented.
//
//	auth, err := kubeletserver.BuildAuth(client, authn, authz) // once per process
//	srv, err := kubeletserver.New(kubeletserver.Config{NodeName: "n1", Pods: lister, Provider: p, Auth: auth})
//	ln, err := kubeletserver.Listen("0.0.0.0", 10250)
//	pool, err := kubeletserver.NewConnectionPool(limits) // once per process: DefaultConnectionLimits
//	err = kubeletserver.Serve(ctx, pool.Listener(ln), tlsConfig, srv)
//
// Serve closes a connection that has not finished its TLS handshake or its request's headers within
// ReadHeaderTimeout (10 s; the kubelet has no such deadline), and a ConnectionPool caps the
// connections one Node's listener and all of a process's listeners hold open, so that a flood of
// one Node's port is that Node's alone (ConnectionLimits).
package kubeletserver
