package node

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// podRouter routes the process's pod informer's events to the Nodes that run pods: by spec.nodeName,
// to the running Controller of that Node (Virtual Kubelet's pod controller does this for its one
// Node). The zero value is ready; safe for concurrent use.
type podRouter struct {
	mu     sync.Mutex
	byNode map[string]*Controller
}

// add routes the pods of c's Node to c.
func (r *podRouter) add(c *Controller) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byNode == nil {
		r.byNode = map[string]*Controller{}
	}
	r.byNode[c.cfg.NodeName] = c
}

// remove stops routing to c (a Controller of the same Node started since keeps its route).
func (r *podRouter) remove(c *Controller) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byNode[c.cfg.NodeName] == c {
		delete(r.byNode, c.cfg.NodeName)
	}
}

// route tells the Controller of Node nodeName, if any, of an event ev of its pod p
// (Controller.podUpdated).
func (r *podRouter) route(p metav1.Object, nodeName string, ev podEvent) {
	if nodeName == "" {
		return
	}
	r.mu.Lock()
	c := r.byNode[nodeName]
	r.mu.Unlock()
	if c != nil {
		c.podUpdated(p, ev)
	}
}

// handler is the pod informer's handler: every pod added, changed or deleted is routed (a *v1.Pod or
// a *CachedPod; podMeta).
func (r *podRouter) handler() cache.ResourceEventHandler {
	route := func(obj any, ev podEvent) {
		if p, nodeName, ok := podMeta(obj); ok {
			r.route(p, nodeName, ev)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { route(obj, podAdded) },
		UpdateFunc: func(_, obj any) { route(obj, podChanged) },
		DeleteFunc: func(obj any) { route(obj, podDeleted) },
	}
}
