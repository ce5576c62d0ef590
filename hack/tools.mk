# hack/tools.mk: pinned developer tools, built from the Go module proxy alone.
# Included by the main Makefile; also usable alone: make -f hack/tools.mk envtest-assets
#
# Why not setup-envtest: it downloads release tarballs, which this environment
# (and a fresh dev/CI machine without internet beyond the Go proxy) cannot do.
# So etcd, kube-apiserver and kubectl are compiled from source via small
# build-only Go modules under hack/tools/<mod>/ with committed go.mod/go.sum.
# Each is built with that module's own go.mod (GOWORK=off, so a go.work at the
# repo root can never leak in) and CGO_ENABLED=0, like upstream release
# builds: static binaries, identical whether or not a C compiler is present.
# Rebuilds happen only when a binary is missing or its module's go.mod/go.sum
# is newer; the outputs are reproducible.
#
# Each program is built through hack/buildstep: one line per program with its time
# ("[3/14] kube-apiserver  built in 2m41s"), the go command's output (module downloads)
# in bin/build-logs/, and on failure the failing command and the log's tail.
# [n/N] counts BUILD_PLAN, the files a goal builds (see the Makefile's make run).


## Versions. K8S_VERSION and ETCD_VERSION must match hack/tools/{k8s,etcd}/go.mod
## (checked at build time); bump them together.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.2
K8S_VERSION ?= v1.36.3
ETCD_VERSION ?= v3.6.16
KWOK_VERSION ?= v0.8.0
## JOBSET_VERSION and SCHEDULER_PLUGINS_VERSION must match go.mod and hack/tools/<mod>/go.mod:
## the local cluster runs the controllers whose CRDs and Go types the operator is built with.
JOBSET_VERSION ?= v0.12.0
SCHEDULER_PLUGINS_VERSION ?= v0.34.7
KUEUE_VERSION ?= v0.17.0
METRICS_SERVER_VERSION ?= v0.8.0
## Upstream Kubeflow Trainer's release whose own e2e suite test/e2e runs (hack/tools/upstream-e2e).
UPSTREAM_E2E_VERSION ?= v2.3.0
HELM_VERSION ?= v3.22.0
## The Kubernetes version helm assumes when it renders without a cluster (`helm template`,
## .Capabilities.KubeVersion): its client-go's, v0.37 for helm v3.22, as its own release build stamps.
HELM_KUBE_VERSION ?= v1.37
## promtool's Prometheus, as its Go module is tagged (v0.3XX.Y for Prometheus 3.XX.Y; promtool
## --version prints it so); must match hack/tools/monitoring/go.mod.
PROMETHEUS_VERSION ?= v0.316.0

## Locations.
GO ?= go
HACK_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
TOOLS_MOD_DIR := $(HACK_DIR)/tools
LOCALBIN ?= $(CURDIR)/bin
BUILDSTEP ?= $(LOCALBIN)/buildstep
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
HELM ?= $(LOCALBIN)/helm
ETCD ?= $(LOCALBIN)/etcd
KUBE_APISERVER ?= $(LOCALBIN)/kube-apiserver
KUBECTL ?= $(LOCALBIN)/kubectl
KUBE_CONTROLLER_MANAGER ?= $(LOCALBIN)/kube-controller-manager
KUBE_SCHEDULER ?= $(LOCALBIN)/kube-scheduler
KUBE_PROXY ?= $(LOCALBIN)/kube-proxy
JOBSET_CONTROLLER ?= $(LOCALBIN)/jobset-controller
SCHEDULER_PLUGINS_SCHEDULER ?= $(LOCALBIN)/scheduler-plugins-scheduler
SCHEDULER_PLUGINS_CONTROLLER ?= $(LOCALBIN)/scheduler-plugins-controller
KWOK ?= $(LOCALBIN)/kwok
KUBELET ?= $(LOCALBIN)/kubelet
COREDNS ?= $(LOCALBIN)/coredns
IMAGES_TOOL ?= $(LOCALBIN)/image-archive
IMAGES_DIR ?= $(LOCALBIN)/images
KUEUE ?= $(LOCALBIN)/kueue
METRICS_SERVER ?= $(LOCALBIN)/metrics-server
PROMTOOL ?= $(LOCALBIN)/promtool
MONITORING_CHECK ?= $(LOCALBIN)/monitoring-check
UPSTREAM_E2E ?= $(LOCALBIN)/upstream-e2e.test
# Folder for KUBEBUILDER_ASSETS: etcd, kube-apiserver and kubectl side by side.
ENVTEST_ASSETS ?= $(LOCALBIN)

