package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestDefaults checks the kubelet's KubeletConfiguration defaults that nodeagent shares.
func TestDefaults(t *testing.T) {
	c := NewDefault()
	checks := []struct {
		field     string
		got, want any
	}{
		{"apiVersion", c.APIVersion, GroupVersion},
		{"kind", c.Kind, Kind},
		{"registerNode", *c.RegisterNode, true},
		{"registerSchedulable", *c.RegisterSchedulable, true},
		{"containerRuntimeEndpoint", c.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock"},
		{"runtimeRequestTimeout", c.RuntimeRequestTimeout.Duration, 2 * time.Minute},
		{"maxPods (unset)", c.MaxPods, (*int32)(nil)},
		{"effective maxPods", c.EffectiveMaxPods(), int32(0)},
		{"evictionHard", c.EvictionHard, DefaultEvictionHard},
		{"nodeStatusUpdateFrequency", c.NodeStatusUpdateFrequency.Duration, 10 * time.Second},
		{"nodeStatusReportFrequency", c.NodeStatusReportFrequency.Duration, 5 * time.Minute},
		{"nodeLeaseDurationSeconds", c.NodeLeaseDurationSeconds, int32(40)},
		{"nodeStatusMaxImages", *c.NodeStatusMaxImages, int32(50)},
		{"healthzBindAddress", c.HealthzBindAddress, "127.0.0.1"},
		{"healthzPort", *c.HealthzPort, int32(10248)},
		{"kubeAPIQPS", *c.KubeAPIQPS, float32(50)},
		{"kubeAPIBurst", c.KubeAPIBurst, int32(100)},
		{"logging.format", c.Logging.Format, "text"},
	}
	for _, tc := range checks {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.field, tc.got, tc.want)
		}
	}
	if err := Validate(c); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	c.EvictionHard["memory.available"] = "1Gi"
	if DefaultEvictionHard["memory.available"] != "100Mi" {
		t.Errorf("SetDefaults shares DefaultEvictionHard with the config")
	}
}

