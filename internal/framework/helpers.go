package framework

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/upsert"
)

// completionIndexAnnotation holds a pod's index in an Indexed Job: its rank.
const completionIndexAnnotation = "batch.kubernetes.io/job-completion-index"

// PodAddress is the DNS name of a pod of the JobSet, through the JobSet's headless Service:
// <tj>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>, where the subdomain is the runtime's
// spec.network.subdomain when set, else the JobSet's name, as JobSet names its Service.
func (b *Draft) PodAddress(job string, jobIndex, podIndex int) string {
	return fmt.Sprintf("%s.%s", b.PodHostname(job, jobIndex, podIndex), b.Subdomain())
}

// PodHostname is the host name of a pod of the JobSet, the first label of its PodAddress:
// <tj>-<replicatedJob>-<jobIndex>-<podIndex>, as JobSet names the pods' hosts.
func (b *Draft) PodHostname(job string, jobIndex, podIndex int) string {
	return fmt.Sprintf("%s-%s-%d-%d", b.TrainJob.Name, job, jobIndex, podIndex)
}

// Subdomain is the subdomain of the JobSet's pods: the runtime's spec.network.subdomain when
// set, else the JobSet's name, as JobSet names its headless Service.
func (b *Draft) Subdomain() string {
	if n := b.JobSet.Spec.Network; n != nil && n.Subdomain != "" {
		return n.Subdomain
	}
	return b.TrainJob.Name
}

// SetEnv puts env vars into the trainer container, replacing vars of the same names.
func (b *Draft) SetEnv(vars ...corev1.EnvVar) {
	b.SetEnvIn(b.Trainer(), vars...)
}

// SetEnvIn puts env vars into a container, replacing vars of the same names.
func (b *Draft) SetEnvIn(r ContainerRef, vars ...corev1.EnvVar) {
	c := b.Container(r)
	c.Env = upsert.Env(c.Env, vars...)
}

// SetDefaultEnv sets the env vars of the trainer container that neither the runtime nor the
// TrainJob set: defaults they may change.
func (b *Draft) SetDefaultEnv(vars ...corev1.EnvVar) {
	c := b.TrainerContainer()
	for _, v := range vars {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v.Name }) {
			c.Env = append(c.Env, v)
		}
	}
}

// SetRankEnv makes the trainer job Indexed and sets an env var of the trainer container to each
// pod's index in it, 0 to numNodes-1.
func (b *Draft) SetRankEnv(name string) {
	b.SetEnv(b.RankEnv(name))
}

// RankEnv makes the trainer job Indexed and returns an env var whose value is, in each pod, the
// pod's index in its Job: in the trainer job's pods, their rank, 0 to numNodes-1.
func (b *Draft) RankEnv(name string) corev1.EnvVar {
	b.TrainerJob().Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: fmt.Sprintf("metadata.annotations['%s']", completionIndexAnnotation)},
	}}
}

// SetPort puts a named TCP port into the trainer container's ports, in place of one of the same
// name or number that the runtime declares.
func (b *Draft) SetPort(name string, port int32) {
	c := b.TrainerContainer()
	c.Ports = upsert.Port(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP})
}

// SetNodes sets the number of pods of the trainer job.
func (b *Draft) SetNodes(n int32) {
	spec := &b.TrainerJob().Template.Spec
	spec.Parallelism, spec.Completions = ptr.To(n), ptr.To(n)
}

// GPUs is the number of GPUs a container has: the sum of its limits (else requests) of every
// resource whose name ends in "gpu", such as nvidia.com/gpu or amd.com/gpu.
func GPUs(c *corev1.Container) int64 { return GPUsOf(&c.Resources) }

// GPUsOf is the number of GPUs of resources, counted as GPUs counts a container's.
func GPUsOf(r *corev1.ResourceRequirements) int64 {
	resources := r.Limits
	if len(resources) == 0 {
		resources = r.Requests
	}
	var n int64
	for name, q := range resources {
		if strings.HasSuffix(string(name), "gpu") {
			n += q.Value()
		}
	}
	return n
}

// CPUs is a container's CPU limit, else its request, rounded down and at least 1.
func CPUs(c *corev1.Container) int64 {
	q, ok := c.Resources.Limits[corev1.ResourceCPU]
	if !ok {
		q, ok = c.Resources.Requests[corev1.ResourceCPU]
	}
	if !ok {
		return 1
	}
	return max(1, q.MilliValue()/1000)
}

// Labels are the labels of every child the operator creates beside the JobSet. The operator's
// cache selects ConfigMaps and PodGroups by them, so it never holds other objects of those kinds.
func (b *Draft) Labels() map[string]string {
	return map[string]string{trainer.TrainJobNameLabel: b.TrainJob.Name}
}