$(LOCALBIN):
	@mkdir -p $@

## The local cluster's programs: those a TrainJob needs to run, in the order make run builds
## them, and those that may join the running cluster when built (localcluster -late-build).
CLUSTER_ESSENTIAL := $(ETCD) $(KUBE_APISERVER) $(KUBECTL) $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(JOBSET_CONTROLLER) $(KWOK) \
	$(SCHEDULER_PLUGINS_SCHEDULER) $(SCHEDULER_PLUGINS_CONTROLLER)
CLUSTER_LATE := $(KUEUE) $(METRICS_SERVER)

## buildstep uses the standard library only: it builds before any module is downloaded. Built
## as the programs are (CGO_ENABLED=0, -trimpath), so that they reuse its standard library.
$(BUILDSTEP): $(HACK_DIR)/buildstep/main.go | $(LOCALBIN)
	@cd $(HACK_DIR)/.. && CGO_ENABLED=0 $(GO) build -trimpath -o $@ ./hack/buildstep

# step: the command that follows runs through buildstep, building $(1), files of bin/.
step = $(BUILDSTEP) -bin $(LOCALBIN) $(1) --

##@ Tools (built into bin/ from the Go module proxy; skipped when up to date)

.PHONY: controller-gen kustomize helm etcd kube-apiserver kubectl kube-controller-manager envtest-assets localcluster-assets
.PHONY: jobset-controller scheduler-plugins kwok kueue metrics-server monitoring-tools upstream-e2e buildstep cluster-essential
buildstep: $(BUILDSTEP) ## Build hack/buildstep, which builds each program with one line of progress.
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen.
kustomize: $(KUSTOMIZE) ## Build kustomize.
helm: $(HELM) ## Build helm (the chart's checks and e2e install).
etcd: $(ETCD) ## Build etcd.
kube-apiserver: $(KUBE_APISERVER) ## Build kube-apiserver.
kubectl: $(KUBECTL) ## Build kubectl.
kube-controller-manager: $(KUBE_CONTROLLER_MANAGER) ## Build kube-controller-manager (local cluster).
jobset-controller: $(JOBSET_CONTROLLER) ## Build the JobSet controller (local cluster).
scheduler-plugins: $(SCHEDULER_PLUGINS_SCHEDULER) $(SCHEDULER_PLUGINS_CONTROLLER) ## Build the scheduler-plugins scheduler and controller (local cluster).
kwok: $(KWOK) ## Build KWOK (local cluster).
kueue: $(KUEUE) ## Build Kueue (local cluster).
upstream-e2e: $(UPSTREAM_E2E) ## Build upstream Kubeflow Trainer's own e2e suite (UPSTREAM_E2E_VERSION), which make test-e2e runs in the local cluster.
metrics-server: $(METRICS_SERVER) ## Build metrics-server (local cluster: metrics.k8s.io for the HPA and kubectl top).
monitoring-tools: $(PROMTOOL) $(MONITORING_CHECK) ## Build promtool and monitoring-check (make test-monitoring).
envtest-assets: $(ETCD) $(KUBE_APISERVER) $(KUBECTL) ## Build etcd, kube-apiserver and kubectl for KUBEBUILDER_ASSETS.
cluster-essential: $(CLUSTER_ESSENTIAL) ## Build the programs of the local cluster that a TrainJob needs (make run builds the rest later).
localcluster-assets: cluster-essential $(CLUSTER_LATE) ## Build every program of the local cluster (make run, make test-e2e).
kubelet: $(KUBELET) ## Build kubelet (the local cluster's real node).
kube-proxy: $(KUBE_PROXY) ## Build kube-proxy (the local cluster's real node: Service addresses).
coredns: $(COREDNS) ## Build CoreDNS (the local cluster's DNS with a real node).
realnode-essential: realnode-deps $(KUBELET) $(KUBE_PROXY) $(COREDNS) images ## Install and build what the local cluster's real node needs (make run CLUSTER_ARGS=-real-node: Kueue and metrics-server join later).
realnode-assets: localcluster-assets realnode-essential ## Every program of the local cluster and its real node (make test-e2e, make run-installed).
.PHONY: kubelet kube-proxy coredns realnode-essential realnode-assets realnode-deps images

