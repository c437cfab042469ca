package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/test/framework"
)

// badInput is one start of nodeagent with one wrong input; everything else on its command line is valid.
type badInput struct {
	name string
	args []string
	// names are the ways the error may name the input: the flag, or the config field when the value
	// reached validation (a flag and its config field are the same setting); one must appear.
	names []string
	// value, if set, must appear in the error too.
	value string
}

// TestCase10BadInput is case 10: nodeagent started with one bad input at a time (every flag that
// can take a bad value, config files that are malformed, kubeconfigs that cannot be loaded, CRI
// endpoints that are not unix socket URLs) exits with status 1 and a single line "nodeagent: ..."
// naming the input, and writes nothing to the cluster (the audit log holds no request from its
// identity, and there is no Node or Lease). A kubeconfig that loads but points at a closed port is
// not bad input: nodeagent starts, keeps retrying registration and stops cleanly on SIGTERM.
func TestCase10BadInput(t *testing.T) {
	bin, err := framework.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	name := nodeBadInput
	dir := agentDir(t, name)
	kubeconfig := suite.cp.KubeconfigFor(name)
	write := func(file, content string) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const header = "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n"
	malformedYAML := write("malformed.yaml", header+"nodeStatusUpdateFrequency: [10s\n")
	unknownField := write("unknown-field.yaml", header+"nodeStatusUpdateFrequncy: 10s\n")
	wrongKind := write("wrong-kind.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	badValue := write("bad-value.yaml", header+"nodeLeaseDurationSeconds: -5\n")
	duplicate := write("duplicate.yaml", header+"maxPods: 10\nmaxPods: 20\n")
	wrongType := write("wrong-type.yaml", header+"maxPods: many\n")
	garbageKubeconfig := write("garbage.kubeconfig", "clusters: [this is not a kubeconfig\n")
	notAFile := write("root-is-a-file", "")

	inputs := []badInput{
		{name: "unknown flag", args: []string{"--no-such-flag"}, names: []string{"--no-such-flag"}},
		{name: "positional argument", args: []string{"serve"}, names: []string{"serve"}},
		{name: "hostname-override", args: []string{"--hostname-override=Not_A_Node"}, names: []string{"--hostname-override", "hostnameOverride"}, value: "Not_A_Node"},
		{name: "node-ip", args: []string{"--node-ip=1.2.3"}, names: []string{"--node-ip", "nodeIP"}, value: "1.2.3"},
		{name: "node-labels", args: []string{"--node-labels=bad label=x"}, names: []string{"--node-labels", "nodeLabels"}, value: "bad label"},
		{name: "node-labels syntax", args: []string{"--node-labels=novalue"}, names: []string{"--node-labels", "nodeLabels"}, value: "novalue"},
		{name: "register-node", args: []string{"--register-node=maybe"}, names: []string{"--register-node"}, value: "maybe"},
		{name: "register-with-taints", args: []string{"--register-with-taints=nokey"}, names: []string{"--register-with-taints", "registerWithTaints"}, value: "nokey"},
		{name: "register-with-taints effect", args: []string{"--register-with-taints=k=v:Sometimes"}, names: []string{"--register-with-taints", "registerWithTaints"}, value: "Sometimes"},
		{name: "register-schedulable", args: []string{"--register-schedulable=maybe"}, names: []string{"--register-schedulable"}, value: "maybe"},
		{name: "cloud-provider", args: []string{"--cloud-provider=aws"}, names: []string{"--cloud-provider", "cloudProvider"}, value: "aws"},
		{name: "CRI endpoint tcp", args: []string{"--container-runtime-endpoint=tcp://127.0.0.1:5000"}, names: []string{"--container-runtime-endpoint", "containerRuntimeEndpoint"}, value: "tcp://127.0.0.1:5000"},
		{name: "CRI endpoint bare path", args: []string{"--container-runtime-endpoint=/run/containerd/containerd.sock"}, names: []string{"--container-runtime-endpoint", "containerRuntimeEndpoint"}, value: "/run/containerd/containerd.sock"},
		{name: "CRI endpoint no path", args: []string{"--container-runtime-endpoint=unix://"}, names: []string{"--container-runtime-endpoint", "containerRuntimeEndpoint"}, value: "unix://"},
		{name: "image-service-endpoint", args: []string{"--image-service-endpoint=http://127.0.0.1:5000"}, names: []string{"--image-service-endpoint", "imageServiceEndpoint"}, value: "http://127.0.0.1:5000"},
		{name: "runtime-request-timeout", args: []string{"--runtime-request-timeout=0s"}, names: []string{"--runtime-request-timeout", "runtimeRequestTimeout"}, value: "0s"},
		{name: "runtime-request-timeout syntax", args: []string{"--runtime-request-timeout=soon"}, names: []string{"--runtime-request-timeout"}, value: "soon"},
		{name: "root-dir empty", args: []string{"--root-dir="}, names: []string{"--root-dir", "rootDir"}},
		{name: "root-dir a file", args: []string{"--root-dir=" + notAFile}, names: []string{"--root-dir", "rootDir"}, value: notAFile},
		{name: "max-pods", args: []string{"--max-pods=-1"}, names: []string{"--max-pods", "maxPods"}, value: "-1"},
		{name: "max-pods syntax", args: []string{"--max-pods=lots"}, names: []string{"--max-pods"}, value: "lots"},
		{name: "system-reserved", args: []string{"--system-reserved=cpu=lots"}, names: []string{"--system-reserved", "systemReserved"}, value: "lots"},
		{name: "kube-reserved", args: []string{"--kube-reserved=gpu=1"}, names: []string{"--kube-reserved", "kubeReserved"}, value: "gpu"},
		{name: "eviction-hard quantity", args: []string{"--eviction-hard=memory.available<lots"}, names: []string{"--eviction-hard", "evictionHard"}, value: "lots"},
		{name: "eviction-hard signal", args: []string{"--eviction-hard=bogus.signal<1Gi"}, names: []string{"--eviction-hard", "evictionHard"}, value: "bogus.signal"},
		{name: "node-status-update-frequency", args: []string{"--node-status-update-frequency=0s"}, names: []string{"--node-status-update-frequency", "nodeStatusUpdateFrequency"}, value: "0s"},
		{name: "node-status-update-frequency syntax", args: []string{"--node-status-update-frequency=fast"}, names: []string{"--node-status-update-frequency"}, value: "fast"},
		{name: "node-status-report-frequency", args: []string{"--node-status-report-frequency=-1m"}, names: []string{"--node-status-report-frequency", "nodeStatusReportFrequency"}, value: "-1m"},
		{name: "node-lease-duration-seconds", args: []string{"--node-lease-duration-seconds=0"}, names: []string{"--node-lease-duration-seconds", "nodeLeaseDurationSeconds"}, value: "0"},
		{name: "node-lease-duration-seconds syntax", args: []string{"--node-lease-duration-seconds=forty"}, names: []string{"--node-lease-duration-seconds"}, value: "forty"},
		{name: "node-status-max-images", args: []string{"--node-status-max-images=-2"}, names: []string{"--node-status-max-images", "nodeStatusMaxImages"}, value: "-2"},
		{name: "healthz-bind-address", args: []string{"--healthz-bind-address=localhost"}, names: []string{"--healthz-bind-address", "healthzBindAddress"}, value: "localhost"},
		{name: "healthz-port", args: []string{"--healthz-port=70000"}, names: []string{"--healthz-port", "healthzPort"}, value: "70000"},
		{name: "enable-profiling-handler", args: []string{"--enable-profiling-handler=maybe"}, names: []string{"--enable-profiling-handler"}, value: "maybe"},
		{name: "kube-api-qps", args: []string{"--kube-api-qps=-1"}, names: []string{"--kube-api-qps", "kubeAPIQPS"}, value: "-1"},
		{name: "kube-api-burst", args: []string{"--kube-api-burst=-1"}, names: []string{"--kube-api-burst", "kubeAPIBurst"}, value: "-1"},
		{name: "v", args: []string{"--v=loud"}, names: []string{"--v"}, value: "loud"},
		{name: "logging-format", args: []string{"--logging-format=xml"}, names: []string{"--logging-format", "logging: format", "logging.format"}, value: "xml"},

		{name: "config missing", args: []string{"--config=" + filepath.Join(dir, "missing.yaml")}, names: []string{"--config"}, value: filepath.Join(dir, "missing.yaml")},
		{name: "config malformed YAML", args: []string{"--config=" + malformedYAML}, names: []string{"--config"}, value: malformedYAML},
		{name: "config unknown field", args: []string{"--config=" + unknownField}, names: []string{"nodeStatusUpdateFrequncy"}, value: unknownField},
		{name: "config wrong kind", args: []string{"--config=" + wrongKind}, names: []string{"apiVersion", "kind"}, value: wrongKind},
		{name: "config bad value", args: []string{"--config=" + badValue}, names: []string{"nodeLeaseDurationSeconds"}, value: "-5"},
		{name: "config duplicate field", args: []string{"--config=" + duplicate}, names: []string{"maxPods"}, value: duplicate},
		{name: "config wrong type", args: []string{"--config=" + wrongType}, names: []string{"maxPods"}, value: wrongType},

		{name: "kubeconfig missing", args: []string{"--kubeconfig=" + filepath.Join(dir, "missing.kubeconfig")}, names: []string{"--kubeconfig"}, value: filepath.Join(dir, "missing.kubeconfig")},
		{name: "kubeconfig a directory", args: []string{"--kubeconfig=" + dir}, names: []string{"--kubeconfig"}, value: dir},
		{name: "kubeconfig garbage", args: []string{"--kubeconfig=" + garbageKubeconfig}, names: []string{"--kubeconfig"}, value: garbageKubeconfig},
		{name: "kubeconfig empty outside a cluster", args: []string{"--kubeconfig="}, names: []string{"--kubeconfig"}},
	}

	valid := []string{
		"--kubeconfig=" + kubeconfig, "--hostname-override=" + name,
		"--container-runtime-endpoint=" + suite.ctrd.Endpoint, "--root-dir=" + filepath.Join(dir, "root"),
		"--healthz-port=0", "--port=0",
	}
	for _, in := range inputs {
		t.Run(strings.ReplaceAll(in.name, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append(append([]string(nil), valid...), in.args...)...)
			cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("%v: want exit status 1, got %v after %v; output:\n%s", in.args, err, time.Since(start).Round(time.Millisecond), out.String())
			}
			text := strings.TrimRight(out.String(), "\n")
			if strings.Contains(text, "\n") || text == "" {
				t.Errorf("%v: want one line, got:\n%s", in.args, out.String())
			}
			if !strings.HasPrefix(text, "nodeagent: ") {
				t.Errorf("%v: error line %q does not start with \"nodeagent: \"", in.args, text)
			}
			named := false
			for _, n := range in.names {
				named = named || strings.Contains(text, n)
			}
			if !named {
				t.Errorf("%v: error line %q names none of %q", in.args, text, in.names)
			}
			if in.value != "" && !strings.Contains(text, in.value) {
				t.Errorf("%v: error line %q does not show the value %q", in.args, text, in.value)
			}
			t.Logf("%s → exit 1 in %v: %s", strings.Join(in.args, " "), time.Since(start).Round(time.Millisecond), text)
		})
	}

	// A kubeconfig that loads but whose server is a closed port: nodeagent runs and retries.
	t.Run("kubeconfig_server_closed_port", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		closed := filepath.Join(dir, "closed-port.kubeconfig")
		err := framework.WriteKubeconfig(closed, fmt.Sprintf("https://127.0.0.1:%d", framework.FreePort()), suite.cp.CAData, nodeUser(name),
			suite.cp.NodeConfig(name).BearerToken)
		if err != nil {
			t.Fatal(err)
		}
		a, err := framework.StartAgent(ctx, framework.AgentOptions{
			Dir: agentDir(t, name), NodeName: name, Kubeconfig: closed, RuntimeEndpoint: suite.ctrd.Endpoint, Args: agentArgs(),
		})
		if err != nil {
			t.Fatalf("nodeagent with a kubeconfig pointing at a closed port did not start: %v", err)
		}
		defer a.Kill()
		time.Sleep(3 * statusFrequency)
		if !a.Running() {
			t.Fatalf("nodeagent exited with its API server unreachable: %v\n%s", a.Wait(ctx), a.Logs())
		}
		m := mustScrape(ctx, t, a)
		if n := m.Sum("nodeagent_node_registration_attempts_total", map[string]string{"result": "error"}); n < 2 {
			t.Errorf("nodeagent_node_registration_attempts_total{result=\"error\"} = %v after %v, want repeated attempts", n, 3*statusFrequency)
		}
		if code, body, err := a.Get(ctx, "/readyz"); err != nil || code == http.StatusOK {
			t.Errorf("/readyz answered %d %q (%v) with no API server, want a failure", code, body, err)
		}
		if !strings.Contains(a.Logs(), "connection refused") {
			t.Errorf("nodeagent's log does not show the refused connection:\n%s", framework.TailLines(a.Logs(), 20))
		}
		if err := a.Stop(); err != nil {
			t.Errorf("SIGTERM while retrying: exit %v, want 0", err)
		}
	})

	// Nothing reached the cluster from this identity.
	if events := auditEvents(t, nodeUser(name), nil); len(events) > 0 {
		t.Errorf("audit log: %d requests by %s, want none; first: %+v", len(events), nodeUser(name), events[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := suite.cp.AdminClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Node %s: got %v, want NotFound", name, err)
	}
	if _, err := framework.GetLease(ctx, suite.cp.AdminClient, name); !apierrors.IsNotFound(err) {
		t.Errorf("Lease %s: got %v, want NotFound", name, err)
	}
}
