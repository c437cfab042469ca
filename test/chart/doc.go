// Package chart tests the Helm chart deploy/helm/nodeagent with helm itself (v3.22.0, built from
// hack/helm by hack/build-helm.sh, which hack/install-deps.sh runs):
//
//   - `helm lint --strict` passes with the default values and with everything enabled;
//   - `helm template` with the default values renders exactly the objects of the kustomize base
//     deploy/kubernetes (`kubectl kustomize`), and with simulate.enabled=true also those of
//     deploy/kubernetes/simulate: the companion DaemonSet, the simulation StatefulSet, their RBAC, the
//     admission policy, the namespaces, the Service and the problem monitors' ConfigMap, decoded and
//     compared, so that the two never drift;
//   - values change what they say (replicas and --shards, the namespace the admission policy names,
//     problem monitor configs and the ConfigMap's hash), and the monitoring objects carry the shipped
//     rules and dashboard;
//   - the rendered chart passes `kubectl apply --dry-run=server` on the harness's API server.
//
// Run with: go test ./test/chart/...
package chart
