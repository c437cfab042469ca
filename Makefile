# nodeagent developer entry points. `make up` runs it locally; `make test` runs every test.
SHELL := /bin/bash
comma := ,
GO ?= go
GOTEST_FLAGS ?= -count=1 -timeout 30m
# Everything under test/ runs real components (or whole builds); the rest are unit tests.
INTEGRATION_PKGS := ./test/...
# The unit tests: make test runs them with -race.
UNIT_PKGS := ./pkg/... ./internal/... ./cmd/...

.PHONY: tools build up cluster test test-unit test-integration vet fmt

## tools: install containerd/CNI plugins and prometheus (promtool) if missing and build etcd, kube-apiserver,
## kube-controller-manager, kube-scheduler, kubelet, kubectl, cloud-node-controller and kubemark (the hollow
## node), helm (hack/helm) and the e2e suite's DRA test driver (hack/dra-test-driver), into _output/bin: each only
## when missing or out of date (make up built some)
tools:
	hack/install-deps.sh

## build: build nodeagent into _output/bin/nodeagent
build:
	$(GO) build -tags grpcnotrace -ldflags "-X github.com/nodeagent/nodeagent/pkg/version.gitCommit=$$(git rev-parse --short HEAD 2>/dev/null)" -o _output/bin/nodeagent ./cmd/nodeagent

## up: local control plane + containerd + nodeagent + metrics-server until Ctrl-C (ARGS="--exit-when-ready" to
## stop once Ready); kubeconfigs in _output/local-up (admin.kubeconfig, node-<name>.kubeconfig). Builds only
## what it runs (hack/install-deps.sh --for up: etcd, kube-apiserver, kube-controller-manager, kubectl,
## metrics-server). With SIMULATE=N: the control plane with kube-scheduler and the controllers pods need,
## `nodeagent simulate --nodes N` under its RBAC identity (docs/simulation.md), no containerd, and
## metrics-server; prints README's commands (a Deployment, logs -f, exec, port-forward, top, an HPA scaling
## out); state in _output/simulate.
SIMULATE ?=
up:
	hack/local-up.sh $(if $(strip $(SIMULATE)),--simulate=$(SIMULATE)) $(ARGS)

## cluster: the control plane and containerd of `make up` without nodeagent, until Ctrl-C, to run
## _output/bin/nodeagent by hand: writes _output/cluster/admin.kubeconfig and one
## _output/cluster/node-<name>.kubeconfig per name in NODES (default: this host's name), and prints the
## command line for each node
NODES ?=
cluster:
	hack/local-up.sh --control-plane-only $(if $(strip $(NODES)),--nodes="$(NODES)") $(ARGS)

# Integration tests whose bounds are timings under load (no Lease late by a second with 1000 log streams
# open; no Node of another shard going Unknown while one of 900 Nodes' shards is down): make test runs
# them last, one at a time, with nothing else on the machine, so that another package's test or another
# load test cannot decide them (both failed once on a 2-core CI machine while the other and test/faults ran).
ALONE_TESTS := TestShards|TestKubeletAPILoad

## test: all tests, unit and integration (installs dependencies first); the unit tests with the race detector;
## the integration tests of ALONE_TESTS last, one at a time
test: tools
	$(GO) test $(GOTEST_FLAGS) -race $(UNIT_PKGS)
	$(GO) test $(GOTEST_FLAGS) -skip '^($(ALONE_TESTS))$$' $$($(GO) list ./... | grep -v -e '/pkg/' -e '/internal/' -e '/cmd/')
	$(GO) test $(GOTEST_FLAGS) -parallel 1 -run '^($(ALONE_TESTS))$$' ./test/integration
	$(MAKE) --no-print-directory fuzz

