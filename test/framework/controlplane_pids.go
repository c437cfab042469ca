package framework

// PIDs returns the process IDs of the control plane's running components by binary name: "etcd",
// "kube-apiserver", and "kube-controller-manager" and "kube-scheduler" if started. A component that has
// exited is left out. With ReadProcCPU and ReadProcStats they give what the control plane costs the
// machine, for instance while a benchmark loads it.
func (cp *ControlPlane) PIDs() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	pids := map[string]int{}
	for name, p := range map[string]*process{"etcd": cp.etcd, "kube-apiserver": cp.apiserver,
		"kube-controller-manager": cp.kcm, "kube-scheduler": cp.scheduler} {
		if p == nil {
			continue
		}
		if done, _ := p.exited(); !done {
			pids[name] = p.pid()
		}
	}
	return pids
}
