// Package pod is the pure core of the kubelet's pod lifecycle for Nodes nodeagent runs pods on
// (simulated Nodes, library Nodes with a pod provider): no API client, no goroutines, time passed in.
//
//   - Admit: the kubelet's predicate admission (OS, resources and pods count, node affinity, node name,
//     host ports, NoExecute taints) with its reasons and messages; RejectedStatus is what it writes.
//   - GenerateStatus: the status the kubelet would write, from the pod (the informer's copy) and a
//     RuntimeStatus (the runtime's and prober's view); StatusPatch turns it into the status manager's
//     strategic-merge patch with the UID precondition, nil when nothing changed.
//   - IPAllocator: pod IPs from a Node's spec.podCIDRs as CNI host-local hands them out.
//   - Simulate: the simulated runtime's RuntimeStatus at a time and the next time it changes;
//     PodBehaviour reads the nodeagent.io/ annotations.
//
// A sync of one pod on a simulated Node reads:
//
//	b, err := pod.PodBehaviour(p, defaults)            // err: emit an Event, b has the defaults
//	rt, next := pod.Simulate(p, &b, &pod.SimInput{StartTime: start, RuntimeName: "containerd",
//		PodIPs: ips, HostIPs: hostIPs, Overrides: overrides[p.UID]}, now)
//	status, err := pod.GenerateStatus(p, rt, now)
//	patch, err := pod.StatusPatch(p.UID, &p.Status, &status)
//	if patch != nil { /* Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, opts, "status") */ }
//	if !next.IsZero() { queue.AddAfter(key, next.Sub(now)) }
package pod
