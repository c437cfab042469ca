package config

import (
	"testing"

	"k8s.io/utils/ptr"
)

// TestMaxPods: maxPods unset means DefaultMaxPods (0, nodeagent runs no pods); any explicit value,
// 0 and the kubelet's 110 included, is kept, from a flag or from the config file.
func TestMaxPods(t *testing.T) {
	zero := writeConfig(t, minimalConfig+"maxPods: 0\n")
	fifty := writeConfig(t, minimalConfig+"maxPods: 50\n")
	unset := writeConfig(t, minimalConfig+"hostnameOverride: node-1\n")
	cases := []struct {
		desc          string
		args          []string
		wantSet       *int32
		wantEffective int32
		wantFlag      string // --max-pods's value as /flagz shows it
	}{
		{desc: "not set", args: nil, wantSet: nil, wantEffective: 0, wantFlag: "0"},
		{desc: "flag 110", args: []string{"--max-pods=110"}, wantSet: ptr.To[int32](110), wantEffective: 110, wantFlag: "110"},
		{desc: "flag 0", args: []string{"--max-pods", "0"}, wantSet: ptr.To[int32](0), wantEffective: 0, wantFlag: "0"},
		{desc: "file without maxPods", args: []string{"--config", unset}, wantSet: nil, wantEffective: 0, wantFlag: "0"},
		{desc: "file 0", args: []string{"--config", zero}, wantSet: ptr.To[int32](0), wantEffective: 0, wantFlag: "0"},
		{desc: "file 50", args: []string{"--config", fifty}, wantSet: ptr.To[int32](50), wantEffective: 50, wantFlag: "50"},
		{desc: "flag over file", args: []string{"--config", fifty, "--max-pods=7"}, wantSet: ptr.To[int32](7), wantEffective: 7, wantFlag: "7"},
		{desc: "flag 0 over file", args: []string{"--max-pods=0", "--config", fifty}, wantSet: ptr.To[int32](0), wantEffective: 0, wantFlag: "0"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			o, err := Load(tc.args)
			if err != nil {
				t.Fatalf("Load(%q): %v", tc.args, err)
			}
			c := o.Config
			if (c.MaxPods == nil) != (tc.wantSet == nil) || (c.MaxPods != nil && *c.MaxPods != *tc.wantSet) {
				t.Errorf("MaxPods = %v, want %v", ptr.Deref(c.MaxPods, -999), ptr.Deref(tc.wantSet, -999))
			}
			if got := c.EffectiveMaxPods(); got != tc.wantEffective {
				t.Errorf("EffectiveMaxPods() = %d, want %d", got, tc.wantEffective)
			}
			if got := o.Flags.Lookup("max-pods").Value.String(); got != tc.wantFlag {
				t.Errorf("--max-pods value = %q, want %q", got, tc.wantFlag)
			}
		})
	}
}

func TestMaxPodsOr(t *testing.T) {
	cases := []struct {
		maxPods *int32
		def     int32
		want    int32
	}{
		{maxPods: nil, def: 0, want: 0},
		{maxPods: nil, def: 42, want: 42},
		{maxPods: ptr.To[int32](0), def: 42, want: 0},
		{maxPods: ptr.To[int32](110), def: 42, want: 110},
	}
	for _, tc := range cases {
		c := &NodeAgentConfiguration{MaxPods: tc.maxPods}
		if got := c.MaxPodsOr(tc.def); got != tc.want {
			t.Errorf("MaxPods %v: MaxPodsOr(%d) = %d, want %d", ptr.Deref(tc.maxPods, -1), tc.def, got, tc.want)
		}
	}
}

func TestMaxPodsFlagValue(t *testing.T) {
	var p *int32
	v := optionalInt32Value{&p}
	if v.String() != "0" || v.Type() != "int32" {
		t.Errorf("unset: String() = %q, Type() = %q", v.String(), v.Type())
	}
	for _, bad := range []string{"many", "", "1.5", "2147483648"} {
		if err := v.Set(bad); err == nil {
			t.Errorf("Set(%q): no error", bad)
		}
	}
	if p != nil {
		t.Errorf("a failed Set changed the value to %d", *p)
	}
	if err := v.Set("-3"); err != nil || p == nil || *p != -3 {
		t.Errorf("Set(-3): %v, value %v", err, p)
	}
}
