package simulation

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
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
		domain string // Config.ClusterDomain
		want   string // "": not honoured (a file of the image)
	}{
		{name: "pod IP and name", podIPs: []string{"10.0.0.5"}, want: local + "10.0.0.5\tp\n"},
		{name: "dual stack, hostname and subdomain", podIPs: []string{"10.0.0.5", "fd00::5"},
			spec: v1.PodSpec{Hostname: "h", Subdomain: "sub"},
			want: local + "10.0.0.5\th.sub.ns.svc.cluster.local\th\nfd00::5\th.sub.ns.svc.cluster.local\th\n"},
		{name: "subdomain in the cluster's domain", podIPs: []string{"10.0.0.5"}, domain: "corp.example",
			spec: v1.PodSpec{Subdomain: "sub"}, want: local + "10.0.0.5\tp.sub.ns.svc.corp.example\tp\n"},
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
			prog, err := (&commands{clusterDomain: tc.domain}).program(context.Background(), p, ctr, &podCommands{podIPs: tc.podIPs}, 0, time.Unix(0, 0))
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

// TestContainerIdentity: id, as busybox's, answers the container's effective securityContext (the
// container's runAsUser/runAsGroup over the pod's, fsGroup then supplementalGroups), root by default.
// The specs: Security Context "should run the container with uid 65534", "should support
// pod/container.Spec.SecurityContext.RunAsUser And RunAsGroup".
func TestContainerIdentity(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name     string
		pod      *v1.PodSecurityContext
		ctr      *v1.SecurityContext
		script   string
		want     string
		exitCode int32
	}{
		{name: "default root", script: "id", want: "uid=0(root) gid=0(root) groups=0(root)\n"},
		{name: "uid 65534", pod: &v1.PodSecurityContext{RunAsUser: i(65534)}, script: "test $(id -u) -eq 65534", want: ""},
		{name: "pod runAsUser and runAsGroup", pod: &v1.PodSecurityContext{RunAsUser: i(1001), RunAsGroup: i(2002)}, script: "id",
			want: "uid=1001 gid=2002 groups=2002\n"},
		{name: "container over pod", pod: &v1.PodSecurityContext{RunAsUser: i(1001), RunAsGroup: i(2001)},
			ctr: &v1.SecurityContext{RunAsUser: i(1002), RunAsGroup: i(2002)}, script: "id -u; id -g", want: "1002\n2002\n"},
		{name: "fsGroup and supplementalGroups", pod: &v1.PodSecurityContext{RunAsGroup: i(3000), FSGroup: i(2000), SupplementalGroups: []int64{5000, 3000}},
			script: "id -G", want: "3000 2000 5000\n"},
		{name: "names: root known, others not", pod: &v1.PodSecurityContext{RunAsUser: i(1001)}, script: "id -gn; id -un",
			want: "root\nid: unknown ID 1001\n", exitCode: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec: v1.PodSpec{SecurityContext: tc.pod}}
			ctr := &v1.Container{Name: "c", Command: []string{"sh", "-c", tc.script}, SecurityContext: tc.ctr}
			prog, err := (&commands{}).program(context.Background(), p, ctr, &podCommands{}, 0, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			res := sandbox.Run(context.Background(), prog, sandbox.Limits{})
			var got strings.Builder
			for _, l := range res.Output {
				got.WriteString(l.Text + "\n")
			}
			if !res.Honoured || got.String() != tc.want || res.ExitCode != tc.exitCode {
				t.Errorf("%s = %q, exit %d (%s), want %q, exit %d", tc.script, got.String(), res.ExitCode, res.Reason, tc.want, tc.exitCode)
			}
		})
	}
}

// TestSysctls: sysctl NAME and /proc/sys/NAME answer the pod's securityContext.sysctls (either
// separator, printed with dots, as busybox's sysctl); a parameter the pod does not set is not known.
// The specs: Sysctls "should support sysctls", "should support sysctls with slashes as separator".
func TestSysctls(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sysctls []v1.Sysctl
		cmd     []string
		want    string // "": not honoured
	}{
		{name: "dots", sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}, cmd: []string{"/bin/sysctl", "kernel.shm_rmid_forced"},
			want: "kernel.shm_rmid_forced = 1\n"},
		{name: "slashes", sysctls: []v1.Sysctl{{Name: "kernel/shm_rmid_forced", Value: "1"}}, cmd: []string{"/bin/sysctl", "kernel/shm_rmid_forced"},
			want: "kernel.shm_rmid_forced = 1\n"},
		{name: "-n and a dotted segment", sysctls: []v1.Sysctl{{Name: "net/ipv4/conf/eth0.100/forwarding", Value: "1"}},
			cmd: []string{"sysctl", "-n", "net.ipv4.conf.eth0/100.forwarding"}, want: "1\n"},
		{name: "/proc/sys", sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}, cmd: []string{"cat", "/proc/sys/kernel/shm_rmid_forced"},
			want: "1\n"},
		{name: "not set: the kernel's", sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}, cmd: []string{"sysctl", "kernel.msgmax"}},
		{name: "/proc/sys of a dotted segment", sysctls: []v1.Sysctl{{Name: "net.ipv4.conf.eth0/100.forwarding", Value: "0"}},
			cmd: []string{"cat", "/proc/sys/net/ipv4/conf/eth0.100/forwarding"}, want: "0\n"},
		{name: "a directory of /proc/sys: the kernel's", sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}, cmd: []string{"ls", "/proc/sys/kernel"}},
		{name: "none set", cmd: []string{"cat", "/proc/sys/kernel/shm_rmid_forced"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{Sysctls: tc.sysctls}}}
			ctr := &v1.Container{Name: "c", Command: tc.cmd}
			prog, err := (&commands{}).program(context.Background(), p, ctr, &podCommands{}, 0, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			res := sandbox.Run(context.Background(), prog, sandbox.Limits{})
			var got strings.Builder
			for _, l := range res.Output {
				got.WriteString(l.Text + "\n")
			}
			if tc.want == "" {
				if res.Honoured {
					t.Errorf("%v honoured (%q), want not", tc.cmd, got.String())
				}
				return
			}
			if !res.Honoured || got.String() != tc.want || res.ExitCode != 0 {
				t.Errorf("%v = %q, exit %d (%s), want %q", tc.cmd, got.String(), res.ExitCode, res.Reason, tc.want)
			}
		})
	}
}

