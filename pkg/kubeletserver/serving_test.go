package kubeletserver

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestServingTemplate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		addresses []v1.NodeAddress
		want      string // "" for no template
	}{
		{"no addresses: no CSR yet", nil, ""},
		{"a host name only: no CSR (AllowDNSOnlyNodeCSR off)", []v1.NodeAddress{{Type: v1.NodeHostName, Address: "n1"}}, ""},
		{"the kubelet's selection", []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: "n1"},
			{Type: v1.NodeExternalIP, Address: "192.0.2.7"}, {Type: v1.NodeInternalIP, Address: "10.0.0.2"},
			{Type: v1.NodeExternalDNS, Address: "n1.example.com"}, {Type: v1.NodeHostName, Address: "10.0.0.9"},
		}, "system:node:n1 [system:nodes] [n1 n1.example.com] [10.0.0.2 10.0.0.9 192.0.2.7]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := servingTemplate("n1", func() []v1.NodeAddress { return tc.addresses })()
			got := ""
			if tmpl != nil {
				got = fmt.Sprint(tmpl.Subject.CommonName, " ", tmpl.Subject.Organization, " ", tmpl.DNSNames, " ", tmpl.IPAddresses)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
