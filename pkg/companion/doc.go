// Package companion is what nodeagent writes when it runs beside a kubelet (--companion), as
// node-problem-detector does: the kubelet owns the Node, nodeagent only adds conditions of its own
// and events. A Patcher sends those conditions to nodes/status with a strategic merge patch on
// status.conditions (merge key type) that carries only them, when one changes and once per
// heartbeat period (NPD's --k8s-exporter-heartbeat-period); the kubelet's conditions, addresses,
// capacity and everything else are never in the patch. RuntimeHealth turns the container runtime's
// health into NPD's ContainerRuntimeUnhealthy condition, which the kubelet does not report. Mode
// composes them with a CRI poller: it is what `nodeagent --companion` runs (internal/app only wires
// it). The Patcher records the condition types it writes in the Node's nodeagent.io/owned-conditions
// annotation and removes, after a restart, those no longer configured that no other writer owns.
//
//	rh, _ := companion.NewRuntimeHealth(companion.RuntimeHealthConfig{Errors: lastCRIStatusError})
//	p, err := companion.New(companion.Config{
//		Client:     client,
//		NodeName:   nodeName,
//		Conditions: companion.JoinConditions(problems.Conditions, rh.Conditions),
//	})
//	if err != nil { return err }
//	problemsConfig.OnChange = p.Trigger
//	go p.Run(ctx)
package companion