// ChildMeta is the metadata of an object the TrainJob's build makes beside its JobSet: named
// name, in the TrainJob's namespace, with its label, and the TrainJob as its controller owner.
func (b *Draft) ChildMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: b.TrainJob.Namespace, Labels: b.Labels(),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(b.TrainJob)},
	}
}

// OwnerReference makes the TrainJob the controller owner of a child, so that the child is
// garbage-collected with it and its events reach the TrainJob's controller.
func OwnerReference(tj *trainer.TrainJob) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         trainer.GroupVersion.String(),
		Kind:               trainer.TrainJobKind,
		Name:               tj.Name,
		UID:                tj.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// OwnerReferenceApplyConfiguration is OwnerReference for apply configurations.
func OwnerReferenceApplyConfiguration(tj *trainer.TrainJob) *metav1ac.OwnerReferenceApplyConfiguration {
	ref := OwnerReference(tj)
	return metav1ac.OwnerReference().
		WithAPIVersion(ref.APIVersion).
		WithKind(ref.Kind).
		WithName(ref.Name).
		WithUID(ref.UID).
		WithController(*ref.Controller).
		WithBlockOwnerDeletion(*ref.BlockOwnerDeletion)
}

// TrainingPodsAnnotation on a TrainJob's JobSet records the size of its training: every
// replicated job but the initializers, as <name>=<replicas>x<pods per Job>, comma-separated
// (TrainingPods). The operator counts the training's ready pods from it and the JobSet's status,
// so that its cache keeps no Job templates.
const TrainingPodsAnnotation = "trainer.kubeflow.org/training-pods"

// TrainingPods is the value of TrainingPodsAnnotation for a JobSet.
func TrainingPods(js *jobsetv1alpha2.JobSet) string {
	var parts []string
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		if trainer.IsInitializer(rj) {
			continue
		}
		perJob := ptr.Deref(rj.Template.Spec.Parallelism, 1)
		if c := rj.Template.Spec.Completions; c != nil && *c < perJob {
			perJob = *c
		}
		parts = append(parts, fmt.Sprintf("%s=%dx%d", rj.Name, rj.Replicas, perJob))
	}
	return strings.Join(parts, ",")
}

// TrainerJobAnnotation on a TrainJob's JobSet names its trainer job: the replicated job whose
// pods are the training's nodes, which a resize grows or shrinks and an autoscaler reads.
const TrainerJobAnnotation = "trainer.kubeflow.org/trainer-job"

// NodeJobsAnnotation on a TrainJob's JobSet names, comma-separated, the replicated jobs whose pods
// are the training's nodes when they are not its trainer job's alone (Draft.NodeJobs): MPI's.
const NodeJobsAnnotation = "trainer.kubeflow.org/node-jobs"

// TrainerJobName is the name of a JobSet's trainer job: its replicated job labelled as the
// trainer's ancestor step; empty when it has none.
func TrainerJobName(js *jobsetv1alpha2.JobSet) string {
	for i := range js.Spec.ReplicatedJobs {
		if trainer.Ancestor(&js.Spec.ReplicatedJobs[i]) == trainer.AncestorTrainer {
			return js.Spec.ReplicatedJobs[i].Name
		}
	}
	return ""
}

// SpecHashAnnotation on a TrainJob's JobSet and PodGroup records which TrainJob spec they were
// built from (SpecHash), so that they are rebuilt while suspended only when the TrainJob
// changed, never because its runtime did: runtimes are blueprints.
const SpecHashAnnotation = "trainer.kubeflow.org/trainjob-spec-hash"

// BuiltFrom is a copy of a TrainJob's spec without the fields its children are not built from,
// which are also the fields a running TrainJob may change: spec.suspend, which the JobSet follows
// without a rebuild, spec.ttlSecondsAfterFinished and spec.progressDeadlineSeconds, which only
// the operator reads, and for an elastic TrainJob spec.trainer.numNodes, which resizes its
// JobSet in place (Resize).
func BuiltFrom(spec *trainer.TrainJobSpec, elastic bool) *trainer.TrainJobSpec {
	s := spec.DeepCopy()
	s.Suspend, s.TTLSecondsAfterFinished, s.ProgressDeadlineSeconds = nil, nil, nil
	if elastic && s.Trainer != nil {
		s.Trainer.NumNodes = nil
	}
	if s.Trainer != nil && reflect.ValueOf(*s.Trainer).IsZero() {
		s.Trainer = nil // Says nothing, as no trainer does.
	}
	return s
}