// TestAgnhostEtcHosts: agnhost's etc-hosts (no command, args [etc-hosts]) prints the pod's /etc/hosts
// and a newline, as its fmt.Println; other images and subcommands keep their unknown entrypoint. The
// spec: Kubelet "when scheduling an agnhost Pod with hostAliases should write entries to /etc/hosts".
func TestAgnhostEtcHosts(t *testing.T) {
	const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.56"
	for _, tc := range []struct {
		name    string
		image   string
		args    []string
		want    string // a line of the output; "": not interpreted
		forever bool   // runs until stopped, its SIGTERM handler exiting 2 (else exits 0 with a last empty line)
	}{
		{name: "agnhost etc-hosts", image: agnhost, args: []string{"etc-hosts"}, want: "123.45.67.89\tfoo\tbar"},
		{name: "agnhost pause: until its SIGTERM, on which it exits 2", image: agnhost, args: []string{"pause"}, want: "Paused", forever: true},
		{name: "another image", image: "busybox", args: []string{"etc-hosts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec: v1.PodSpec{HostAliases: []v1.HostAlias{{IP: "123.45.67.89", Hostnames: []string{"foo", "bar"}}},
					Containers: []v1.Container{{Name: "c", Image: tc.image, Args: tc.args}}}}
			r, _, err := (&commands{}).run(context.Background(), p, &p.Spec.Containers[0], &podCommands{podIPs: []string{"10.0.0.5"}}, 0, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if r.ok {
					t.Errorf("interpreted: %+v, want not", r.out)
				}
				return
			}
			var lines []string
			for _, l := range r.out.Output {
				lines = append(lines, l.Text)
			}
			if tc.forever {
				if !r.ok || !r.out.Forever || !r.out.ExitsOnSIGTERM || r.out.SIGTERMExitCode != 2 || !slices.Contains(lines, tc.want) {
					t.Errorf("run = %+v (%q), want until stopped, exit 2 on SIGTERM, with %q", r.out, lines, tc.want)
				}
				return
			}
			if !r.ok || r.out.ExitCode != 0 || r.out.Forever || !slices.Contains(lines, tc.want) || lines[len(lines)-1] != "" {
				t.Errorf("run = %+v (%q), want exit 0 with %q and a last empty line", r.out, lines, tc.want)
			}
		})
	}
}

// TestClusterDomainConfig: Config.ClusterDomain reaches the commands' hosts files, DefaultClusterDomain
// when not given.
func TestClusterDomainConfig(t *testing.T) {
	for _, tc := range []struct{ domain, want string }{
		{"", DefaultClusterDomain},
		{"corp.example", "corp.example"},
	} {
		client := fake.NewClientset()
		factory := informers.NewSharedInformerFactory(client, 0)
		deps := node.Dependencies{Client: client, HeartbeatClient: client, Cache: nodecache.New(clock.RealClock{}),
			NodeLister: factory.Core().V1().Nodes().Lister(), Pods: node.IndexedPodLister{Indexer: factory.Core().V1().Pods().Informer().GetIndexer()},
			Recorder: &record.FakeRecorder{}, Clock: clock.RealClock{}}
		nodeCfg := node.Config{NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
			NodeLeaseDurationSeconds: 40, NodeStatusMaxImages: 50, AgentVersion: "v0.0.0-test"}
		sim, err := New(Config{Nodes: 1, NamePrefix: "sim-", Node: nodeCfg, Dependencies: deps, InterpretPodCommands: true, ClusterDomain: tc.domain})
		if err != nil {
			t.Fatal(err)
		}
		if got := sim.pods.commands.clusterDomain; got != tc.want {
			t.Errorf("ClusterDomain %q: the commands' cluster domain is %q, want %q", tc.domain, got, tc.want)
		}
	}
}