## The real node's programs from Debian's packages: containerd, runc, the CNI plugins.
realnode-deps: ## Install containerd, runc, the CNI plugins, the console tests' headless Chromium and the history tests' PostgreSQL from Debian's packages when missing (needs root).
	hack/realnode-deps.sh

## controller-gen, kustomize and helm: plain `go install pkg@version` (their go.mod
## has no local replaces). Installed as <tool>-<version> plus a symlink
## <tool> -> <tool>-<version>; other versions are deleted first, so a version
## change in either direction (bump or branch switch) reinstalls.
# go-install-tool: $(1) versioned target file, $(2) tool name, $(3) package@version
define go-install-tool
	@rm -f $(LOCALBIN)/$(2) $(LOCALBIN)/$(2)-v*
	@GOWORK=off GOBIN=$(LOCALBIN) $(call step,$(notdir $(1))) $(GO) install -trimpath $(3)
	@mv $(LOCALBIN)/$(2) $(1)
endef

$(CONTROLLER_GEN): $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
	@ln -sf $(notdir $<) $@
$(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION): | $(LOCALBIN) $(BUILDSTEP)
	$(call go-install-tool,$@,controller-gen,sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION))

$(KUSTOMIZE): $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
	@ln -sf $(notdir $<) $@
$(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION): | $(LOCALBIN) $(BUILDSTEP)
	$(call go-install-tool,$@,kustomize,sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION))

## helm's go.mod has no replace directives either. Stamped as its release build is: its own
## version (else `helm version` says v3.22) and its client-go's Kubernetes version (else
## `helm template` assumes Kubernetes 1.20).
HELM_KUBE_SEMVER := $(subst ., ,$(patsubst v%,%,$(HELM_KUBE_VERSION)))
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules,\
	-X $(p).k8sVersionMajor=$(word 1,$(HELM_KUBE_SEMVER)) -X $(p).k8sVersionMinor=$(word 2,$(HELM_KUBE_SEMVER)))
$(HELM): $(LOCALBIN)/helm-$(HELM_VERSION)
	@ln -sf $(notdir $<) $@
$(LOCALBIN)/helm-$(HELM_VERSION): | $(LOCALBIN) $(BUILDSTEP)
	$(call go-install-tool,$@,helm,-ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION))

## Build-only modules. `go install` cannot build etcd or k8s.io/kubernetes:
## their go.mod files use replace directives pointing at local folders.
# check-mod-version: $(1) module dir, $(2) module path, $(3) expected version
# (The go command's output, module downloads included, is kept for the message.)
define check-mod-version
	@v=$$(cd $(1) && GOWORK=off $(GO) list -m -f '{{.Version}}' $(2) 2>&1) && [ "$$v" = "$(3)" ] || \
	  { echo "$(1)/go.mod pins $(2) $$v, but tools.mk expects $(3)" >&2; exit 1; }
endef

ETCD_MOD := $(TOOLS_MOD_DIR)/etcd
$(ETCD): $(ETCD_MOD)/go.mod $(ETCD_MOD)/go.sum | $(LOCALBIN) $(BUILDSTEP)
	$(call check-mod-version,$(ETCD_MOD),go.etcd.io/etcd/server/v3,$(ETCD_VERSION))
	@cd $(ETCD_MOD) && GOWORK=off CGO_ENABLED=0 $(call step,etcd) $(GO) build -trimpath -o $(abspath $@) go.etcd.io/etcd/server/v3

## hack/tools/k8s/go.mod requires k8s.io/kubernetes and replaces each of its
## ./staging/... modules with the published k8s.io/<staging> v0.X.Y release.
## The version must be stamped via -ldflags: an unset/malformed version makes
## kube-apiserver panic at start (envtest then only reports a failed flag check).
## JobSet's controller (its module root, which `go install` refuses) and KWOK build
## from the same module, so the Kubernetes libraries they share compile once.
K8S_MOD := $(TOOLS_MOD_DIR)/k8s
K8S_SEMVER := $(subst ., ,$(patsubst v%,%,$(K8S_VERSION)))
K8S_LDFLAGS := -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(p).gitVersion=$(K8S_VERSION) -X $(p).gitMajor=$(word 1,$(K8S_SEMVER)) -X $(p).gitMinor=$(word 2,$(K8S_SEMVER)))