// Built reports whether a child was built from the TrainJob's spec as it is now, under a runtime
// of ML policy p.
func Built(child metav1.Object, tj *trainer.TrainJob, p *trainer.MLPolicy) bool {
	return child.GetAnnotations()[SpecHashAnnotation] == SpecHash(tj, p)
}

// SpecHash is a digest of everything in a TrainJob's spec that its JobSet is built from
// (BuiltFrom), under a runtime of ML policy p: the runtime's, not the TrainJob's status, says
// whether it is elastic, so that the JobSet's and the PodGroup's hashes agree whenever either is
// built, before or after the runtime's snapshot is recorded.
// A cache's summary of the TrainJob (Summarize) has it recorded.
func SpecHash(tj *trainer.TrainJob, p *trainer.MLPolicy) string {
	elastic := ElasticPolicy(p) != nil
	if hash, ok := summaryHash(tj, elastic); ok {
		return hash
	}
	hash, _ := hashOf(&tj.Spec, elastic)
	return hash
}

// hashOf is SpecHash of a spec, and the size of what it hashed.
func hashOf(spec *trainer.TrainJobSpec, elastic bool) (hash string, size int) {
	data, _ := json.Marshal(BuiltFrom(spec, elastic)) // A spec always encodes: it was decoded from JSON.
	sum := fnv.New64a()
	_, _ = sum.Write(data)
	return strconv.FormatUint(sum.Sum64(), 36), len(data)
}

// NumNodes is the number of nodes a TrainJob runs on under a runtime of ML policy p: its
// trainer.numNodes, else the runtime's mlPolicy.numNodes, else its elastic policy's maxNodes,
// else 1.
func NumNodes(tj *trainer.TrainJob, p *trainer.MLPolicy) int32 {
	if tj.Spec.Trainer != nil && tj.Spec.Trainer.NumNodes != nil {
		return *tj.Spec.Trainer.NumNodes
	}
	if p != nil && p.NumNodes != nil {
		return *p.NumNodes
	}
	if elastic := ElasticPolicyFor(tj, p); elastic != nil {
		_, maxNodes := ElasticBounds(elastic)
		return maxNodes
	}
	return 1
}

// SnapshotPolicy is the ML policy of the runtime a TrainJob is built from, as its
// status.runtimeSnapshot records it; nil before it is first built.
func SnapshotPolicy(tj *trainer.TrainJob) *trainer.MLPolicy {
	if s := tj.Status.RuntimeSnapshot; s != nil {
		return s.MLPolicy
	}
	return nil
}

// Elastic is the elastic policy a TrainJob runs under (ElasticPolicyFor), of the runtime it is
// built from (SnapshotPolicy); nil when the TrainJob is not elastic, or not built yet.
func Elastic(tj *trainer.TrainJob) *trainer.TorchElasticPolicy {
	return ElasticPolicyFor(tj, SnapshotPolicy(tj))
}

// ElasticPolicyFor is the elastic policy a TrainJob runs under, in a runtime of ML policy p: the
// runtime's torch elastic policy, with the bounds the TrainJob's trainer.elasticPolicy narrows it
// to; nil when the runtime is not elastic. The admission webhook keeps a TrainJob's bounds within
// its runtime's.
func ElasticPolicyFor(tj *trainer.TrainJob, p *trainer.MLPolicy) *trainer.TorchElasticPolicy {
	elastic := ElasticPolicy(p)
	if elastic == nil || tj.Spec.Trainer == nil || tj.Spec.Trainer.ElasticPolicy == nil {
		return elastic
	}
	own, narrowed := tj.Spec.Trainer.ElasticPolicy, *elastic
	if own.MinNodes != nil {
		narrowed.MinNodes = own.MinNodes
	}
	if own.MaxNodes != nil {
		narrowed.MaxNodes = own.MaxNodes
	}
	return &narrowed
}

