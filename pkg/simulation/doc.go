// Package simulation runs many simulated Nodes in one process, each on the very code path a single
// nodeagent runs: one node.Controller per Node (registration, the kubelet's setter list, the status
// syncer, the fast start-up update, the Lease renewer and the CRI runtime-health poller), composed
// from dependencies built once for all (one client pair, one Node informer selecting LabelSimulated,
// the simulation and the shard,
// one cache tracker, one event recorder, one clock). Only what is behind the setters differs: a host
// made from a Template (capacity, node info, extra conditions) and, per Node, its own CRI fakes from
// k8s.io/cri-api/pkg/apis/testing, whose answers the control API (Handler) flips: runtime or network
// not ready, memory, disk or PID pressure, or the Node stopped altogether (as a dead machine) and
// started again. The package has no loop of its own besides the paced start: a test checks that it
// does not import the packages of the loops (statussync, lease, registration) but only pkg/node.
//
//	sim, err := simulation.New(simulation.Config{
//		Nodes: 1000, NamePrefix: "sim-", Template: t,
//		Node:         node.Config{NodeStatusUpdateFrequency: 10 * time.Second, ...},
//		Dependencies: node.Dependencies{Client: c, HeartbeatClient: hb, NodeLister: l, Cache: tr, Recorder: r},
//	})
//	go sim.Run(ctx)
//	http.Handle(simulation.Path, server.LoopbackOnly(sim.Handler()))
//
// A simulation can be split into shards (Shard), one process each, e.g. the pods of a StatefulSet:
// shard I of K with N Nodes each runs the global indexes [I*N, (I+1)*N), names stay global and do
// not depend on K (NodeName), every Node carries LabelSimulation (SimulationID of the prefix) and
// LabelShard=I and the shard's informer selects on both (Shard.Selector). Before writing,
// NewProcess checks the Node the template yields as the API server and etcd will (CheckNodeObject),
// and Process.Preflight checks ownership (CheckOwnership), that no other live process renews the
// shard's Leases (CheckNoOtherInstance), and that every shard runs the same Nodes per shard (AgreeLayout,
// a Lease per simulation); at run time a shard stops writing a Node another shard owns
// (StopForeignNodes). ControlHandler admits the control API through the API server's pod proxy;
// Process.DeleteNodes removes the shard's Nodes on a clean exit.
//
// Pods bound to simulated Nodes run as a kubelet runs them, on the pod workers of pkg/node (each
// Node's Config.Pods; admission, the pod lifecycle SyncPod → TerminatingPod → TerminatedPod, the
// status writes, the eviction manager): what this package adds is the container runtime behind them,
// simulated (Simulate: a pure function of the pod, its start, its behaviour and the time; PodBehaviour
// reads the nodeagent.io/ annotations; probes.go the probe annotations), which records the kubelet's
// container Events (podevents.go), and the control API's per-pod overrides (SetPodContainer). The
// process's pod informer is routed to the Nodes by Queue.PodEventHandler. A template's devices give every
// Node simulated DRA drivers: slices.go publishes their ResourceSlices, dra.go prepares the pods' claims
// through pkg/dra (the kubelet's DRA manager) with the CDI env and device health. docs/simulation.md ("Pods")
// lists every annotation and every intended difference from the kubelet.
package simulation