## Programs that build in one `go build` link one while it compiles the next. Building modules
## side by side (make -j2) was measured slower on 2 cores. A program is moved into bin/ whole,
## so that a cluster waiting for it (localcluster -late-build) never runs half a file.
# go-build-programs: $(1) module dir, $(2) -ldflags, $(3) list of <file in bin/>=<package>, $(4) more build flags
define go-build-programs
	@rm -rf $(LOCALBIN)/.build-$(firstword $(subst =, ,$(3)))
	@cd $(1) && GOWORK=off CGO_ENABLED=0 $(call step,$(foreach p,$(3),$(firstword $(subst =, ,$(p))))) \
	  $(GO) build -trimpath $(4) -ldflags '$(2)' -o $(LOCALBIN)/.build-$(firstword $(subst =, ,$(3)))/ \
	  $(foreach p,$(3),$(lastword $(subst =, ,$(p))))
	@$(foreach p,$(3),mv $(LOCALBIN)/.build-$(firstword $(subst =, ,$(3)))/$(notdir $(lastword $(subst =, ,$(p)))) $(LOCALBIN)/$(firstword $(subst =, ,$(p)));)
	@rm -rf $(LOCALBIN)/.build-$(firstword $(subst =, ,$(3)))
endef

## One `go build` each, so that each program's line comes when it is built, and kubelet only
## with the real node: the libraries they share compile once all the same (the build cache).
K8S_PACKAGE_kube-apiserver := k8s.io/kubernetes/cmd/kube-apiserver
K8S_PACKAGE_kubectl := k8s.io/kubernetes/cmd/kubectl
K8S_PACKAGE_kube-controller-manager := k8s.io/kubernetes/cmd/kube-controller-manager
K8S_PACKAGE_kube-scheduler := k8s.io/kubernetes/cmd/kube-scheduler
K8S_PACKAGE_kubelet := k8s.io/kubernetes/cmd/kubelet
K8S_PACKAGE_kube-proxy := k8s.io/kubernetes/cmd/kube-proxy
K8S_PACKAGE_jobset-controller := sigs.k8s.io/jobset
K8S_PACKAGE_kwok := sigs.k8s.io/kwok/cmd/kwok
$(KUBE_APISERVER) $(KUBECTL) $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(JOBSET_CONTROLLER) $(KWOK) $(KUBELET) $(KUBE_PROXY): $(LOCALBIN)/%: $(K8S_MOD)/go.mod $(K8S_MOD)/go.sum | $(LOCALBIN) $(BUILDSTEP)
	$(call check-mod-version,$(K8S_MOD),k8s.io/kubernetes,$(K8S_VERSION))
	$(call check-mod-version,$(K8S_MOD),sigs.k8s.io/jobset,$(JOBSET_VERSION))
	$(call check-mod-version,$(K8S_MOD),sigs.k8s.io/kwok,$(KWOK_VERSION))
	$(call go-build-programs,$(K8S_MOD),$(K8S_LDFLAGS),$*=$(K8S_PACKAGE_$*))

## scheduler-plugins replaces every Kubernetes staging module at 1.34 (its own replace block).
SCHEDULER_PLUGINS_MOD := $(TOOLS_MOD_DIR)/scheduler-plugins
$(SCHEDULER_PLUGINS_SCHEDULER) $(SCHEDULER_PLUGINS_CONTROLLER) &: $(SCHEDULER_PLUGINS_MOD)/go.mod $(SCHEDULER_PLUGINS_MOD)/go.sum | $(LOCALBIN) $(BUILDSTEP)
	$(call check-mod-version,$(SCHEDULER_PLUGINS_MOD),sigs.k8s.io/scheduler-plugins,$(SCHEDULER_PLUGINS_VERSION))
	$(call go-build-programs,$(SCHEDULER_PLUGINS_MOD),-s -w,\
	  scheduler-plugins-scheduler=sigs.k8s.io/scheduler-plugins/cmd/scheduler \
	  scheduler-plugins-controller=sigs.k8s.io/scheduler-plugins/cmd/controller)

## Kueue needs Kubernetes 1.35 (see its go.mod). The checksum database has no entry for
## Kueue nor for the Trainer module it requires; go.sum holds their hashes.
KUEUE_MOD := $(TOOLS_MOD_DIR)/kueue
$(KUEUE): export GONOSUMDB = sigs.k8s.io/kueue,github.com/kubeflow
$(KUEUE): $(KUEUE_MOD)/go.mod $(KUEUE_MOD)/go.sum | $(LOCALBIN) $(BUILDSTEP)
	$(call check-mod-version,$(KUEUE_MOD),sigs.k8s.io/kueue,$(KUEUE_VERSION))
	$(call go-build-programs,$(KUEUE_MOD),-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$(KUEUE_VERSION),kueue=sigs.k8s.io/kueue/cmd/kueue)

