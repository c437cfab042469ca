package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event (one line of ControlPlane.AuditLogPath) that tells
// who made which request.
type AuditEvent struct {
	// Stage is "ResponseComplete" (one per request), "ResponseStarted" (watches, before they end) or "Panic".
	Stage string `json:"stage"`
	// Verb is the Kubernetes verb: get, list, watch, create, update, patch, delete, ...
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
		// Extra holds, for a service account token bound to a pod, authentication.kubernetes.io/pod-name
		// and node-name among others.
		Extra map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// StageTimestamp is when the API server reached Stage (for ResponseComplete: the answer was sent).
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
}

// ReadAuditEvents parses the JSON-lines audit log at path (a trailing partly written line is ignored). To count a node's API requests, keep events
// with Stage "ResponseComplete" and User.Username "system:node:<name>".
func ReadAuditEvents(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	var events []AuditEvent
	var bad error // a line that does not parse is an error unless it is the last (still being written)
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for s.Scan() {
		if bad != nil {
			return nil, bad
		}
		var e AuditEvent
		if err := json.Unmarshal(s.Bytes(), &e); err != nil {
			bad = fmt.Errorf("parse audit log %s: %w", path, err)
			continue
		}
		events = append(events, e)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read audit log %s: %w", path, err)
	}
	return events, nil
}

// Code returns the event's HTTP response code, or 0 if it has none (a request still in progress).
func (e AuditEvent) Code() int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// Is reports whether e is verb on resource and subresource ("" for none).
func (e AuditEvent) Is(verb, resource, subresource string) bool {
	return e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.ObjectRef.Subresource == subresource
}

// ReadAuditEventsBy returns the completed requests (Stage ResponseComplete) in the audit log at path made
// by user, for instance "system:node:n1", that keep accepts (nil keeps all).
func ReadAuditEventsBy(path, user string, keep func(AuditEvent) bool) ([]AuditEvent, error) {
	events, err := ReadAuditEvents(path)
	if err != nil {
		return nil, err
	}
	var out []AuditEvent
	for _, e := range events {
		if e.Stage == "ResponseComplete" && e.User.Username == user && (keep == nil || keep(e)) {
			out = append(out, e)
		}
	}
	return out, nil
}

// RequestCounts counts the requests of user in events, by "verb resource[/subresource]" ("-" for a
// request on no resource): one per ResponseComplete event, except watches, counted once when they start
// (ResponseStarted), so a watch that is still open at the end of a window counts and one that ends
// inside it is not counted twice. Used by make bench and make bench-scale.
func RequestCounts(events []AuditEvent, user string) map[string]int {
	counts := map[string]int{}
	for _, e := range events {
		if e.User.Username != user {
			continue
		}
		switch {
		case e.Verb == "watch" && e.Stage == "ResponseStarted":
		case e.Verb != "watch" && e.Stage == "ResponseComplete":
		default:
			continue
		}
		res := "-"
		if e.ObjectRef != nil {
			res = e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				res += "/" + e.ObjectRef.Subresource
			}
		}
		counts[e.Verb+" "+res]++
	}
	return counts
}

// IsWriteVerb reports whether an API verb changes state: create, update, patch, delete,
// deletecollection, apply.
func IsWriteVerb(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection", "apply":
		return true
	}
	return false
}
