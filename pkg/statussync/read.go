package statussync

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// getNode reads the Node: on try 0 from the lister (or the newer Node the last patch returned, see
// cachedNode) unless the cache is stale, else from the API server. Only an informer event makes the cache current again (see pkg/nodecache): a GET that finds
// the cache at the API server's resourceVersion proves nothing about the watch, which may still be
// down and miss the next change (the node lifecycle controller's Ready=Unknown right after an outage).
func (s *Syncer) getNode(ctx context.Context, try int) (*v1.Node, error) {
	if try == 0 && s.cfg.Cache.Stale() == nil {
		return s.cachedNode()
	}
	node, err := s.cfg.Client.CoreV1().Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting node %q: %w: %w", s.cfg.NodeName, ErrNodeGone, err)
	}
	if err != nil {
		return nil, err
	}
	node.ManagedFields = nil // kept: without them, as the informer's copy
	s.known.Store(node)
	s.cfg.Cache.ReadAt(node.ResourceVersion)
	return node, nil
}

// cachedNode reads the Node from the lister, or returns the Node last had from the API server (a
// patch's response or a GET) when the lister's copy of the same Node is older than that: the
// informer may not have delivered this agent's own last patch yet, and a sync computed against the
// older copy would find a change it just made undone "unchanged" and post nothing for a status
// period (a pressure set and cleared within a second). Older is as resourceversion.CompareResourceVersion
// orders them; a resourceVersion it cannot compare leaves the lister's copy in use. It returns the lister's error (NotFound before the informer saw the Node).
func (s *Syncer) cachedNode() (*v1.Node, error) {
	node, err := s.cfg.Lister.Get(s.cfg.NodeName)
	if err != nil {
		return nil, err
	}
	if k := s.known.Load(); k != nil {
		if k.UID == node.UID && olderResourceVersion(node.ResourceVersion, k.ResourceVersion) {
			return k, nil
		}
		s.known.CompareAndSwap(k, nil) // the informer has caught up: its copy is the one to keep
	}
	return node, nil
}

// olderResourceVersion reports whether resourceVersion a is older than b, as apimachinery's
// resourceversion.CompareResourceVersion orders them; false when either is not a valid one.
func olderResourceVersion(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
}