## Upstream Trainer's e2e suite, its test/e2e package compiled unmodified (go test -c) into a test
## binary that test/e2e runs against the local cluster. The checksum database has no entry for
## the Trainer module; go.sum holds its hashes.
UPSTREAM_E2E_MOD := $(TOOLS_MOD_DIR)/upstream-e2e
$(UPSTREAM_E2E): export GONOSUMDB = github.com/kubeflow
$(UPSTREAM_E2E): $(UPSTREAM_E2E_MOD)/go.mod $(UPSTREAM_E2E_MOD)/go.sum | $(LOCALBIN) $(BUILDSTEP)
	$(call check-mod-version,$(UPSTREAM_E2E_MOD),github.com/kubeflow/trainer/v2,$(UPSTREAM_E2E_VERSION))
	@cd $(UPSTREAM_E2E_MOD) && GOWORK=off CGO_ENABLED=0 $(call step,upstream-e2e.test) \
	  $(GO) test -c -trimpath -o $(abspath $@).tmp github.com/kubeflow/trainer/v2/test/e2e
	@mv $@.tmp $@

## metrics-server needs Kubernetes 1.33 (k8s.io/* v0.33.2 in its go.mod, no replace directives).
## Stamped as its own release build is: client-go's version is metrics-server's.
METRICS_SERVER_MOD := $(TOOLS_MOD_DIR)/metrics-server
$(METRICS_SERVER): $(METRICS_SERVER_MOD)/go.mod $(METRICS_SERVER_MOD)/go.sum | $(LOCALBIN) $(BUILDSTEP)
	$(call check-mod-version,$(METRICS_SERVER_MOD),sigs.k8s.io/metrics-server,$(METRICS_SERVER_VERSION))
	$(call go-build-programs,$(METRICS_SERVER_MOD),-s -w -X k8s.io/client-go/pkg/version.gitVersion=$(METRICS_SERVER_VERSION),\
	  metrics-server=sigs.k8s.io/metrics-server/cmd/metrics-server)

## promtool, and monitoring-check (hack/tools/monitoring/main.go: the dashboard against Grafana's
## schema, the PromQL of the dashboard and the alerts, their metric names against docs/metrics.md).
## remove_all_sd leaves out promtool's service-discovery plugins (AWS, Azure, GCE, ...), which
## checking and testing rules never use: half its size and build time.
MONITORING_MOD := $(TOOLS_MOD_DIR)/monitoring
$(PROMTOOL) $(MONITORING_CHECK) &: $(MONITORING_MOD)/go.mod $(MONITORING_MOD)/go.sum $(MONITORING_MOD)/main.go | $(LOCALBIN) $(BUILDSTEP)
	$(call check-mod-version,$(MONITORING_MOD),github.com/prometheus/prometheus,$(PROMETHEUS_VERSION))
	$(call go-build-programs,$(MONITORING_MOD),-s -w -X github.com/prometheus/common/version.Version=$(PROMETHEUS_VERSION:v%=%),\
	  promtool=github.com/prometheus/prometheus/cmd/promtool \
	  monitoring-check=github.com/trainjob/operator/hack/tools/monitoring,-tags remove_all_sd)

## CoreDNS with the plugins the real node's pods need (hack/tools/coredns/main.go).
COREDNS_MOD := $(TOOLS_MOD_DIR)/coredns
$(COREDNS): $(COREDNS_MOD)/go.mod $(COREDNS_MOD)/go.sum $(COREDNS_MOD)/main.go | $(LOCALBIN) $(BUILDSTEP)
	@cd $(COREDNS_MOD) && GOWORK=off CGO_ENABLED=0 $(call step,coredns) $(GO) build -trimpath -ldflags '-s -w' -o $(abspath $@) .

## The real node's images, written as archives containerd imports (no registry): the probe
## (test/images/probe, static) with busybox's shell and tools, and the pod sandbox, the probe
## pausing. hack/tools/images writes them with go-containerregistry.
IMAGES_MOD := $(TOOLS_MOD_DIR)/images
$(IMAGES_TOOL): $(IMAGES_MOD)/go.mod $(IMAGES_MOD)/go.sum $(IMAGES_MOD)/main.go | $(LOCALBIN) $(BUILDSTEP)
	@cd $(IMAGES_MOD) && GOWORK=off CGO_ENABLED=0 $(call step,image-archive) $(GO) build -trimpath -o $(abspath $@) .

