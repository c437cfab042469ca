package simulation

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

// TestEtcHosts: a container's /etc/hosts is the hosts file the kubelet writes (managedHostsFileContent):
// the pod IPs with the host name (and the subdomain FQDN), the hostAliases after their header; a
// hostNetwork pod's starts with the host-network header and the Node's /etc/hosts; a container that
// mounts a volume at /etc/hosts sees the volume; a pod without an IP has none (a file of the image).
// The specs: KubeletManagedEtcHosts "should test kubelet managed /etc/hosts file", Kubelet "with
// hostAliases should write entries to /etc/hosts".
func TestEtcHosts(t *testing.T) {
	const local = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
	hostPath := v1.Volume{Name: "host-etc-hosts", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/etc/hosts"}}}
	for _, tc := range []struct {
		name   string
		spec   v1.PodSpec
		podIPs []string
		mounts []v1.VolumeMount
		want   string // "": not honoured (a file of the image)
	}{
		{name: "pod IP and name", podIPs: []string{"10.0.0.5"}, want: local + "10.0.0.5\tp\n"},
		{name: "dual stack, hostname and subdomain", podIPs: []string{"10.0.0.5", "fd00::5"},
			spec: v1.PodSpec{Hostname: "h", Subdomain: "sub"},
			want: local + "10.0.0.5\th.sub.ns.svc.cluster.local\th\nfd00::5\th.sub.ns.svc.cluster.local\th\n"},
		{name: "hostAliases", podIPs: []string{"10.0.0.5"},
			spec: v1.PodSpec{HostAliases: []v1.HostAlias{{IP: "123.45.67.89", Hostnames: []string{"foo", "bar"}}, {IP: "1.2.3.4", Hostnames: []string{"baz"}}}},
			want: local + "10.0.0.5\tp\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n1.2.3.4\tbaz\n"},
		{name: "hostNetwork: the Node's file", spec: v1.PodSpec{HostNetwork: true, HostAliases: []v1.HostAlias{{IP: "1.2.3.4", Hostnames: []string{"baz"}}}},
			want: "# Kubernetes-managed hosts file (host network).\n" + nodeEtcHosts + "\n# Entries added by HostAliases.\n1.2.3.4\tbaz\n"},
		{name: "the container mounts /etc/hosts: the Node's", podIPs: []string{"10.0.0.5"}, spec: v1.PodSpec{Volumes: []v1.Volume{hostPath}},
			mounts: []v1.VolumeMount{{Name: "host-etc-hosts", MountPath: "/etc/hosts"}}, want: nodeEtcHosts},
		{name: "no pod IP yet: none", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: tc.spec}
			p.Spec.NodeName = "sim-0000"
			ctr := &v1.Container{Name: "c", Command: []string{"cat", "/etc/hosts"}, VolumeMounts: tc.mounts}
			prog, err := (&commands{}).program(context.Background(), p, ctr, &podCommands{podIPs: tc.podIPs}, 0, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			res := sandbox.Run(context.Background(), prog, sandbox.Limits{})
			if tc.want == "" {
				if res.Honoured {
					t.Errorf("cat /etc/hosts honoured, want a file of the image: %+v", res)
				}
				return
			}
			var got strings.Builder
			for _, l := range res.Output {
				got.WriteString(l.Text + "\n")
			}
			if !res.Honoured || got.String() != tc.want {
				t.Errorf("cat /etc/hosts = %q (%s), want %q", got.String(), res.Reason, tc.want)
			}
		})
	}
}
