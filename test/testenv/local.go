package testenv

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// Annotations of a pod that tell the local cluster's fake nodes how the pod's run ends. On a
// TrainJob's spec.annotations they reach every pod; on a runtime's pod template, that job's pods.
const (
	// FailAnnotation makes the pod fail when its run time is over, instead of succeeding: "true"
	// as a program that exits 1 (reason Error), "OOMKilled" as one the kernel killed for memory
	// (exit code 137), "Evicted" as a pod its node evicted for the node's memory pressure.
	FailAnnotation = "localcluster.trainer.kubeflow.org/fail"
	// RunForAnnotation is how long the pod runs, as a Go duration ("30s", "1h"), instead of the
	// cluster's pod run time.
	RunForAnnotation = "localcluster.trainer.kubeflow.org/run-for"
	// StartAfterAnnotation is how long the pod takes to start, as a Go duration, instead of
	// starting at once: its containers run, and it is Ready, only then.
	StartAfterAnnotation = "localcluster.trainer.kubeflow.org/start-after"
)

// NodeLabel marks the local cluster's fake nodes, the ones KWOK runs: type=kwok.
const NodeLabel = "type"

// LocalOptions shape a local cluster.
type LocalOptions struct {
	// Nodes is how many fake nodes the cluster starts with.
	Nodes int
	// NodeCapacity is the capacity of each fake node.
	NodeCapacity corev1.ResourceList
	// PodRunTime is how long a pod of a Job runs, once started, before it succeeds.
	PodRunTime time.Duration
	// RealNode adds one real node beside the fake ones: a kubelet and containerd, whose pods run
	// real processes (see RealNodeName). It needs root and Debian's containerd, runc and CNI
	// plugins (hack/realnode-deps.sh), and the images of `make images`.
	RealNode bool
	// RealNodeImages are more image archives of bin/images for the real node to load, beside
	// the probe, pause and MPI images: "torch.tar" (make images-torch), ManagerImageArchive (the operator's).
	RealNodeImages []string
	// InCluster makes the real node's pods in-cluster clients and Services work as in a real
	// cluster, so that the operator can run there as it is installed: the API server serves on
	// the node's address too, behind the kubernetes Service, with a certificate for it; pods get
	// their ServiceAccount's token (the ServiceAccount admission plugin, which envtest leaves
	// out); and kube-proxy routes Service addresses, for pods and for this machine (the API
	// server reaching a webhook Service). It needs RealNode.
	InCluster bool
	// HPASyncPeriod is how often kube-controller-manager's HorizontalPodAutoscaler controller
	// looks at each HPA (--horizontal-pod-autoscaler-sync-period); zero is its default, 15 s.
	HPASyncPeriod time.Duration
	// HPADownscaleStabilization is how long the HPA controller waits, after the last
	// recommendation of a larger size, before it scales down
	// (--horizontal-pod-autoscaler-downscale-stabilization); zero is its default, 5 minutes. An
	// HPA's spec.behavior overrides it.
	HPADownscaleStabilization time.Duration
	// MetricResolution is how often metrics-server scrapes the nodes' resource metrics
	// (--metric-resolution, at least 10 s); zero is DefaultMetricResolution. See metrics.go.
	MetricResolution time.Duration
	// Late lets the cluster start without the programs of LatePrograms whose binaries are not
	// built yet, as `make run` does while it builds them: Pending names them, and Join starts
	// those built since. Without it, every program must be built (the tests get them all).
	Late bool
}

// DefaultLocalOptions fit every shipped runtime and sample: 4 nodes of 16 CPUs, 64Gi of memory
// and 4 GPUs, and pods that run for 3 seconds. An HPA acts within seconds: it looks every 5 s and
// scales down 15 s after it last wanted more, where a production cluster's defaults (15 s and 5
// minutes) would make a test wait for minutes.
func DefaultLocalOptions() LocalOptions {
	return LocalOptions{
		Nodes:                     4,
		NodeCapacity:              NodeCapacity("16", "64Gi", "4"),
		PodRunTime:                3 * time.Second,
		HPASyncPeriod:             5 * time.Second,
		HPADownscaleStabilization: 15 * time.Second,
		MetricResolution:          DefaultMetricResolution,
	}
}

