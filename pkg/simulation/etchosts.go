package simulation

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeagent/nodeagent/pkg/simulation/sandbox"
)

const (
	// etcHostsPath is where the kubelet mounts the pod's hosts file in each container.
	etcHostsPath = "/etc/hosts"
	// managedHostsHeader and managedHostsHeaderWithHostNetwork are the first lines of the hosts file
	// the kubelet writes (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go).
	managedHostsHeader                = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderWithHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
	// DefaultClusterDomain is the cluster domain of a pod's subdomain FQDN when none is configured
	// (Config.ClusterDomain; the kubelet has none by default, kubeadm and most clusters give this one).
	DefaultClusterDomain = "cluster.local"
	// nodeEtcHosts is the simulated Node's own /etc/hosts (its host file system's, made with it), which
	// the hosts file of a hostNetwork pod starts with.
	nodeEtcHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
)

// hostsMount returns the mount of the pod's hosts file at /etc/hosts in container ctr, writing the
// file as the kubelet's makeHostsMount/ensureHostsFile do at each container's creation: the managed
// content (managedHostsFileContent) from the pod IPs, its host name and subdomain FQDN and its
// hostAliases; for a hostNetwork pod, the Node's /etc/hosts (its host file system's) after the
// host-network header, then the hostAliases. ok false: the kubelet mounts none, because the
// container mounts a volume at /etc/hosts or the pod is on the pod network and has no IP yet
// (shouldMountHostsFile). The file is one per pod (pc.etcHosts), shared by its containers, writable.
// err: the Node's /etc/hosts cannot be read (the kubelet cannot make the container's config).
func (c *commands) hostsMount(p *v1.Pod, ctr *v1.Container, pc *podCommands) (m sandbox.Mount, ok bool, err error) {
	if len(pc.podIPs) == 0 && !p.Spec.HostNetwork {
		return sandbox.Mount{}, false, nil
	}
	for _, vm := range ctr.VolumeMounts {
		if vm.MountPath == etcHostsPath {
			return sandbox.Mount{}, false, nil
		}
	}
	var content []byte
	if p.Spec.HostNetwork {
		f, err := c.hostFS(p.Spec.NodeName).OpenFile(etcHostsPath, os.O_RDONLY, 0)
		if err != nil {
			return sandbox.Mount{}, false, fmt.Errorf("reading the Node's %s for the hosts file of a hostNetwork pod: %w", etcHostsPath, err)
		}
		node, err := io.ReadAll(f)
		_ = f.Close()
		if err != nil {
			return sandbox.Mount{}, false, fmt.Errorf("reading the Node's %s for the hosts file of a hostNetwork pod: %w", etcHostsPath, err)
		}
		content = append(append([]byte(managedHostsHeaderWithHostNetwork), node...), hostsEntriesFromHostAliases(p.Spec.HostAliases)...)
	} else {
		domain := ""
		if p.Spec.Subdomain != "" {
			domain = fmt.Sprintf("%s.%s.svc.%s", p.Spec.Subdomain, p.Namespace, cmp.Or(c.clusterDomain, DefaultClusterDomain))
		}
		content = managedHostsFileContent(pc.podIPs, podHostname(p), domain, p.Spec.HostAliases)
	}
	if pc.etcHosts == nil {
		pc.etcHosts = sandbox.NewFS(0)
	}
	f, err := pc.etcHosts.OpenFile("/hosts", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return sandbox.Mount{}, false, fmt.Errorf("writing the pod's hosts file: %w", err)
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return sandbox.Mount{}, false, fmt.Errorf("writing the pod's hosts file (%d bytes): %w", len(content), err)
	}
	return sandbox.Mount{Path: etcHostsPath, FS: pc.etcHosts, Root: "/hosts"}, true, nil
}

// managedHostsFileContent is the kubelet's function of the same name: the managed header, the
// localhost lines, each pod IP with hostName (and its FQDN first when hostDomainName is set), then
// the hostAliases.
func managedHostsFileContent(podIPs []string, hostName, hostDomainName string, hostAliases []v1.HostAlias) []byte {
	var buffer bytes.Buffer
	buffer.WriteString(managedHostsHeader)
	buffer.WriteString("127.0.0.1\tlocalhost\n")
	buffer.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	buffer.WriteString("fe00::0\tip6-localnet\n")
	buffer.WriteString("fe00::0\tip6-mcastprefix\n")
	buffer.WriteString("fe00::1\tip6-allnodes\n")
	buffer.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if hostDomainName != "" {
			fmt.Fprintf(&buffer, "%s\t%s.%s\t%s\n", ip, hostName, hostDomainName, hostName)
		} else {
			fmt.Fprintf(&buffer, "%s\t%s\n", ip, hostName)
		}
	}
	buffer.Write(hostsEntriesFromHostAliases(hostAliases))
	return buffer.Bytes()
}

// hostsEntriesFromHostAliases is the kubelet's function of the same name: a blank line, the
// "# Entries added by HostAliases." header, and a line per alias (its IP, then its host names, tab
// separated); nothing without aliases.
func hostsEntriesFromHostAliases(hostAliases []v1.HostAlias) []byte {
	if len(hostAliases) == 0 {
		return nil
	}
	var buffer bytes.Buffer
	buffer.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range hostAliases {
		fmt.Fprintf(&buffer, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return buffer.Bytes()
}

// containerIdentity is the user, primary group and supplementary groups of container ctr's process as
// the kubelet asks the runtime for them (securitycontext.DetermineEffectiveSecurityContext, then
// kuberuntime's determineEffectiveSecurityContext): runAsUser and runAsGroup of the container's
// securityContext over the pod's; the pod's fsGroup, then its supplementalGroups, as supplementary
// groups. Unset: 0 (root): the image's USER, which the runtime would use, is not known.
func containerIdentity(p *v1.Pod, ctr *v1.Container) (uid, gid int64, groups []int64) {
	if psc := p.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			uid = *psc.RunAsUser
		}
		if psc.RunAsGroup != nil {
			gid = *psc.RunAsGroup
		}
		if psc.FSGroup != nil {
			groups = append(groups, *psc.FSGroup)
		}
		groups = append(groups, psc.SupplementalGroups...)
	}
	if sc := ctr.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	return uid, gid, groups
}
