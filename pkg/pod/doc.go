// Package pod is the pure core of the kubelet's pod lifecycle for Nodes nodeagent runs pods on
// (simulated Nodes, library Nodes with a pod provider): no API client, no goroutines, time passed in.
//
//   - Admit: the kubelet's predicate admission (OS, resources and pods count, node affinity, node name,
//     host ports, NoExecute taints) with its reasons and messages; RejectedStatus is what it writes.
//   - GenerateStatus: the status the kubelet would write, from the pod (the informer's copy) and a
//     RuntimeStatus (the runtime's and prober's view); StatusPatch turns it into the status manager's
//     strategic-merge patch with the UID precondition, nil when nothing changed.
//   - IPAllocator: pod IPs from a Node's spec.podCIDRs as CNI host-local hands them out.
//
// The runtime's view comes from elsewhere: a library's PodProvider, or the simulated runtime
// (pkg/simulation: Simulate, PodBehaviour). A sync of one pod on a simulated Node reads:
//
//	b, err := simulation.PodBehaviour(p, defaults)     // err: emit an Event, b has the defaults
//	rt, next := simulation.Simulate(p, &b, &simulation.SimInput{StartTime: start, RuntimeName: "containerd",
//		PodIPs: ips, HostIPs: hostIPs, Overrides: overrides[p.UID]}, now)
//	status, err := pod.GenerateStatus(p, rt, now)
//	patch, err := pod.StatusPatch(p.UID, &p.Status, &status)
//	if patch != nil { /* Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, opts, "status") */ }
//	if !next.IsZero() { queue.AddAfter(key, next.Sub(now)) }
package pod