// NodeCapacity is the capacity of a node with cpu, memory and nvidia.com/gpu, and room for 110
// pods, as a kubelet's default.
func NodeCapacity(cpu, memory, gpu string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		"nvidia.com/gpu":      resource.MustParse(gpu),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// WithLocalCluster makes Start start a whole local cluster around the API server:
//
//   - kube-controller-manager (the Job controller, the garbage collector and the rest a cluster
//     runs, but the node and cloud controllers),
//   - kube-scheduler, the default scheduler, with Kubernetes' own gang scheduling on
//     (GenericWorkload, GangScheduling: scheduling.k8s.io PodGroups),
//   - the scheduler-plugins scheduler with the Coscheduling plugin, and its PodGroup controller,
//   - the JobSet controller, serving its own admission webhooks on loopback,
//   - Kueue, with its CRDs, its TrainJob integration and its webhooks for Kueue's objects and
//     TrainJobs,
//   - KWOK, faking o.Nodes nodes and the lifecycle of their pods: a pod of a Job runs for
//     o.PodRunTime, then succeeds (see FailAnnotation and RunForAnnotation). KWOK also serves the
//     fake nodes' resource metrics: a pod uses what its UsageCPUAnnotation and
//     UsageMemoryAnnotation say. Each fake node's GPUs are also DRA devices (devices.go), which
//     the scheduler allocates to pods' resource claims,
//   - metrics-server, serving metrics.k8s.io (pods' and nodes' CPU and memory) through the API
//     server's aggregator to the HorizontalPodAutoscaler controller and `kubectl top`.
//
// Every program comes from the assets folder (`make localcluster-assets` builds them into bin/)
// and logs to a file in LogDir. Kueue and metrics-server may join later: see LocalOptions.Late.
func WithLocalCluster(o LocalOptions) Option {
	return func(s *settings) {
		s.local = &o
		s.crds = append(s.crds, elasticQuotaCRD)
	}
}

// LateProgram is a program of the local cluster that a TrainJob does not need to run, so that
// `make run` can start the cluster while it is still being built (LocalOptions.Late).
type LateProgram struct {
	// Name is its binary in the assets folder, and make's goal that builds it.
	Name string
	// Title is how the cluster's messages name it.
	Title string
	// Waiting says what waits for it.
	Waiting string
	start   func(*Cluster, LocalOptions) error
}

// LatePrograms may join a local cluster after it started, in this order.
var LatePrograms = []LateProgram{
	{Name: "kueue", Title: "Kueue", start: (*Cluster).startKueue,
		Waiting: "Kueue's objects (ClusterQueue, LocalQueue: docs/kueue.md) and its queueing of TrainJobs labelled " + trainer.KueueQueueLabel},
	{Name: "metrics-server", Title: "metrics-server", start: func(c *Cluster, o LocalOptions) error {
		return c.startMetricsServer(context.Background(), o.MetricResolution)
	}, Waiting: "kubectl top, and the autoscalers of elastic TrainJobs with metrics"},
}

// startLate starts the LatePrograms, but for those whose binaries are not built yet when o.Late
// is set: those are left Pending.
func (c *Cluster) startLate(o LocalOptions) error {
	for _, p := range LatePrograms {
		if o.Late && !c.built(p) {
			c.pending = append(c.pending, p)
			continue
		}
		if err := p.start(c, o); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) built(p LateProgram) bool {
	assets, err := AssetsDir()
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(assets, p.Name))
	return err == nil
}

// Pending returns the programs that have not joined the cluster: not built when it started
// (LocalOptions.Late), and not since joined.
func (c *Cluster) Pending() []LateProgram { return slices.Clone(c.pending) }

// Join starts the Pending programs that are built now, and returns them. A program that fails
// to start is no longer pending: the error says which.
func (c *Cluster) Join() ([]LateProgram, error) {
	var joined []LateProgram
	for _, p := range slices.Clone(c.pending) {
		if !c.built(p) {
			continue
		}
		c.pending = slices.DeleteFunc(c.pending, func(q LateProgram) bool { return q.Name == p.Name })
		if err := p.start(c, *c.settings.local); err != nil {
			return joined, fmt.Errorf("starting %s: %w", p.Title, err)
		}
		joined = append(joined, p)
	}
	return joined, nil
}

// startLocal starts the programs of a local cluster, and its nodes, and waits until they serve.
func (c *Cluster) startLocal(o LocalOptions) error {
	kubeconfig, err := c.Kubeconfig("kube-controller-manager")
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		// Nodes are KWOK's, with no kubelet to report their health, cloud or IP ranges.
		"--controllers=*,-node-lifecycle-controller,-node-ipam-controller,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller",
		"--service-account-private-key-file=" + filepath.Join(c.Env.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"--feature-gates=" + WorkloadFeatureGates, "--leader-elect=false", "--secure-port=0",
		// The defaults suit a cluster of thousands of nodes, not a test's bursts of Jobs.
		"--kube-api-qps=500", "--kube-api-burst=500", "--concurrent-job-syncs=20", "-v=1",
	}
	if o.HPASyncPeriod > 0 {
		args = append(args, "--horizontal-pod-autoscaler-sync-period="+o.HPASyncPeriod.String())
	}
	if o.HPADownscaleStabilization > 0 {
		args = append(args, "--horizontal-pod-autoscaler-downscale-stabilization="+o.HPADownscaleStabilization.String())
	}
	if err := c.run("kube-controller-manager", nil, args...); err != nil {
		return err
	}

	if kubeconfig, err = c.Kubeconfig("scheduler"); err != nil {
		return err
	}
	// A gang that did not fit is tried again on its own pods' and PodGroup's events only, not when
	// nodes join: each scheduler retries it within seconds rather than the default five minutes.
	for _, scheduler := range []struct{ program, config string }{
		{"kube-scheduler", kubeSchedulerConfig(kubeconfig)},
		{"scheduler-plugins-scheduler", schedulerConfig(kubeconfig)},
	} {
		config := filepath.Join(c.Dir, scheduler.program+".yaml")
		if err := os.WriteFile(config, []byte(scheduler.config), 0o600); err != nil {
			return err
		}
		args := []string{"--config=" + config, "--secure-port=0", "-v=1", "--pod-max-in-unschedulable-pods-duration=10s"}
		if scheduler.program == "kube-scheduler" {
			args = append(args, "--feature-gates="+WorkloadFeatureGates)
		}
		if err := c.run(scheduler.program, nil, args...); err != nil {
			return err
		}
	}
	if kubeconfig, err = c.Kubeconfig("podgroup-controller"); err != nil {
		return err
	}
	if err := c.run("scheduler-plugins-controller", []string{"KUBECONFIG=" + kubeconfig},
		"--metricsAddr=0", "--probeAddr=0", "--qps=500", "--burst=500", "--workers=4"); err != nil {
		return err
	}

	if kubeconfig, err = c.Kubeconfig("jobset-controller"); err != nil {
		return err
	}
	if err := c.startJobSet(kubeconfig); err != nil {
		return err
	}

	if kubeconfig, err = c.Kubeconfig("kwok"); err != nil {
		return err
	}
	config := filepath.Join(c.Dir, "kwok.yaml")
	metrics, err := kwokMetricsConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(config, []byte(kwokStages(o.PodRunTime)+"---\n"+metrics), 0o600); err != nil {
		return err
	}
	if c.kwokAddr, err = FreeAddr(); err != nil {
		return err
	}
	if err := c.run("kwok", nil, append([]string{"--kubeconfig=" + kubeconfig, "--config=" + config,
		"--manage-nodes-with-label-selector=" + NodeLabel + "=kwok"}, kwokServerFlags(c.kwokAddr)...)...); err != nil {
		return err
	}
	if err := c.addDeviceClass(context.Background()); err != nil {
		return err
	}
	for i := range o.Nodes {
		if err := c.AddNode(context.Background(), fmt.Sprintf("kwok-node-%d", i), o.NodeCapacity, nil); err != nil {
			return err
		}
	}

	if o.RealNode {
		if err := c.startRealNode(context.Background(), o.RealNodeImages); err != nil {
			return fmt.Errorf("starting the real node: %w", err)
		}
	}

	if err := c.startLate(o); err != nil {
		return err
	}

	// The service-account controller makes every namespace's "default" ServiceAccount: once
	// there, kube-controller-manager works.
	return c.waitFor("kube-controller-manager", func() bool {
		return c.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "default"}, &corev1.ServiceAccount{}) == nil
	})
}