// TestValidate: each bad field is reported with its name and value.
func TestValidate(t *testing.T) {
	cases := []struct {
		desc   string
		mutate func(c *NodeAgentConfiguration)
		want   []string // substrings of the error, each naming the field and the value
	}{
		{desc: "valid defaults", mutate: func(*NodeAgentConfiguration) {}},
		{desc: "valid everything", mutate: func(c *NodeAgentConfiguration) {
			c.HostnameOverride = "Node-1.example.com"
			c.NodeIP = "10.0.0.1,fd00::1"
			c.NodeLabels = map[string]string{"example.com/role": "edge", "zone": "", "topology.kubernetes.io/zone": "a",
				"kubernetes.io/hostname": "n", "node.kubernetes.io/instance-type": "m", "kubelet.kubernetes.io/x": "",
				"x.node.kubernetes.io/y": "", "node-role.example.com/infra": "", "kubernetes.io.example.com/z": ""}
			c.RegisterWithTaints = []v1.Taint{{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule},
				{Key: "example.com/dedicated", Value: "x", Effect: v1.TaintEffectNoExecute}, {Key: "other", Effect: v1.TaintEffectNoSchedule}}
			c.MaxPods = ptr.To[int32](0)
			c.CloudProvider = "external"
			c.ImageServiceEndpoint = "unix:///run/other.sock"
			c.SystemReserved = map[string]string{"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "100"}
			c.KubeReserved = map[string]string{"memory": "0"}
			c.EvictionHard = map[string]string{"memory.available": "0%", "pid.available": "10%"}
			c.NodeStatusMaxImages = ptr.To[int32](-1)
			c.HealthzPort = ptr.To[int32](0)
			c.HealthzBindAddress = "::"
			c.KubeAPIQPS = ptr.To[float32](0)
		}},
		{desc: "apiVersion", mutate: func(c *NodeAgentConfiguration) { c.APIVersion = "v1" }, want: []string{`invalid apiVersion/kind "v1/NodeAgentConfiguration"`}},
		{desc: "hostnameOverride", mutate: func(c *NodeAgentConfiguration) { c.HostnameOverride = "bad_name" }, want: []string{`invalid hostnameOverride "bad_name"`}},
		{desc: "nodeIP not an IP", mutate: func(c *NodeAgentConfiguration) { c.NodeIP = "10.0.0.1,banana" }, want: []string{`invalid nodeIP "10.0.0.1,banana"`}},
		{desc: "nodeIP two of a family", mutate: func(c *NodeAgentConfiguration) { c.NodeIP = "10.0.0.1,10.0.0.2" }, want: []string{`invalid nodeIP "10.0.0.1,10.0.0.2"`}},
		{desc: "nodeLabels key", mutate: func(c *NodeAgentConfiguration) { c.NodeLabels = map[string]string{"bad key": "v"} }, want: []string{`invalid nodeLabels "bad key"`}},
		{desc: "nodeLabels value", mutate: func(c *NodeAgentConfiguration) { c.NodeLabels = map[string]string{"k": "bad value"} }, want: []string{`invalid nodeLabels[k] "bad value"`}},
		{desc: "registerWithTaints effect", mutate: func(c *NodeAgentConfiguration) {
			c.RegisterWithTaints = []v1.Taint{{Key: "k", Effect: "Sometimes"}}
		}, want: []string{`invalid registerWithTaints[0] "k:Sometimes"`}},
		{desc: "cloudProvider", mutate: func(c *NodeAgentConfiguration) { c.CloudProvider = "aws" }, want: []string{`invalid cloudProvider "aws"`}},
		{desc: "containerRuntimeEndpoint tcp", mutate: func(c *NodeAgentConfiguration) { c.ContainerRuntimeEndpoint = "tcp://127.0.0.1:1234" },
			want: []string{`invalid containerRuntimeEndpoint "tcp://127.0.0.1:1234": must be a unix socket URL`}},
		{desc: "containerRuntimeEndpoint bare path", mutate: func(c *NodeAgentConfiguration) { c.ContainerRuntimeEndpoint = "/run/containerd/containerd.sock" },
			want: []string{`invalid containerRuntimeEndpoint "/run/containerd/containerd.sock"`}},
		{desc: "imageServiceEndpoint without path", mutate: func(c *NodeAgentConfiguration) { c.ImageServiceEndpoint = "unix://" },
			want: []string{`invalid imageServiceEndpoint "unix://": unix socket URL has no path`}},
		{desc: "runtimeRequestTimeout", mutate: func(c *NodeAgentConfiguration) { c.RuntimeRequestTimeout.Duration = -time.Second },
			want: []string{`invalid runtimeRequestTimeout "-1s"`}},
		{desc: "rootDir", mutate: func(c *NodeAgentConfiguration) { c.RootDir = "" }, want: []string{`invalid rootDir ""`}},
		{desc: "maxPods", mutate: func(c *NodeAgentConfiguration) { c.MaxPods = ptr.To[int32](-1) }, want: []string{`invalid maxPods "-1"`}},
		{desc: "nodeLabels in kubernetes.io and k8s.io a kubelet may not set", mutate: func(c *NodeAgentConfiguration) {
			c.NodeLabels = map[string]string{"kubernetes.io/role": "master", "node-role.kubernetes.io/control-plane": "",
				"example.k8s.io/x": "y", "k8s.io/y": "", "example.com/fine": "", "topology.kubernetes.io/zone": "a"}
		}, want: []string{`invalid nodeLabels "example.k8s.io/x,k8s.io/y,kubernetes.io/role,node-role.kubernetes.io/control-plane": ` +
			`unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels; --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ` +
			`(kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set (beta.kubernetes.io/arch, `}},
		{desc: "nodeLabels in node-restriction.kubernetes.io", mutate: func(c *NodeAgentConfiguration) {
			c.NodeLabels = map[string]string{"node-restriction.kubernetes.io/pool": "a", "team.node-restriction.kubernetes.io/x": "b", "example.com/fine": ""}
		}, want: []string{`invalid nodeLabels "node-restriction.kubernetes.io/pool,team.node-restriction.kubernetes.io/x": labels in the "node-restriction.kubernetes.io" namespace are for administrators only`}},
		{desc: "nodeLabels of both kinds", mutate: func(c *NodeAgentConfiguration) {
			c.NodeLabels = map[string]string{"node-restriction.kubernetes.io/pool": "a", "kubernetes.io/role": "master"}
		}, want: []string{`invalid nodeLabels "node-restriction.kubernetes.io/pool": labels in`, `invalid nodeLabels "kubernetes.io/role": unknown 'kubernetes.io' or 'k8s.io' labels`}},
		{desc: "registerWithTaints same key and effect", mutate: func(c *NodeAgentConfiguration) {
			c.RegisterWithTaints = []v1.Taint{{Key: "k", Value: "a", Effect: v1.TaintEffectNoSchedule}, {Key: "k", Effect: v1.TaintEffectNoExecute},
				{Key: "k", Value: "b", Effect: v1.TaintEffectNoSchedule}}
		}, want: []string{`invalid registerWithTaints[2] "k=b:NoSchedule": duplicated taints with the same key and effect: registerWithTaints[0] is "k=a:NoSchedule"`}},
		{desc: "registerWithTaints timeAdded", mutate: func(c *NodeAgentConfiguration) {
			c.RegisterWithTaints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}}}
		}, want: []string{`invalid registerWithTaints[0] "k:NoExecute": taint.TimeAdded is not nil (timeAdded "2024-01-02T03:04:05Z")`}},
		{desc: "systemReserved", mutate: func(c *NodeAgentConfiguration) { c.SystemReserved = map[string]string{"gpu": "1"} },
			want: []string{`invalid systemReserved "gpu=1": unknown resource "gpu"`}},
		{desc: "kubeReserved", mutate: func(c *NodeAgentConfiguration) { c.KubeReserved = map[string]string{"memory": "-1Gi"} },
			want: []string{`invalid kubeReserved "memory=-1Gi"`}},
		{desc: "evictionHard", mutate: func(c *NodeAgentConfiguration) { c.EvictionHard = map[string]string{"memory.available": "150%"} },
			want: []string{`invalid evictionHard "memory.available<150%"`}},
		{desc: "nodeStatusUpdateFrequency", mutate: func(c *NodeAgentConfiguration) { c.NodeStatusUpdateFrequency.Duration = 0 },
			want: []string{`invalid nodeStatusUpdateFrequency "0s"`}},
		{desc: "nodeStatusReportFrequency", mutate: func(c *NodeAgentConfiguration) { c.NodeStatusReportFrequency.Duration = -time.Minute },
			want: []string{`invalid nodeStatusReportFrequency "-1m0s"`}},
		{desc: "nodeLeaseDurationSeconds", mutate: func(c *NodeAgentConfiguration) { c.NodeLeaseDurationSeconds = 0 },
			want: []string{`invalid nodeLeaseDurationSeconds "0"`}},
		{desc: "nodeStatusMaxImages", mutate: func(c *NodeAgentConfiguration) { c.NodeStatusMaxImages = ptr.To[int32](-2) },
			want: []string{`invalid nodeStatusMaxImages "-2"`}},
		{desc: "healthzBindAddress", mutate: func(c *NodeAgentConfiguration) { c.HealthzBindAddress = "localhost" },
			want: []string{`invalid healthzBindAddress "localhost": must be an IP address`}},
		{desc: "healthzPort", mutate: func(c *NodeAgentConfiguration) { c.HealthzPort = ptr.To[int32](70000) },
			want: []string{`invalid healthzPort "70000"`}},
		{desc: "kubeAPIQPS", mutate: func(c *NodeAgentConfiguration) { c.KubeAPIQPS = ptr.To[float32](-1) }, want: []string{`invalid kubeAPIQPS "-1"`}},
		{desc: "kubeAPIBurst", mutate: func(c *NodeAgentConfiguration) { c.KubeAPIBurst = -1 }, want: []string{`invalid kubeAPIBurst "-1"`}},
		{
			desc: "every problem at once",
			mutate: func(c *NodeAgentConfiguration) {
				c.ContainerRuntimeEndpoint = "npipe://./pipe/containerd"
				c.MaxPods = ptr.To[int32](-5)
				c.NodeLeaseDurationSeconds = -1
				c.HealthzBindAddress = "nowhere"
				c.EvictionHard = map[string]string{"memory.free": "1Gi"}
			},
			want: []string{
				`invalid containerRuntimeEndpoint "npipe://./pipe/containerd"`,
				`invalid maxPods "-5"`,
				`invalid nodeLeaseDurationSeconds "-1"`,
				`invalid healthzBindAddress "nowhere"`,
				`invalid evictionHard "memory.free<1Gi": unknown eviction signal "memory.free"`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c := NewDefault()
			tc.mutate(c)
			err := Validate(c)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: no error, want %q", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("Validate reported %d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const fileConfig = `apiVersion: nodeagent.io/v1alpha1
kind: NodeAgentConfiguration
hostnameOverride: from-file
maxPods: 50
nodeLabels:
  from: file
registerWithTaints:
  - key: file.example.com/t
    effect: NoExecute
nodeStatusUpdateFrequency: 20s
healthzPort: 12345
evictionHard:
  memory.available: 200Mi
`

// TestLoadPrecedence: defaults < config file < flags, as the kubelet's; a map or list flag replaces
// the file's value rather than merging into it.
func TestLoadPrecedence(t *testing.T) {
	path := writeConfig(t, fileConfig)
	cases := []struct {
		desc  string
		args  []string
		check func(t *testing.T, o *Options)
	}{
		{
			desc: "defaults only",
			args: nil,
			check: func(t *testing.T, o *Options) {
				if !reflect.DeepEqual(o.Config, NewDefault()) {
					t.Errorf("config = %+v, want the defaults", o.Config)
				}
			},
		},
		{
			desc: "flags over defaults",
			args: []string{"--max-pods=30", "--node-ip=10.0.0.1", "--kubeconfig=/etc/kubeconfig", "--healthz-port=0"},
			check: func(t *testing.T, o *Options) {
				if *o.Config.MaxPods != 30 || o.Config.NodeIP != "10.0.0.1" || *o.Config.HealthzPort != 0 || o.Kubeconfig != "/etc/kubeconfig" {
					t.Errorf("config = %+v, kubeconfig %q", o.Config, o.Kubeconfig)
				}
			},
		},
		{
			desc: "file over defaults",
			args: []string{"--config", path},
			check: func(t *testing.T, o *Options) {
				c := o.Config
				if c.HostnameOverride != "from-file" || *c.MaxPods != 50 || c.NodeStatusUpdateFrequency.Duration != 20*time.Second ||
					*c.HealthzPort != 12345 || c.NodeLabels["from"] != "file" || len(c.RegisterWithTaints) != 1 {
					t.Errorf("file values not applied: %+v", c)
				}
				if !reflect.DeepEqual(c.EvictionHard, map[string]string{"memory.available": "200Mi"}) {
					t.Errorf("evictionHard = %v, want the file's map only (as the kubelet: a set map replaces the defaults)", c.EvictionHard)
				}
				// Unset in the file: defaults.
				if c.NodeStatusReportFrequency.Duration != 5*time.Minute || *c.NodeStatusMaxImages != 50 || c.NodeLeaseDurationSeconds != 40 {
					t.Errorf("defaults not applied under the file: %+v", c)
				}
				if o.ConfigFile != path {
					t.Errorf("ConfigFile = %q, want %q", o.ConfigFile, path)
				}
			},
		},
		{
			desc: "flags over file, in any order",
			args: []string{"--max-pods=110", "--config=" + path, "--node-status-update-frequency=7s", "--hostname-override=from-flag"},
			check: func(t *testing.T, o *Options) {
				c := o.Config
				if *c.MaxPods != 110 {
					t.Errorf("maxPods = %d, want the flag's 110", *c.MaxPods)
				}
				if c.NodeStatusUpdateFrequency.Duration != 7*time.Second || c.HostnameOverride != "from-flag" {
					t.Errorf("flags did not override the file: %+v", c)
				}
				if *c.HealthzPort != 12345 {
					t.Errorf("healthzPort = %d, want the file's 12345", *c.HealthzPort)
				}
			},
		},
		{
			desc: "map and list flags replace the file's",
			args: []string{"--config", path, "--node-labels=from=flag,other=x", "--register-with-taints=flag.example.com/t=v:NoSchedule",
				"--eviction-hard=nodefs.available<5%"},
			check: func(t *testing.T, o *Options) {
				c := o.Config
				if !reflect.DeepEqual(c.NodeLabels, map[string]string{"from": "flag", "other": "x"}) {
					t.Errorf("nodeLabels = %v", c.NodeLabels)
				}
				want := []v1.Taint{{Key: "flag.example.com/t", Value: "v", Effect: v1.TaintEffectNoSchedule}}
				if !reflect.DeepEqual(c.RegisterWithTaints, want) {
					t.Errorf("registerWithTaints = %v, want %v", c.RegisterWithTaints, want)
				}
				if !reflect.DeepEqual(c.EvictionHard, map[string]string{"nodefs.available": "5%"}) {
					t.Errorf("evictionHard = %v", c.EvictionHard)
				}
			},
		},
		{
			desc: "bool pointers from flags",
			args: []string{"--register-node=false", "--register-schedulable=false", "--enable-profiling-handler"},
			check: func(t *testing.T, o *Options) {
				if *o.Config.RegisterNode || *o.Config.RegisterSchedulable || !o.Config.EnableProfilingHandler {
					t.Errorf("config = %+v", o.Config)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			o, err := Load(tc.args)
			if err != nil {
				t.Fatalf("Load(%q): %v", tc.args, err)
			}
			tc.check(t, o)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	bad := writeConfig(t, "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\nmaxPods: -3\n")
	unknown := writeConfig(t, "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\nmaxpods: 3\n")
	cases := []struct {
		desc    string
		args    []string
		wantErr string
		is      error
	}{
		{desc: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "unknown flag: --no-such-flag"},
		{desc: "bad flag value", args: []string{"--max-pods=many"}, wantErr: `invalid argument "many" for "--max-pods"`},
		{desc: "bad taint flag", args: []string{"--register-with-taints=k:Never"}, wantErr: `taint "k:Never"`},
		{desc: "positional argument", args: []string{"extra"}, wantErr: `unexpected arguments ["extra"]`},
		{desc: "missing config file", args: []string{"--config=/nonexistent/config.yaml"}, wantErr: `--config "/nonexistent/config.yaml"`, is: os.ErrNotExist},
		{desc: "unknown field in the file", args: []string{"--config", unknown}, wantErr: `unknown field "maxpods"`},
		{desc: "invalid value in the file", args: []string{"--config", bad}, wantErr: `invalid maxPods "-3"`},
		{desc: "invalid flag value after the file", args: []string{"--config", bad, "--max-pods=4", "--node-lease-duration-seconds=0"},
			wantErr: `invalid nodeLeaseDurationSeconds "0"`},
		{desc: "duplicated taints flag", args: []string{"--register-with-taints=a=x:NoSchedule,b:NoSchedule,a=y:NoSchedule"},
			wantErr: `taint "a=y:NoSchedule": duplicated taints with the same key and effect: "a=x:NoSchedule" and "a=y:NoSchedule"`},
		{desc: "node-labels flag a kubelet may not set", args: []string{"--node-labels=node-role.kubernetes.io/worker=,example.com/x=y"},
			wantErr: `invalid nodeLabels "node-role.kubernetes.io/worker": unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels`},
		{desc: "help", args: []string{"--help"}, is: ErrHelp},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := Load(tc.args)
			if err == nil {
				t.Fatalf("Load(%q): no error", tc.args)
			}
			if tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error = %v, want errors.Is %v", err, tc.is)
			}
		})
	}
}

// TestDecodeStrict: unknown and duplicate fields, and a wrong apiVersion or kind, are errors.
func TestDecodeStrict(t *testing.T) {
	const header = "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n"
	cases := []struct {
		desc    string
		data    string
		wantErr string
	}{
		{desc: "minimal", data: header},
		{desc: "JSON", data: `{"apiVersion":"nodeagent.io/v1alpha1","kind":"NodeAgentConfiguration","maxPods":7}`},
		{desc: "unknown field", data: header + "maxpods: 10\n", wantErr: `unknown field "maxpods"`},
		{desc: "unknown nested field", data: header + "logging:\n  formats: json\n", wantErr: `unknown field "logging.formats"`},
		{desc: "duplicate field", data: header + "maxPods: 10\nmaxPods: 20\n", wantErr: `"maxPods" already set`},
		{desc: "wrong type", data: header + "maxPods: lots\n", wantErr: "decoding"},
		{desc: "wrong apiVersion", data: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: NodeAgentConfiguration\n",
			wantErr: `apiVersion "kubelet.config.k8s.io/v1beta1" kind "NodeAgentConfiguration": want apiVersion nodeagent.io/v1alpha1, kind NodeAgentConfiguration`},
		{desc: "wrong kind", data: "apiVersion: nodeagent.io/v1alpha1\nkind: KubeletConfiguration\n", wantErr: `kind "KubeletConfiguration"`},
		{desc: "missing apiVersion and kind", data: "maxPods: 10\n", wantErr: `apiVersion "" kind ""`},
		{desc: "empty", data: "", wantErr: `apiVersion "" kind ""`},
		{desc: "not YAML", data: "{{{", wantErr: "decoding"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c, err := Decode([]byte(tc.data))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if c.RegisterNode == nil || c.HealthzPort == nil || c.EvictionHard == nil {
					t.Errorf("Decode did not apply defaults: %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Decode error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestDecodeKeepsExplicitZeroes: pointer fields distinguish "unset" (default) from an explicit zero.
func TestDecodeKeepsExplicitZeroes(t *testing.T) {
	c, err := Decode([]byte("apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n" +
		"registerNode: false\nhealthzPort: 0\nnodeStatusMaxImages: 0\nkubeAPIQPS: 0\nevictionHard: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if *c.RegisterNode || *c.HealthzPort != 0 || *c.NodeStatusMaxImages != 0 || *c.KubeAPIQPS != 0 || len(c.EvictionHard) != 0 {
		t.Errorf("explicit zeroes replaced by defaults: registerNode=%v healthzPort=%d maxImages=%d qps=%v evictionHard=%v",
			*c.RegisterNode, *c.HealthzPort, *c.NodeStatusMaxImages, *c.KubeAPIQPS, c.EvictionHard)
	}
}

// TestParseTaints mirrors the kubelet's taint parsing for --register-with-taints.
func TestParseTaints(t *testing.T) {
	cases := []struct {
		in      string
		want    []v1.Taint
		wantErr string
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "key1=value1:NoSchedule", want: []v1.Taint{{Key: "key1", Value: "value1", Effect: v1.TaintEffectNoSchedule}}},
		{in: "key1:NoExecute", want: []v1.Taint{{Key: "key1", Effect: v1.TaintEffectNoExecute}}},
		{in: "example.com/key=v:PreferNoSchedule,key2:NoSchedule", want: []v1.Taint{
			{Key: "example.com/key", Value: "v", Effect: v1.TaintEffectPreferNoSchedule},
			{Key: "key2", Effect: v1.TaintEffectNoSchedule},
		}},
		{in: "key1=:NoSchedule", want: []v1.Taint{{Key: "key1", Effect: v1.TaintEffectNoSchedule}}},
		{in: "key1=value1", wantErr: `taint "key1=value1": want key[=value]:Effect`},
		{in: "key1", wantErr: `taint "key1"`},
		{in: "key1=value1:Sometimes", wantErr: `effect "Sometimes"`},
		{in: "key1=value1:", wantErr: `effect ""`},
		{in: "bad key=v:NoSchedule", wantErr: `key "bad key"`},
		{in: ":NoSchedule", wantErr: `key ""`},
		{in: "key=bad value:NoSchedule", wantErr: `value "bad value"`},
		{in: "key=a=b:NoSchedule", wantErr: `value "a=b"`},
		{in: "k:NoSchedule:extra", wantErr: `effect "NoSchedule:extra"`},
		{in: "key1:NoSchedule,", wantErr: `taint ""`},
		{in: "k=a:NoSchedule,k=b:NoExecute,k:PreferNoSchedule", want: []v1.Taint{
			{Key: "k", Value: "a", Effect: v1.TaintEffectNoSchedule},
			{Key: "k", Value: "b", Effect: v1.TaintEffectNoExecute},
			{Key: "k", Effect: v1.TaintEffectPreferNoSchedule},
		}},
		{in: "k=a:NoSchedule,k=b:NoSchedule", wantErr: `taint "k=b:NoSchedule": duplicated taints with the same key and effect: "k=a:NoSchedule" and "k=b:NoSchedule"`},
		{in: "k:NoExecute,other:NoExecute,k:NoExecute", wantErr: `duplicated taints with the same key and effect: "k:NoExecute" and "k:NoExecute"`},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTaints(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseTaints(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTaints(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseTaints(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// TestTaintsFlag: --register-with-taints prints back what it parsed.
func TestTaintsFlag(t *testing.T) {
	var taints []v1.Taint
	v := taintsValue{&taints}
	if err := v.Set("a=b:NoSchedule,c:NoExecute"); err != nil {
		t.Fatal(err)
	}
	if got := v.String(); got != "a=b:NoSchedule,c:NoExecute" {
		t.Errorf("String() = %q", got)
	}
	if err := v.Set("bad"); err == nil {
		t.Error("Set(bad): no error")
	}
	if got := (taintsValue{}).String(); got != "" {
		t.Errorf("nil String() = %q", got)
	}
	if v.Type() == "" {
		t.Error("Type() is empty")
	}
}

func TestParseReserved(t *testing.T) {
	cases := []struct {
		in      map[string]string
		want    v1.ResourceList
		wantErr string
	}{
		{in: nil, want: v1.ResourceList{}},
		{in: map[string]string{"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "1000"}, want: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("100Mi"),
			v1.ResourceEphemeralStorage: resource.MustParse("1Gi"), "pid": resource.MustParse("1000"),
		}},
		{in: map[string]string{"memory": "0"}, want: v1.ResourceList{v1.ResourceMemory: resource.MustParse("0")}},
		{in: map[string]string{"gpu": "1"}, wantErr: `unknown resource "gpu"`},
		{in: map[string]string{"hugepages-2Mi": "1Gi"}, wantErr: `unknown resource "hugepages-2Mi"`},
		{in: map[string]string{"memory": "lots"}, wantErr: `memory="lots"`},
		{in: map[string]string{"cpu": "-1"}, wantErr: `cpu="-1": must not be negative`},
	}
	for _, tc := range cases {
		t.Run(formatMap(tc.in, "="), func(t *testing.T) {
			got, err := ParseReserved(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ParseReserved = %v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || g.Cmp(w) != 0 {
					t.Errorf("%s = %v, want %v", k, got[k], w)
				}
			}
		})
	}
}

// TestBindFlagsNames: every documented kubelet flag name is bound (docs/flags.md).
func TestBindFlagsNames(t *testing.T) {
	fs := BindFlags(&Options{Config: NewDefault()})
	for _, name := range []string{
		"config", "kubeconfig", "hostname-override", "node-ip", "node-labels", "register-node", "register-with-taints",
		"register-schedulable", "cloud-provider", "provider-id", "container-runtime-endpoint", "image-service-endpoint",
		"runtime-request-timeout", "root-dir", "max-pods", "system-reserved", "kube-reserved", "eviction-hard",
		"node-status-update-frequency", "node-status-report-frequency", "node-lease-duration-seconds",
		"node-status-max-images", "healthz-bind-address", "healthz-port", "enable-profiling-handler",
		"kube-api-qps", "kube-api-burst", "v", "logging-format",
		"address", "port", "rotate-server-certificates", "tls-cert-file", "tls-private-key-file", "anonymous-auth", "authentication-token-webhook",
		"authentication-token-webhook-cache-ttl", "client-ca-file", "authorization-mode",
		"authorization-webhook-cache-authorized-ttl", "authorization-webhook-cache-unauthorized-ttl",
	} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s is not bound", name)
		}
	}
	var f *pflag.Flag = fs.Lookup("max-pods")
	if f != nil && f.DefValue != "0" {
		t.Errorf("--max-pods default = %q, want 0", f.DefValue)
	}
	if f != nil && !strings.Contains(f.Usage, "Default 0: nodeagent runs no pods, so no pod is scheduled here; set --max-pods for a node whose pods something else runs") {
		t.Errorf("--max-pods usage does not state the default and how to change it: %q", f.Usage)
	}
}

// TestDurationsRoundTrip: durations decode from the kubelet's string form.
func TestDurationsRoundTrip(t *testing.T) {
	c, err := Decode([]byte("apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\nruntimeRequestTimeout: 90s\nnodeStatusReportFrequency: 1m30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.RuntimeRequestTimeout != (metav1.Duration{Duration: 90 * time.Second}) || c.NodeStatusReportFrequency.Duration != 90*time.Second {
		t.Errorf("durations = %v, %v", c.RuntimeRequestTimeout, c.NodeStatusReportFrequency)
	}
}
