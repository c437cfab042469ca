// Package monitoring tests deploy/monitoring with the tools operators use:
//
//   - the rules pass `promtool check rules`, and `promtool test rules` runs testdata/rules.test.yaml,
//     a unit test per alert (fires when it should, silent when it should not) and per recording rule;
//     every alert has both kinds of case, and breaking any alert makes promtool fail;
//   - every alert follows kubernetes-mixin's conventions (NodeAgent name, severity, summary, description,
//     runbook_url) and its runbook_url points at a section of docs/operating.md;
//   - the generated files (prometheusrule.yaml, the dashboard, the Helm chart's copies) are what
//     hack/monitoring writes now;
//   - live: a real Prometheus (Debian's) scrapes a real agent, companion and simulation on the harness's
//     control plane with the shipped rules; stopping containerd takes NodeAgentContainerRuntimeDown
//     through pending to firing and starting it again resolves it; every dashboard query returns series.
//
// promtool and prometheus come from Debian's prometheus package, which hack/install-deps.sh installs.
//
// Run with: go test ./test/monitoring/...
package monitoring
