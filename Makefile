# The TrainJob operator. `make help` lists the targets.
#
# Everything the build needs is built from the Go module proxy into bin/ (see hack/tools.mk):
# a fresh machine needs Go and nothing else.

# The manager's image, for image, docker-build and build-installer.
IMG ?= trainjob-operator:latest

# Keep in step with go.mod: the third-party CRDs that the tests and `make run` install come from
# these modules in the Go module cache.
JOBSET_MODULE ?= sigs.k8s.io/jobset
SCHEDULER_PLUGINS_MODULE ?= sigs.k8s.io/scheduler-plugins

# The Helm chart, beside the kustomize install (config/default).
CHART ?= charts/trainjob-operator

GO ?= go
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRDs, RBAC and webhook configurations from the markers.
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role webhook paths="./internal/..."
	@# The history is a program of its own, with a role of its own.
	$(CONTROLLER_GEN) rbac:roleName=history-role paths=./cmd/history output:rbac:artifacts:config=config/history/rbac
	@# volcano.sh/apis ships no CRDs: generate Volcano's PodGroup CRD for the tests and make run.
	$(CONTROLLER_GEN) crd paths=volcano.sh/apis/pkg/apis/scheduling/v1beta1 output:crd:dir=test/testenv/crds
	@$(MAKE) --no-print-directory chart-files

