package node

import (
	"sync"

	v1 "k8s.io/api/core/v1"
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

// route tells the Controller of p's Node, if any, of p (Controller.podUpdated; update: an update
// event, not an add or a deletion).
func (r *podRouter) route(p *v1.Pod, update bool) {
	if p.Spec.NodeName == "" {
		return
	}
	r.mu.Lock()
	c := r.byNode[p.Spec.NodeName]
	r.mu.Unlock()
	if c != nil {
		c.podUpdated(p, update)
	}
}

// handler is the pod informer's handler: every pod added, changed or deleted is routed.
func (r *podRouter) handler() cache.ResourceEventHandler {
	route := func(obj any, update bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*v1.Pod); ok {
			r.route(p, update)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { route(obj, false) },
		UpdateFunc: func(_, obj any) { route(obj, true) },
		DeleteFunc: func(obj any) { route(obj, false) },
	}
}
