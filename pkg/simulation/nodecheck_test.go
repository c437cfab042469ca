package simulation

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// manyLabels returns a template with n labels of 63-character values.
func manyLabels(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Node\nmetadata:\n  labels:\n")
	for i := range n {
		fmt.Fprintf(&b, "    example.com/label-%05d: %s\n", i, strings.Repeat("v", 63))
	}
	return b.String()
}

// TestCheckNodeObject (issue 27, item 3): the Node a template yields is checked as the API server and
// etcd will: a template of 20000 labels (1.7 MB, under the 4 MiB file limit) is refused naming etcd's
// request limit; invalid labels from --node-labels are refused as ValidateLabels does; the default
// template and one of 2000 labels pass. InitialNode carries the template's and the simulation's labels and
// the setters' status.
func TestCheckNodeObject(t *testing.T) {
	for _, tc := range []struct {
		desc, template string
		labels         map[string]string
		want           []string
	}{
		{"default template", "", nil, nil},
		{"2000 labels", manyLabels(2000), nil, nil},
		{"20000 labels", manyLabels(20000), nil, []string{"node sim-0002 would take", "20008 labels",
			"over etcd's default request limit of 1.50 MiB (--max-request-bytes=1572864)", `"etcdserver: request is too large"`}},
		{"a bad --node-labels key", "", map[string]string{"bad key!": "x"}, []string{`node sim-0002: metadata.labels: Invalid value: "bad key!"`}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			e := newSimEnv(t, func(c *Config) {
				if tc.template != "" {
					tmpl, err := ParseTemplate([]byte(tc.template))
					if err != nil {
						t.Fatal(err)
					}
					c.Template = tmpl
				}
				c.Node.Labels = tc.labels
			})
			n, err := e.sim.InitialNode(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if n.Name != "sim-0002" || n.Labels[v1.LabelHostname] != "sim-0002" || n.Labels[LabelSimulation] != SimulationID("sim-") ||
				n.Status.Capacity.Cpu().String() != "4" || len(n.Status.Conditions) < 4 {
				t.Errorf("InitialNode: %s labels %d capacity %v conditions %d", n.Name, len(n.Labels), n.Status.Capacity, len(n.Status.Conditions))
			}
			err = CheckNodeObject(n)
			if (err == nil) != (len(tc.want) == 0) {
				t.Fatalf("CheckNodeObject = %v, want an error saying %q", err, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
		})
	}
}
