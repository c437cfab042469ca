// Package kubeletserver is the kubelet's API for one Node: the kubelet's pkg/kubelet/server
// (server.go, auth.go) for the paths a Node without a CRI streaming server can answer, over
// Kubernetes' own packages and nothing of nodeagent's own. Its routes are one table in code
// (routes.go: webServices), as the kubelet's WebServices list them, each root with the nodes
// subresources its requests are authorized against:
//
//	GET  /healthz[/{check}]                                     healthz.InstallHandler (ping, log, syncloop)   healthz, proxy
//	GET  /pods                                                  the pods bound to the Node, a v1 PodList         pods, proxy
//	GET|POST /stats/summary                                     the kubelet's stats/v1alpha1 Summary             stats
//	GET  /metrics/resource                                      the kubelet's resource metrics                   metrics
//	GET  /metrics/cadvisor                                      cadvisor's collectors (none: 501)                metrics
//	GET  /metrics/probes                                        the prober's counts (Config.Probes)              metrics
//	POST /run/{namespace}/{pod}[/{uid}]/{container}?cmd=...     the command's output                             proxy
//	GET|POST /exec/{namespace}/{pod}[/{uid}]/{container}        cri-streaming's remotecommand.ServeExec          proxy
//	GET|POST /attach/{namespace}/{pod}[/{uid}]/{container}      remotecommand.ServeAttach                        proxy
//	GET|POST /portForward/{namespace}/{pod}[/{uid}]             portforward.ServePortForward                     proxy
//	GET  /containerLogs/{namespace}/{pod}/{container}           v1.PodLogOptions as query parameters             proxy
//
// The kubelet's other roots (/allocatedPods and /runningpods/: pods, proxy; /logs/: log;
// /checkpoint/: checkpoint; /configz: configz, proxy; /statusz: statusz; /flagz: configz; the bare
// /metrics: metrics) are authorized as the kubelet authorizes them and answer 404, as does a path
// under no root (nodes/proxy). A path that a route matches for other methods only answers 405 with
// Allow, as go-restful does; unlike the kubelet, whose /healthz and /metrics/* handlers take any
// method, those answer GET only. A path whose source is not configured answers 501 Not Implemented.
//
// Every request is authenticated and authorized as the kubelet's InstallAuthFilter does it: an
// authenticator.Request and an authorizer.Authorizer that BuildAuth makes from the kubelet's
// authentication and authorization configuration (k8s.io/apiserver's delegating authenticator and
// authorizer: x509 client certificates, TokenReview, SubjectAccessReview), and the kubelet's
// mapping of a path to the nodes subresources (nodes/proxy, nodes/log, nodes/stats,
// nodes/metrics, nodes/healthz, nodes/pods; fine-grained, as locked on since 1.36).
//
// What a Node's containers say comes from Config's typed capabilities, one optional interface per
// path as Virtual Kubelet's api.PodHandlerConfig has one handler per path (ContainerLogsGetter,
// ContainerRunner, ContainerAttacher, PortForwarder; resourcemetrics.StatsSummaryGetter and
// MetricsResourceGetter); a path whose capability is nil answers 501 Not Implemented. The defaults
// of the kubelet's authentication and authorization configuration are package authdefaults' (the
// agent's pkg/config takes them from there too). WebSockets are k8s.io/streaming's wsstream.
//
//	auth, err := kubeletserver.BuildAuth(client, authn, authz) // once per process
//	srv, err := kubeletserver.New(kubeletserver.Config{NodeName: "n1", Pods: lister, Auth: auth,
//		ContainerLogs: p, Runner: p, Attacher: p, PortForwarder: p, StatsSummary: p})
//	ln, err := kubeletserver.Listen("0.0.0.0", 10250)
//	pool, err := kubeletserver.NewConnectionPool(limits) // once per process: DefaultConnectionLimits
//	err = kubeletserver.Serve(ctx, pool.Listener(ln), tlsConfig, srv)
//
// Serve closes a connection that has not finished its TLS handshake or its request's headers within
// ReadHeaderTimeout (10 s; the kubelet has no such deadline), and a ConnectionPool caps the
// connections one Node's listener and all of a process's listeners hold open, so that a flood of
// one Node's port is that Node's alone (ConnectionLimits).
package kubeletserver
