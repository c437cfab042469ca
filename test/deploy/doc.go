// Package deploy holds static tests of the deployment artifacts: the
// Kubernetes manifests in deploy/kubernetes, the systemd unit and example
// config in deploy/systemd, and the Dockerfile. No cluster, systemd instance
// or Docker engine is needed:
//
//   - every manifest decodes strictly with client-go's scheme, the RBAC grants
//     are exactly the calls nodeagent makes, and the DaemonSet has the
//     downward-API node name, mounts, probes and security context it needs;
//   - the unit passes `systemd-analyze verify` (installed with apt-get by
//     TestMain when missing) and the example config loads and validates with
//     pkg/config;
//   - the Dockerfile is multi-stage, builds a static binary stamped with the
//     version, and runs it on distroless static as root.
//
// Run with: go test ./test/deploy/...
package deploy