.PHONY: fuzz
FUZZTIME ?= 15s
# FUZZ_TARGETS: each <package>:<target>, fuzzed FUZZTIME each, one after the other (go test -fuzz takes
# one target of one package at a time).
FUZZ_TARGETS := ./pkg/config:FuzzDecodeValidate ./pkg/kubeletserver:FuzzDecodeLogOptions ./pkg/simulation:FuzzContainerLogs
## fuzz: fuzz FUZZ_TARGETS (config decoding and validation; the kubelet API's log options and the simulated
## logs' line arithmetic) for FUZZTIME each; part of `make test`
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$${t#*:}$$" -fuzztime=$(FUZZTIME) "$${t%%:*}"; \
	done

## test-unit: tests outside test/, with the race detector
test-unit:
	$(GO) test $(GOTEST_FLAGS) -race $(UNIT_PKGS)

## test-integration: tests under test/ (integration against real etcd, kube-apiserver, containerd; faults; deploy)
test-integration: tools
	$(GO) test $(GOTEST_FLAGS) -skip '^($(ALONE_TESTS))$$' $(INTEGRATION_PKGS)
	$(GO) test $(GOTEST_FLAGS) -parallel 1 -run '^($(ALONE_TESTS))$$' ./test/integration

vet:
	$(GO) vet ./...

## fmt: gofmt -w every Go file outside _output
fmt:
	gofmt -l -w $$(git ls-files -co --exclude-standard '*.go')

.PHONY: bench
## bench: nodeagent vs the reference kubelet side by side (time to Ready, API load, bytes, RSS/CPU); writes
## BENCHMARKS.md. About 6 min after `make tools` (BENCH_ARGS="--runs 10 --steady 3m" to change the defaults).
bench: tools
	$(GO) run ./test/bench $(BENCH_ARGS)

.PHONY: test-skew
## test-skew: the version-skew smoke suite (TestVersionSkewSmoke: register, Ready, Lease, patch on change
## only, Events, re-registration) against the hack/tools control plane (1.37) and each minor in
## SKEW_VERSIONS (default v1.34, the oldest supported: etcd 3.6, kube-apiserver and kube-controller-manager
## from hack/tools-v1.34, built once into _output/bin/v1.34, about 10 min cold). Not part of make test.
SKEW_VERSIONS ?= v1.34
test-skew: tools
	for v in $(subst $(comma), ,$(SKEW_VERSIONS)); do hack/install-deps.sh --skew $$v || exit 1; done
	NODEAGENT_SKEW_VERSIONS=$(SKEW_VERSIONS) $(GO) test -count=1 -v -run '^TestVersionSkewSmoke$$' ./test/integration/

.PHONY: soak
## soak: fault suite case 11: nodeagent at a 1 s status frequency for SOAK_DURATION (default 30m) against the
## real control plane; logs goroutines and RSS at start, every minute and at the end, fails if they grow or
## if nodeagent logs any error line (SOAK_DURATION=5m for a short run).
SOAK_DURATION ?= 30m
soak: tools
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags soak -count=1 -v -run '^TestSoak$$' -timeout 0 ./test/faults/

.PHONY: bench-sim
## bench-sim: nodeagent simulate at scale against the real control plane (SIMULATE_SCALE_NODES, default 1000;
## e.g. 1000,5000): time to all Ready, heap and stacks per Node, RSS and CPU. Build tag scale; not in make test.
SIMULATE_SCALE_NODES ?= 1000
bench-sim: tools
	SIMULATE_SCALE_NODES=$(SIMULATE_SCALE_NODES) $(GO) test -tags scale -count=1 -v -run '^TestSimulateScale$$' -timeout 0 ./test/integration/

.PHONY: bench-sim-pods
## bench-sim-pods: nodeagent simulate running pods against the real control plane (kube-scheduler and
## kube-controller-manager): SIMULATE_PODS (default 10000) replicas of one Deployment over SIMULATE_PODS_NODES
## (default 100) Nodes: time to Available, heap and RSS per pod, CPU per 1000 pod starts and deletes, time
## until all are gone after a scale to 0. Build tag scale; not in make test.
bench-sim-pods: tools
	SIMULATE_PODS=$(SIMULATE_PODS) SIMULATE_PODS_NODES=$(SIMULATE_PODS_NODES) $(GO) test -tags scale -count=1 -v -run '^TestSimulatePodsScale$$' -timeout 0 ./test/integration/

.PHONY: kwok karpenter bench-scale bench-karpenter
## kwok: build KWOK (sigs.k8s.io/kwok/cmd/kwok, pinned in hack/kwok) into _output/bin/kwok, with its default node Stages
kwok:
	hack/build-kwok.sh

## karpenter: build Karpenter's kwok provider (sigs.k8s.io/karpenter/kwok, pinned in hack/karpenter) into
## _output/bin/karpenter-kwok, with its CRDs in _output/bin/karpenter-crds (make tools builds it for make test)
karpenter:
	hack/build-karpenter.sh

## bench-karpenter: Karpenter's kwok provider scaling a Deployment to BENCH_KARPENTER_PODS (default 3000) pods on
## Nodes it creates, then to 0, with nodeagent simulate and then KWOK v0.8.0 as the backend (TestBenchKarpenter):
## time to all Running and to nothing left, the backend's CPU and RSS, the Lease renew-interval p50/p99 from the
## Deployment's create through BENCH_KARPENTER_STEADY (default 1m) all Running to the scale to 0, and what is left.
## Not part of make test.
BENCH_KARPENTER_PODS ?= 3000
bench-karpenter: tools
	BENCH_KARPENTER_PODS=$(BENCH_KARPENTER_PODS) $(GO) test -tags benchkarpenter -count=1 -v -run '^TestBenchKarpenter$$' -timeout 0 ./test/integration/

## bench-scale: nodeagent simulate vs KWOK, one after the other, each with BENCH_SCALE_NODES Nodes (default 100,1000;
## e.g. 5000) on a fresh control plane with kube-controller-manager, for BENCH_SCALE_DURATION (default 10m) after all
## are Ready: time to Ready, Nodes lost, Lease intervals, CPU and RSS, API requests per Node, control plane CPU.
## Writes the bench-scale section of BENCHMARKS.md. Not part of make test. BENCH_SCALE_SHARDS=K runs nodeagent
## simulate as K shard processes (--shards K --shard-index I) with the same total, in a section of its own.
BENCH_SCALE_NODES ?= 100,1000
BENCH_SCALE_DURATION ?= 10m
BENCH_SCALE_SHARDS ?= 1
bench-scale: tools kwok
	BENCH_SCALE_NODES=$(BENCH_SCALE_NODES) BENCH_SCALE_DURATION=$(BENCH_SCALE_DURATION) BENCH_SCALE_SHARDS=$(BENCH_SCALE_SHARDS) $(GO) run ./test/benchscale $(BENCH_SCALE_ARGS)

.PHONY: bench-pods
## bench-pods: pods on nodeagent simulate's Nodes and on KWOK's (v0.8.0, kwokctl's default pod Stages), one after
## the other, each on fresh control planes with the real kube-scheduler and kube-controller-manager: scenario 1,
## BENCH_PODS_ONE_NODE (10000) pods bound to one Node, until Running and until gone; scenarios 2-4 on
## BENCH_PODS_NODES (1000) Nodes: 100 Deployments of 100 until Available, BENCH_PODS_STEADY (5m) of steady state, a
## Deployment of 1000 rolled, all scaled to 0; and BENCH_PODS_KUBEMARK (20) of kubemark's hollow nodes. CPU, RSS,
## API writes per pod, stuck pods, pod IPs given twice. Writes the bench-pods section of BENCHMARKS.md. Not part
## of make test.
bench-pods: tools kwok
	$(GO) run ./test/benchpods $(BENCH_PODS_ARGS)

.PHONY: bench-metrics
## bench-metrics: resource metrics at scale (issue 37): 1000 Nodes x 10 running pods of nodeagent simulate, then of
## KWOK v0.8.0 with kwokctl's metrics-usage configuration, each on a fresh control plane, scraped by metrics-server
## v0.8.0 every 15 s: the process's CPU and RSS without and with metrics-server, Lease p50/p99, metrics-server's
## scrape latency p50/p99 (its own histogram). Two windows of 3 min per system (BENCH_METRICS_ARGS="--duration 2m",
## as recorded: 12.5 min in all). Writes the bench-metrics section of BENCHMARKS.md. Not part of make test.
bench-metrics: tools kwok
	$(GO) run ./test/benchmetrics $(BENCH_METRICS_ARGS)

.PHONY: e2e-conformance e2e-sig-apps e2e-sig-node
## e2e-conformance: Kubernetes' own conformance specs of SIG (sig-apps, the default, or sig-node;
## k8s.io/kubernetes/test/e2e v1.37.2, built with `go test -c`, and its ginkgo CLI, pinned in hack/e2e, into
## _output/e2e) with E2E_PROCS (4) processes against E2E_NODES (3) simulated Nodes of each system of E2E_SYSTEMS
## (default nodeagent,kwok: nodeagent simulate with its kubelet API, then KWOK v0.8.0 with kwokctl's default
## Stages), each on a fresh local control plane with the real kube-scheduler and kube-controller-manager; prints
## each system's passed/failed, each failure, a table of every spec's state on each system, and the specs KWOK
## passes that nodeagent does not (docs/simulation.md "Kubernetes conformance"). sig-apps:
## `\[sig-apps\].*\[Conformance\]`, [Serial] included, into _output/e2e-sig-apps; sig-node:
## `\[sig-node\].*\[Conformance\]`, [Serial] skipped, into _output/e2e-sig-node. E2E_FOCUS overrides the focus;
## E2E_ARGS passes more (e.g. "--timeout 38m --deadline <RFC 3339>"). Not part of make test.
## e2e-sig-apps: e2e-conformance SIG=sig-apps (nodeagent about 16 minutes on 2 cores, KWOK more than 40).
## e2e-sig-node: e2e-conformance SIG=sig-node E2E_PROCS=8 (102 specs; nodeagent about 23 minutes on 2 cores, KWOK more
## than 30: bound it with E2E_ARGS="--timeout 30m --deadline <RFC 3339>").
SIG ?= sig-apps
E2E_FOCUS ?=
E2E_PROCS ?= 4
E2E_NODES ?= 3
E2E_SYSTEMS ?= nodeagent,kwok
e2e-conformance: tools $(if $(findstring kwok,$(E2E_SYSTEMS)),kwok)
	hack/e2e-conformance.sh --sig $(SIG) --systems $(E2E_SYSTEMS) $(if $(E2E_FOCUS),--focus '$(E2E_FOCUS)') --procs $(E2E_PROCS) --nodes $(E2E_NODES) $(E2E_ARGS)

e2e-sig-apps:
	$(MAKE) e2e-conformance SIG=sig-apps

e2e-sig-node:
	$(MAKE) e2e-conformance SIG=sig-node E2E_PROCS=$(if $(filter command line environment,$(origin E2E_PROCS)),$(E2E_PROCS),8)

.PHONY: npd
## npd: build node-problem-detector v1.36.0 (k8s.io/node-problem-detector, pinned in hack/npd) into
## _output/bin/node-problem-detector, only when missing or hack/npd changed (stamp); the side-by-side NPD
## tests (test/integration/npd_sidebyside_test.go) run it themselves
npd:
	hack/build-npd.sh

.PHONY: dra-test-driver
## dra-test-driver: build the e2e suite's DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver v1.37.2,
## pinned in hack/dra-test-driver) into _output/bin/dra-test-driver, only when missing or hack/dra-test-driver
## changed (stamp); `make tools` builds it too, for TestDRAFidelity (test/integration/dra_fidelity_test.go)
dra-test-driver:
	hack/build-dra-test-driver.sh

.PHONY: bench-companion
## bench-companion: nodeagent --companion, then node-problem-detector v1.36.0 (make npd), each beside the
## reference kubelet of one Node with NPD's shipped configs: idle RSS/CPU and API writes per minute, latency
## from a kernel-log line and from a failing plugin to the condition, a 10 000 lines/s kernel-log flood
## (BENCH_COMPANION_IDLE, default 1m; BENCH_COMPANION_FLOOD, default 30s). About 4 min; prints a Markdown
## table and writes it to _output/bench-companion.md. Build tag benchcompanion; not part of make test.
BENCH_COMPANION_IDLE ?= 1m
BENCH_COMPANION_FLOOD ?= 30s
bench-companion: tools npd
	BENCH_COMPANION_IDLE=$(BENCH_COMPANION_IDLE) BENCH_COMPANION_FLOOD=$(BENCH_COMPANION_FLOOD) \
	BENCH_COMPANION_OUT=$(CURDIR)/_output/bench-companion.md \
	$(GO) test -tags benchcompanion -count=1 -v -run '^TestBenchCompanion$$' -timeout 0 ./test/integration/

.PHONY: helm monitoring
## helm: build helm v3.22.0 (helm.sh/helm/v3/cmd/helm, pinned in hack/helm) into _output/bin/helm, only when
## missing or hack/helm changed (stamp); `make tools` does it too
helm:
	hack/build-helm.sh

## monitoring: write the generated monitoring files from their sources (hack/monitoring): the PrometheusRule
## from deploy/monitoring/nodeagent.rules.yaml, the Grafana dashboard, and the Helm chart's copies of both;
## test/monitoring fails when they are out of date
monitoring:
	$(GO) run ./hack/monitoring
