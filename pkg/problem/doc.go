// Package problem runs node-problem-detector's problem monitors inside nodeagent, from NPD's own
// config files: custom plugin monitors (package custompluginmonitor, NPD's
// --config.custom-plugin-monitor) and system log monitors (package systemlogmonitor, NPD's
// --config.system-log-monitor). A Manager loads and validates every config, runs the monitors, keeps
// their NodeConditions, records their Events and updates NPD's problem metrics under the nodeagent_
// prefix.
//
// Its conditions reach the Node one of two ways. Standalone, the agent owns the Node: add Setters()
// after the kubelet's setters and let OnChange trigger the status syncer. As a companion of a
// kubelet, the agent must write nothing else: give Conditions to a companion.Patcher
// (pkg/companion), and let OnChange trigger it.
//
//	m, err := problem.New(problem.Config{
//		CustomPluginMonitors: []string{"/etc/nodeagent/npd/custom-plugin-monitor.json"},
//		SystemLogMonitors:    []string{"/etc/nodeagent/npd/kernel-monitor.json"},
//		Recorder: func(eventType, reason, message, source string) {
//			recorders.For(source).Event(nodeRef, eventType, reason, message)
//		},
//		Metrics:  registry,
//		OnChange: syncer.Trigger,
//	})
//	if err != nil { return err } // one line per bad file, naming the field and the value
//	setters = append(setters, m.Setters()...)
//	go m.Run(ctx)
package problem