.PHONY: chart-files
chart-files: kustomize ## Copy into the Helm chart what config/ generates or ships: CRDs, the manager's and the history's RBAC, webhook configurations, runtimes, the SDK's public ConfigMap.
	@# One source of truth: the chart's templates read these copies, never a hand-edited duplicate.
	@# crds/ and files/ hold only copies; make verify and test/helm fail when they are stale.
	@rm -rf $(CHART)/crds $(CHART)/files
	@mkdir -p $(CHART)/crds $(CHART)/files/rbac $(CHART)/files/history $(CHART)/files/webhook $(CHART)/files/runtimes $(CHART)/files/public
	@cp config/crd/bases/*.yaml $(CHART)/crds/
	@cp config/rbac/role.yaml $(CHART)/files/rbac/
	@cp config/history/rbac/role.yaml $(CHART)/files/history/
	@cp config/webhook/manifests.yaml $(CHART)/files/webhook/
	@cd config/runtimes && find . -name '*.yaml' ! -name kustomization.yaml -exec cp --parents {} $(CURDIR)/$(CHART)/files/runtimes/ \;
	@$(KUSTOMIZE) build config/public > $(CHART)/files/public/public.yaml

.PHONY: generate
generate: controller-gen ## Generate the DeepCopy methods of the API types, and the history API's OpenAPI definitions.
	$(CONTROLLER_GEN) object paths="./..."
	$(GO) tool openapi-gen --output-dir internal/history/apis/openapi --output-file zz_generated.openapi.go \
		--output-pkg github.com/trainjob/operator/internal/history/apis/openapi --report-filename /dev/null \
		--output-model-name-file zz_generated.model_name.go --readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 \
		--readonly-pkg k8s.io/apimachinery/pkg/runtime --readonly-pkg k8s.io/apimachinery/pkg/version \
		k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
		github.com/trainjob/operator/internal/history/apis/v1alpha1

.PHONY: fmt
fmt: ## Run go fmt.
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: verify
verify: manifests generate fmt ## Fail when generated or formatted files differ from what is committed.
	@git diff --exit-code --stat -- . || { echo "Generated or formatted files are stale: run 'make manifests generate fmt' and commit the result."; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- api config internal cmd $(CHART))" || { git status --porcelain --untracked-files=all -- api config internal cmd $(CHART); echo "Untracked generated files: commit them."; exit 1; }

.PHONY: test
test: test-monitoring test-integration test-e2e ## Run all the tests: the alerts' and dashboard's checks, unit, integration (envtest) and end-to-end (local cluster), then each fuzz target briefly.
	$(MAKE) fuzz FUZZTIME=$(TEST_FUZZTIME)

# How many inputs `make test` tries on each fuzz target beyond its seeds (a few seconds each here).
TEST_FUZZTIME ?= 5000x

.PHONY: test-integration
test-integration: manifests generate fmt vet localcluster-assets helm realnode-deps ## Run the unit and integration (envtest) tests (hack/localcluster's starts a local cluster; the history's start PostgreSQL).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test $$($(GO) list ./... | grep -v /test/e2e) -count=1

# The alerts and the dashboard (config/prometheus, config/grafana): monitoring-check decodes the
# dashboard with Grafana's schema, parses every query, and refuses a metric docs/metrics.md does not
# list; it writes the PrometheusRule's groups, which promtool checks and runs the unit tests of
# config/prometheus/tests against.
.PHONY: test-monitoring
test-monitoring: monitoring-tools ## Check the Grafana dashboard and the Prometheus alerts, and run the alerts' unit tests (promtool).
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	$(MONITORING_CHECK) -metrics docs/metrics.md -dashboards config/grafana/trainjob-operator.json \
	  -rules config/prometheus/rules.yaml -groups-out "$$dir/rules.yaml" && \
	$(PROMTOOL) check rules "$$dir/rules.yaml" && \
	cp config/prometheus/tests/*.yaml "$$dir/" && cd "$$dir" && $(PROMTOOL) test rules *_test.yaml

# The manager's image as the local cluster's real node loads it (test/e2e/installed, make
# run-installed): a tag other than latest, so that its pods use the image loaded rather than pull
# one, in an archive of its own, so that a release image of make image is left alone.
LOCAL_IMG ?= localcluster.local/trainjob-operator:dev
LOCAL_IMAGE_ARCHIVE = $(IMAGES_DIR)/local-manager.tar
# The release test/e2e/installed upgrades from, in place, to this tree: the commit before HEAD
# unless told, its sources in bin/previous and its image in bin/images/previous-manager.tar.
PREVIOUS ?= HEAD~1
PREVIOUS_IMG = localcluster.local/trainjob-operator:previous

.PHONY: test-e2e
test-e2e: localcluster-assets realnode-assets helm upstream-e2e ## Run the end-to-end tests in a local cluster: JobSet, Jobs, a gang scheduler, fake nodes and a real one; then the operator installed there from its image (kustomize and Helm).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./test/e2e/ -count=1 -timeout 30m $(E2E_ARGS)
	$(MAKE) --no-print-directory image IMG=$(LOCAL_IMG) MANAGER_IMAGE=$(LOCAL_IMAGE_ARCHIVE)
	$(MAKE) --no-print-directory previous-release
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./test/e2e/installed/ -count=1 -timeout 20m $(E2E_ARGS)

.PHONY: upstream-crds
upstream-crds: ## Write upstream Kubeflow Trainer's CRDs at each release of UPSTREAM_TRAINER (v2.2.0 v2.3.0), without their descriptions, into api/v1alpha1/testdata/upstream: the schema test explains each difference from ours (docs/api.md).
	$(foreach release,$(UPSTREAM_TRAINER),GONOSUMDB=github.com/kubeflow $(GO) run ./hack/upstreamcrds -version $(release) -out api/v1alpha1/testdata/upstream/$(release) &&) true

UPSTREAM_TRAINER ?= v2.2.0 v2.3.0

.PHONY: previous-release
previous-release: $(IMAGES_TOOL) ## Write the release test/e2e/installed upgrades from: commit PREVIOUS (HEAD~1) in bin/previous, its image in bin/images/previous-manager.tar.
	GO=$(GO) IMAGES_TOOL=$(IMAGES_TOOL) hack/previous-release.sh "$(PREVIOUS)" "$(LOCALBIN)/previous" "$(PREVIOUS_IMG)" "$(IMAGES_DIR)/previous-manager.tar"

.PHONY: console-screenshots
console-screenshots: localcluster-assets realnode-assets ## Take the web console's screenshots of docs/console.md again (docs/images), from its e2e tests in headless Chromium.
	mkdir -p docs/images
	CONSOLE_SCREENSHOTS=docs/images KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./test/e2e/ -count=1 -timeout 20m -run 'TestTheConsole|TestTheHistoryKeepsRuns'

.PHONY: test-torchrun
test-torchrun: localcluster-assets realnode-assets images-torch ## Run real torchrun (Debian's python3-torch) on the real node: a 2-node gloo all-reduce under the operator's PET_* wiring, and an elastic training scaled from 1 node to 2 while it trains. Not in make test: its image is 1.2 GB.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test -tags torchrun ./test/e2e/ -count=1 -timeout 30m -v -run 'TestRealTorchrun'

.PHONY: test-history-outage
test-history-outage: envtest-assets realnode-deps ## Run the history's outage test at full size, on SQLite and PostgreSQL: 1,000 TrainJobs finish and are deleted while the history is down for 10 minutes; all recorded once, whole (make test-integration runs it with 30 and a second).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./test/integration/history/ -count=1 -timeout 60m -v -run 'TestHistory/.*/nothing_is_lost' -outage-trainjobs=1000 -outage=10m

.PHONY: test-reliability
test-reliability: envtest-assets ## Run the reliability tests at full size: 1,000 TrainJobs through 20 kills of the manager (CI runs them smaller, in test-integration).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./test/reliability/ -count=1 -timeout 60m -v -chaos-trainjobs=1000 -chaos-kills=20 $(RELIABILITY_ARGS)

.PHONY: bench
bench: envtest-assets ## Run the benchmarks: the build pipeline per framework, the history at a million records, the operator against the API server's floor, and the progress endpoint under load (BENCH_ARGS="-trainjobs 10000", "-rate 100", "-restart", "-history").
	$(GO) test ./internal/... -run '^$$' -bench . -benchmem -timeout 60m
	$(GO) build -o $(LOCALBIN)/manager ./cmd
	$(GO) build -o $(LOCALBIN)/history ./cmd/history
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./test/bench/ -run '^$$' -bench . -benchtime 1x -timeout 3h $(BENCH_ARGS)

# How many inputs `make fuzz` tries on each fuzz target (10-40 s each here). A count, not a
# duration: Go 1.26's fuzzer may fail a target when a duration ends while a worker is busy,
# printing "context deadline exceeded" and no failing input (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 50000x