// AddNode adds a fake node of the given capacity and extra labels to a local cluster, and waits
// until it is Ready: KWOK runs its pods. Its GPUs are published as DRA devices (publishGPUs).
func (c *Cluster) AddNode(ctx context.Context, name string, capacity corev1.ResourceList, labels map[string]string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// Where metrics-server finds the node's resource metrics on KWOK's server.
			Annotations: map[string]string{resourceMetricsPathAnnotation: kwokMetricsPath(name)},
			Labels: map[string]string{
				NodeLabel:              "kwok",
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.255.%d.%d", c.nodes/250, c.nodes%250+1)},
				// KWOK's server, which metrics-server scrapes (it prefers ExternalIP): the
				// InternalIP is each node's own and reaches nothing.
				{Type: corev1.NodeExternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kwokPort(c.kwokAddr)}},
		},
	}
	c.nodes++
	maps.Copy(node.Labels, labels)
	if err := c.Client.Create(ctx, node); err != nil {
		return fmt.Errorf("adding node %s: %w", name, err)
	}
	if err := c.publishGPUs(ctx, node); err != nil {
		return err
	}
	return c.waitForNode(ctx, name)
}

// waitForNode waits until a node is Ready, then does what the node lifecycle controller, which
// the local cluster does not run (fake nodes send no heartbeats to judge them by), would: lifts
// the not-ready taint the API server puts on a new node.
func (c *Cluster) waitForNode(ctx context.Context, name string) error {
	node := &corev1.Node{}
	if err := c.waitFor("node "+name+" to be Ready", func() bool {
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return false
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	}); err != nil {
		return err
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	return c.Client.Patch(ctx, node, patch)
}

// kubeSchedulerConfig runs Kubernetes' own scheduler as the cluster's default-scheduler, with its
// gang scheduling (KEP-4671: the GangScheduling plugin, which its feature gate adds to the
// default plugins) for pods that name a scheduling.k8s.io PodGroup.
func kubeSchedulerConfig(kubeconfig string) string {
	return schedulerConfiguration(kubeconfig, `
- schedulerName: default-scheduler
`)
}

// CoschedulingScheduler is the name of the local cluster's scheduler profile with the
// Coscheduling plugin, which binds the pods of a PodGroup all together or not at all. It is the
// name scheduler-plugins' own install gives it; pods name it in spec.schedulerName. Other pods
// get the default-scheduler, Kubernetes' own (kubeSchedulerConfig).
const CoschedulingScheduler = "scheduler-plugins-scheduler"

// schedulerConfig runs the scheduler-plugins scheduler with one profile, CoschedulingScheduler.
func schedulerConfig(kubeconfig string) string {
	return schedulerConfiguration(kubeconfig, `
- schedulerName: `+CoschedulingScheduler+`
  plugins:
    multiPoint:
      enabled:
      - name: Coscheduling
    queueSort:
      enabled:
      - name: Coscheduling
      disabled:
      - name: "*"
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: 10
`)
}

// schedulerConfiguration is a scheduler's configuration file with its profiles: each of the
// local cluster's schedulers runs alone (no leader election), quick to bind a test's bursts.
func schedulerConfiguration(kubeconfig, profiles string) string {
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: ` + kubeconfig + `
  qps: 500
  burst: 500
profiles:` + profiles
}

// kwokStages returns KWOK's configuration: the stages its fake nodes and pods go through. A node
// is Ready at once. A pod bound to a node runs at once (or after its StartAfterAnnotation), and a
// pod of a Job ends after runFor (or its RunForAnnotation, or the seconds its command only sleeps): Failed with exit code 1 when its
// FailAnnotation is "true", else Succeeded. A deleted pod is stopped (Failed, exit code 137, as
// a kubelet that killed it says), then removed once nothing holds it by a finalizer.
func kwokStages(runFor time.Duration) string {
	running := `
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: ["Running"]`
	deleted := `
    - key: .metadata.deletionTimestamp
      operator: Exists
    - key: .status.phase
      operator: In
      values: ["Pending", "Running"]`
	ran := `
  delay:
    durationMilliseconds: $RUN_FOR_MS
    durationFrom:
      expressionFrom: '.metadata.annotations["$RUN_FOR"] // $SLEEP'`
	stages := []string{
		nodeReadyStage,
		podStartStage,
		podEndStage("pod-succeed", running+`
    - key: '.metadata.ownerReferences.[].kind'
      operator: In
      values: ["Job"]
    - key: '.metadata.annotations["$FAIL"]'
      operator: NotIn
      values: ["true", "OOMKilled", "Evicted"]`, ran, "Succeeded", 0, "Completed", ""),
		podEndStage("pod-fail", running+`
    - key: '.metadata.annotations["$FAIL"]'
      operator: In
      values: ["true"]`, ran, "Failed", 1, "Error", ""),
		podEndStage("pod-oom", running+`
    - key: '.metadata.annotations["$FAIL"]'
      operator: In
      values: ["OOMKilled"]`, ran, "Failed", 137, "OOMKilled", ""),
		podEndStage("pod-evicted", running+`
    - key: '.metadata.annotations["$FAIL"]'
      operator: In
      values: ["Evicted"]`, ran, "Failed", 137, "Error", "The node was low on resource: memory."),
		podEndStage("pod-stop", deleted, "", "Failed", 137, "Error", ""),
		podRemoveStage,
	}
	return strings.NewReplacer(
		"$RUN_FOR_MS", strconv.FormatInt(runFor.Milliseconds(), 10),
		"$RUN_FOR", RunForAnnotation,
		"$SLEEP", sleepSeconds,
		"$START_AFTER", StartAfterAnnotation,
		"$FAIL", FailAnnotation,
	).Replace(strings.Join(stages, "---\n"))
}

// sleepSeconds is the run time, as KWOK reads a duration, of a pod whose container's whole command
// is a sleep of whole seconds (`sleep 600`, `/bin/sh -c "sleep 600"`): a real one would run that
// long, and upstream's e2e tests give one a deadline to pass. A jq expression (gojq, as KWOK
// evaluates them); null for any other pod.
const sleepSeconds = `([.spec.containers[] | ((.command // []) + (.args // [])) | join(" ") | ` +
	`capture("^((/bin/)?sh -c )?sleep (?<s>[0-9]+)$") | .s + "s"] | first)`

// podEndStage is a stage that ends the run of the pods that match: after delay, their containers
// terminate with exitCode and reason, and the pod goes to phase. An eviction, the kubelet's doing
// rather than the containers', gives the pod the reason Evicted and its message, and the
// DisruptionTarget condition the kubelet adds (reason TerminationByKubelet), which a Job's pod
// failure policy reads.
func podEndStage(name, match, delay, phase string, exitCode int, reason, eviction string) string {
	podReason, disruption := "", ""
	if eviction != "" {
		podReason = "reason: Evicted\n      message: " + strconv.Quote(eviction) + "\n      "
		disruption = `
      - lastProbeTime: null
        lastTransitionTime: {{ $now | Quote }}
        reason: TerminationByKubelet
        message: ` + strconv.Quote(eviction) + `
        status: "True"
        type: DisruptionTarget`
	}
	return strings.NewReplacer("$NAME", name, "$MATCH", match, "$DELAY", delay, "$PHASE", phase, "$DISRUPTION", disruption,
		"$EXIT_CODE", strconv.Itoa(exitCode), "$REASON", reason, "$POD_REASON", podReason,
		"$MESSAGE", strconv.Quote("kwok: "+name+" after its run time")).Replace(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: $NAME
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:$MATCH$DELAY
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range list "Ready" "ContainersReady" }}
      - lastProbeTime: null
        lastTransitionTime: {{ $now | Quote }}
        reason: Pod$PHASE
        status: "False"
        type: {{ . }}
      {{ end }}$DISRUPTION
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: $EXIT_CODE
            reason: $REASON
            message: $MESSAGE
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
      {{ end }}
      $POD_REASONphase: $PHASE
`)
}

const nodeReadyStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: fake
        containerRuntimeVersion: fake
        kernelVersion: fake
        osImage: kwok
      phase: Running
`

const podStartStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-start
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.podIP
      operator: DoesNotExist
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["$START_AFTER"]'
  next:
    event:
      type: Normal
      reason: Started
      message: Started the pod's containers (KWOK)
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range list "PodReadyToStartContainers" "Initialized" "Ready" "ContainersReady" }}
      - lastProbeTime: null
        lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: {{ . }}
      {{ end }}
      {{ with .spec.initContainers }}
      initContainerStatuses:
      {{ range . }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
      {{ end }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
      phase: Running
      startTime: {{ $now | Quote }}
`

const podRemoveStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-remove
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
    - key: .status.phase
      operator: In
      values: ["Succeeded", "Failed"]
    - key: .metadata.finalizers
      operator: DoesNotExist
  next:
    delete: true
`