PROBE_SOURCES := $(wildcard test/images/probe/*.go)
images: $(IMAGES_DIR)/probe.tar $(IMAGES_DIR)/pause.tar $(IMAGES_DIR)/mpi.tar ## Write the real node's images into bin/images.
$(IMAGES_DIR)/probe.tar $(IMAGES_DIR)/pause.tar &: $(IMAGES_TOOL) $(PROBE_SOURCES) | $(LOCALBIN)
	@test -x /usr/bin/busybox || { echo "busybox is missing: run hack/realnode-deps.sh"; exit 1; }
	rm -rf $(IMAGES_DIR)/rootfs && mkdir -p $(IMAGES_DIR)/rootfs/bin $(IMAGES_DIR)/rootfs/etc $(IMAGES_DIR)/rootfs/tmp
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(IMAGES_DIR)/rootfs/probe ./test/images/probe
	cp /usr/bin/busybox $(IMAGES_DIR)/rootfs/bin/busybox
	for tool in sh ls cat hostname nslookup ping wget sleep env ps; do ln -sf busybox $(IMAGES_DIR)/rootfs/bin/$$tool; done
	$(IMAGES_TOOL) -rootfs $(IMAGES_DIR)/rootfs -tag localcluster.local/probe:v1 -o $(IMAGES_DIR)/probe.tar
	$(IMAGES_TOOL) -rootfs $(IMAGES_DIR)/rootfs -tag localcluster.local/pause:v1 -entrypoint /probe,pause -o $(IMAGES_DIR)/pause.tar
	rm -rf $(IMAGES_DIR)/rootfs

## The manager's image, built without Docker (make image): hack/images/manager-rootfs.sh lays
## out the files the Dockerfile's distroless base has and the binary hack/manager-build.sh builds
## (the Dockerfile runs the same script), image-archive writes it as an archive that
## `ctr images import` and `docker load` take, tagged IMG. Always rebuilt: the go build is quick
## when nothing changed, and the tag may differ from the last run's.
MANAGER_IMAGE ?= $(IMAGES_DIR)/manager.tar
.PHONY: image
image: $(IMAGES_TOOL) | $(LOCALBIN) ## Build the manager's image without Docker into bin/images/manager.tar, tagged IMG (ctr images import, docker load).
	GO=$(GO) hack/images/manager-rootfs.sh $(IMAGES_DIR)/manager-rootfs
	$(IMAGES_TOOL) -rootfs $(IMAGES_DIR)/manager-rootfs -tag $(IMG) -entrypoint /manager -user 65532:65532 -workdir / \
	  -arch $$($(GO) env GOARCH) -o $(MANAGER_IMAGE)
	rm -rf $(IMAGES_DIR)/manager-rootfs

## The MPI image: Debian with OpenSSH, Open MPI and Python 3, as mpi-operator's images are set up
## (hack/images/mpi-rootfs.sh, with debootstrap from Debian's mirror; about 2 minutes).
$(IMAGES_DIR)/mpi.tar: $(IMAGES_TOOL) hack/images/mpi-rootfs.sh | $(LOCALBIN)
	mkdir -p $(IMAGES_DIR)
	hack/images/mpi-rootfs.sh $(IMAGES_DIR)/mpi-rootfs
	$(IMAGES_TOOL) -rootfs $(IMAGES_DIR)/mpi-rootfs -tag localcluster.local/mpi:v1 -o $@
	rm -rf $(IMAGES_DIR)/mpi-rootfs

## The PyTorch image of `make test-torchrun`: Debian's python3-torch (1.13, CPU) and a gloo
## all-reduce (hack/images/torch-rootfs.sh). About 1.2 GB and 4 minutes of debootstrap: not
## part of `images`, nor of CI.
.PHONY: images-torch
images-torch: $(IMAGES_DIR)/torch.tar ## Write the real node's PyTorch image (large) into bin/images.
$(IMAGES_DIR)/torch.tar: $(IMAGES_TOOL) hack/images/torch-rootfs.sh | $(LOCALBIN)
	mkdir -p $(IMAGES_DIR)
	hack/images/torch-rootfs.sh $(IMAGES_DIR)/torch-rootfs
	$(IMAGES_TOOL) -rootfs $(IMAGES_DIR)/torch-rootfs -tag localcluster.local/torch:v1 -o $@
	rm -rf $(IMAGES_DIR)/torch-rootfs