.PHONY: fuzz
fuzz: ## Run each fuzz target on FUZZTIME inputs (go test's coverage-guided fuzzer); `go test` alone runs their seeds.
	$(GO) test ./internal/pipeline -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/pipeline -run '^$$' -fuzz '^FuzzNumProcPerNode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/webhook -run '^$$' -fuzz '^FuzzAdmission$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/framework/mpi -run '^$$' -fuzz '^FuzzHostfile$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/progress -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/controller -run '^$$' -fuzz '^FuzzJSONFrames$$' -fuzztime $(FUZZTIME)

.PHONY: test-unit
test-unit: ## Run the unit tests only, without an API server.
	$(GO) test $$($(GO) list ./... | grep -v /test/) -count=1

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary.
	$(GO) build -o $(LOCALBIN)/manager ./cmd

.PHONY: kubectl-trainjob
kubectl-trainjob: ## Build the kubectl plugin into bin/kubectl-trainjob: copy it onto your PATH and run `kubectl trainjob` (docs/console.md).
	$(GO) build -o $(LOCALBIN)/kubectl-trainjob ./cmd/kubectl-trainjob

.PHONY: plugin-dist
plugin-dist: ## Build the plugin's release archives (Linux, macOS, Windows) and their krew manifest into dist/krew (VERSION=v0.1.0).
	$(GO) run ./hack/krew -version $(or $(VERSION),v0.1.0) -out dist/krew

# make run builds what a TrainJob needs first, starts the cluster on it, and lets Kueue and
# metrics-server join when localcluster's late build ("make -s kueue metrics-server") has built
# them. The manager and localcluster come first: their build downloads the operator's modules.
# A late program already built but out of date (a new version pinned) is built again first.
# LATE_MAKE: with $(MAKE) itself in the recipe, make would run the line even under -n.
LATE_MAKE = $(MAKE)
.PHONY: run
run: run-programs manifests cluster-essential $(wildcard $(CLUSTER_LATE)) $(if $(findstring -real-node,$(CLUSTER_ARGS)),realnode-essential) ## Start a local cluster, install the CRDs and shipped runtimes, run the manager and the history (SQLite) against it (Ctrl-C stops all; CLUSTER_ARGS=-real-node adds a real node). A first run builds what a TrainJob needs first: Kueue and metrics-server join when built.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(LOCALBIN)/localcluster $(CLUSTER_ARGS) -install config/runtimes -late-build "$(LATE_MAKE) -s" \
	  -history $(LOCALBIN)/history -- $(LOCALBIN)/manager --zap-encoder=console --history $(ARGS)

# INSTALL: how make run-installed installs the operator, kustomize (config/default) or helm.
INSTALL ?= kustomize
.PHONY: run-installed
run-installed: run-programs manifests realnode-assets helm ## Start a local cluster with a real node, and install the operator into it from its image (make image), as a platform engineer does: INSTALL=kustomize (config/default) or INSTALL=helm; its pods run on the real node. Ctrl-C stops all.
	$(MAKE) --no-print-directory image IMG=$(LOCAL_IMG) MANAGER_IMAGE=$(LOCAL_IMAGE_ARCHIVE)
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(LOCALBIN)/localcluster -real-node -operator $(INSTALL) $(CLUSTER_ARGS) -install config/runtimes

.PHONY: run-programs
run-programs: buildstep
	@$(call step,manager) $(GO) build -o $(LOCALBIN)/manager ./cmd
	@$(call step,history) $(GO) build -o $(LOCALBIN)/history ./cmd/history
	@$(call step,localcluster) $(GO) build -o $(LOCALBIN)/localcluster ./hack/localcluster

.PHONY: docker-build
docker-build: ## Build the manager image with Docker (make image builds the same without it).
	docker build -t $(IMG) .

.PHONY: build-installer
build-installer: manifests generate kustomize ## Write dist/install.yaml, the operator with image IMG, for kubectl apply --server-side.
	mkdir -p dist
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default > dist/install.yaml

# Last, so that none of its targets becomes the default goal.
include hack/tools.mk

# BUILD_PLAN is what make run builds, for the progress lines' [n/N] (hack/buildstep): the
# programs missing from bin/ when it starts, counted once, then passed on in the environment to
# the makes it runs (chart-files, the late build of Kueue and metrics-server).
ifeq ($(origin BUILD_PLAN),undefined)
RUN_PROGRAMS := $(LOCALBIN)/manager $(LOCALBIN)/localcluster $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION) \
	$(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION) $(CLUSTER_ESSENTIAL) $(CLUSTER_LATE) \
	$(if $(findstring -real-node,$(CLUSTER_ARGS)),$(KUBELET) $(KUBE_PROXY) $(COREDNS))
BUILD_PLAN := $(if $(filter run,$(MAKECMDGOALS)),$(notdir $(filter-out $(wildcard $(RUN_PROGRAMS)),$(RUN_PROGRAMS))))
endif
export BUILD_PLAN
