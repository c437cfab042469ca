// Package custompluginmonitor is node-problem-detector's custom plugin monitor for nodeagent: it
// reads NPD's custom-plugin-monitor JSON configs (Load) and runs their plugins as NPD's plugin
// runner (k8s.io/node-problem-detector/pkg/custompluginmonitor/plugin) does, with the same results
// (a test compares them): all rules at start, then every invoke_interval, at most concurrency at a
// time, each killed (its whole process group) after its timeout, its stdout read up to 4 KiB,
// trimmed and cut to max_output_length. Exit 0 is OK, 1 a problem, anything else (or a timeout)
// Unknown. A permanent rule sets its condition, a temporary rule emits an event, as NPD's
// customPluginMonitor. Unlike NPD's runner, a plugin whose child keeps its stdout open
// (`setsid sleep 120 &`) reports within its timeout and is reaped at once (NPD issues 1050, 726).
//
//	cfg, err := custompluginmonitor.Load("/etc/nodeagent/custom-plugin-monitor.json")
//	if err != nil { return err }
//	m := custompluginmonitor.New("/etc/nodeagent/custom-plugin-monitor.json", cfg, nil)
//	if s := m.InitialStatus(); s != nil { report(s) }
//	go m.Run(ctx, reporter)
package custompluginmonitor