// CheckElasticBounds refuses, at spec.trainer.elasticPolicy, a TrainJob's own elastic bounds
// that its runtime (ML policy p, named runtime) does not allow: any, for a runtime that is not
// elastic; bounds beyond the runtime's, or that cross each other, for one that is.
func CheckElasticBounds(tj *trainer.TrainJob, p *trainer.MLPolicy, runtime string) *field.Error {
	if tj.Spec.Trainer == nil || tj.Spec.Trainer.ElasticPolicy == nil {
		return nil
	}
	path := TrainerPath.Child("elasticPolicy")
	elastic := ElasticPolicy(p)
	if elastic == nil {
		return field.Forbidden(path, fmt.Sprintf("%s is not elastic (it has no mlPolicy.torch.elasticPolicy): its TrainJobs have no elastic bounds", runtime))
	}
	minNodes, maxNodes := ElasticBounds(elastic)
	ownMin, ownMax := ElasticBounds(ElasticPolicyFor(tj, p))
	switch {
	case ownMin < minNodes:
		return field.Invalid(path.Child("minNodes"), ownMin, fmt.Sprintf("below the minNodes (%d) of %s's torch.elasticPolicy", minNodes, runtime))
	case ownMax > maxNodes:
		return field.Invalid(path.Child("maxNodes"), ownMax, fmt.Sprintf("above the maxNodes (%d) of %s's torch.elasticPolicy", maxNodes, runtime))
	case ownMin > ownMax:
		return field.Invalid(path, fmt.Sprintf("minNodes %d, maxNodes %d", ownMin, ownMax),
			fmt.Sprintf("minNodes must not be greater than maxNodes (the runtime's, %d and %d, where the TrainJob sets none)", minNodes, maxNodes))
	}
	return nil
}

// ElasticPolicy is an ML policy's torch elastic policy, or nil.
func ElasticPolicy(p *trainer.MLPolicy) *trainer.TorchElasticPolicy {
	if p == nil || p.Torch == nil {
		return nil
	}
	return p.Torch.ElasticPolicy
}

// CheckElasticSize refuses, at spec.trainer.numNodes, a size outside the bounds of the elastic
// policy a TrainJob runs under (ElasticPolicyFor); runtime names its runtime.
func CheckElasticSize(tj *trainer.TrainJob, elastic *trainer.TorchElasticPolicy, n int32, runtime string) error {
	minNodes, maxNodes := ElasticBounds(elastic)
	if n >= minNodes && n <= maxNodes {
		return nil
	}
	format := "%s is elastic: numNodes must be between its torch.elasticPolicy's minNodes (%d) and maxNodes (%d)"
	if tj.Spec.Trainer != nil && tj.Spec.Trainer.ElasticPolicy != nil {
		format = "%s is elastic: numNodes must be between minNodes (%d) and maxNodes (%d), its torch.elasticPolicy's as spec.trainer.elasticPolicy narrows them"
	}
	return field.Invalid(TrainerPath.Child("numNodes"), n, fmt.Sprintf(format, runtime, minNodes, maxNodes))
}

// ElasticBounds are the fewest and the most nodes of an elastic policy: minNodes (1 when
// omitted) and maxNodes (minNodes when omitted).
func ElasticBounds(p *trainer.TorchElasticPolicy) (minNodes, maxNodes int32) {
	minNodes = ptr.Deref(p.MinNodes, 1)
	return minNodes, ptr.Deref(p.MaxNodes, minNodes)
}

// ClaimsDevices reports whether the trainer container uses resource claims (Dynamic Resource
// Allocation): the runtime's, or the TrainJob's resourcesPerNode.claims or resourceClaimsPerNode,
// which reach it later in the build. Their devices are not counted as GPUs.
func ClaimsDevices(b *Draft) bool {
	t := b.TrainJob.Spec.Trainer
	return len(b.TrainerContainer().Resources.Claims) > 0 || t != nil && len(t.ResourceClaimsPerNode) > 0
}

// ApplyResourcesPerNode merges the TrainJob's spec.trainer.resourcesPerNode into a container's
// resources (upsert.Resources: what it does not name stays the runtime's). A request the merge
// leaves above its limit, which Kubernetes refuses for every pod, is an error naming the field.
func (b *Draft) ApplyResourcesPerNode(c *corev1.Container) error {
	t := b.TrainJob.Spec.Trainer
	if t == nil || t.ResourcesPerNode == nil {
		return nil
	}
	merged := upsert.Resources(c.Resources, *t.ResourcesPerNode)
	for _, name := range slices.Sorted(maps.Keys(merged.Requests)) {
		request := merged.Requests[name]
		limit, ok := merged.Limits[name]
		if !ok || request.Cmp(limit) <= 0 {
			continue
		}
		path, value := TrainerPath.Child("resourcesPerNode", "requests").Key(string(name)), request.String()
		if _, own := t.ResourcesPerNode.Limits[name]; own {
			path, value = TrainerPath.Child("resourcesPerNode", "limits").Key(string(name)), limit.String()
		}
		return field.Invalid(path, value, fmt.Sprintf(
			"the %s request of container %q (%s) would be above its limit (%s), merged with the runtime's resources: set both the request and the limit",
			name, c.Name, request.String(), limit.String()))
	}
	c.Resources = merged
	return nil
}
