package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// hugeExponent matches a decimal exponent of four digits or more ("1e-4000000"). apimachinery's
// resource.Quantity takes seconds to minutes on such values (in the kubelet as here), which stalls the
// fuzz workers without finding anything in our code, so the harness leaves those inputs out.
var hugeExponent = regexp.MustCompile(`[0-9.][eE][-+]?[0-9]{4,}`)

// minimalConfig is the smallest valid config file.
const minimalConfig = "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n"

// FuzzDecodeValidate feeds arbitrary bytes to Decode and, when they decode, to Validate: neither may
// panic, a decoded config always has its defaults, and Validate's error names at least one field.
// Run with: go test -run=^$ -fuzz=FuzzDecodeValidate -fuzztime=20s ./pkg/config
func FuzzDecodeValidate(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", "config.yaml")); err == nil {
		f.Add(b)
	}
	seeds := []string{
		minimalConfig,
		fileConfig,
		`{"apiVersion":"nodeagent.io/v1alpha1","kind":"NodeAgentConfiguration","maxPods":7}`,
		minimalConfig + "maxPods: -1\nnodeIP: 10.0.0.1,10.0.0.2\nhealthzBindAddress: x\n",
		minimalConfig + "evictionHard:\n  memory.available: 0%\n  nodefs.available: 150%\n  pid.available: \"\"\n",
		minimalConfig + "systemReserved: {cpu: 1e400, memory: -1}\nkubeReserved: {\"\": \"\"}\n",
		minimalConfig + "registerWithTaints:\n- {key: \"\", effect: \"\"}\n- key: a\n",
		minimalConfig + "nodeStatusMaxImages: -2147483648\nhealthzPort: 2147483647\nkubeAPIQPS: -1e39\n",
		minimalConfig + "runtimeRequestTimeout: -9223372036854775808ns\nnodeStatusUpdateFrequency: 0s\n",
		minimalConfig + "containerRuntimeEndpoint: \"unix://%zz\"\nimageServiceEndpoint: \"::\"\n",
		minimalConfig + "logging:\n  format: json\n  verbosity: 10\n  options: {json: {infoBufferSize: 1Ki}}\n",
		minimalConfig + "nodeLabels: {\"\": \"\", \"a/b/c\": \"x\"}\nhostnameOverride: \"..\"\n",
		minimalConfig + "maxPods: 1\nmaxPods: 2\n",
		minimalConfig + "maxPods: 0\nnodeLabels: {kubernetes.io/role: x, node-restriction.kubernetes.io/a: b, k8s.io/c: \"\"}\n" +
			"registerWithTaints:\n- {key: a, effect: NoSchedule, timeAdded: \"2024-01-01T00:00:00Z\"}\n- {key: a, value: b, effect: NoSchedule}\n",
		"apiVersion: v1\nkind: Pod\n",
		"",
		"null",
		"[]",
		"- a\n- b\n",
		"{{{",
		"\x00\xff",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if hugeExponent.Match(data) {
			return
		}
		c, err := Decode(data)
		if err != nil {
			if c != nil {
				t.Fatalf("Decode returned a config with an error: %v", err)
			}
			return
		}
		if c.RegisterNode == nil || c.RegisterSchedulable == nil || c.HealthzPort == nil || c.NodeStatusMaxImages == nil ||
			c.KubeAPIQPS == nil || c.EvictionHard == nil {
			t.Fatalf("Decode left a pointer default unset: %+v", c)
		}
		if c.APIVersion != GroupVersion || c.Kind != Kind {
			t.Fatalf("Decode accepted apiVersion %q kind %q", c.APIVersion, c.Kind)
		}
		if err := Validate(c); err != nil && !strings.HasPrefix(err.Error(), "invalid ") {
			t.Fatalf("Validate error does not name a field: %v", err)
		}
	})
}
