//go:build tools

// Package tools pins what `make e2e-conformance` builds: the e2e suite (built with go test -c) and the ginkgo CLI.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e"
)
