// Package companion is what nodeagent writes when it runs beside a kubelet (--companion), as
// node-problem-detector does: the kubelet owns the Node, nodeagent only adds conditions of its own
// and events. A Patcher sends those conditions to nodes/status with a strategic merge patch on
// status.conditions (merge key type) that carries only them, when one changes and once per
// heartbeat period (NPD's --k8s-exporter-heartbeat-period); the kubelet's conditions, addresses,
// capacity and everything else are never in the patch. RuntimeHealth turns the container runtime's
// health into NPD's ContainerRuntimeUnhealthy condition, which the kubelet does not report.
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
