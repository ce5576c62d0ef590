// Package gang holds the gang-scheduling rules in one place: which pods of a TrainJob form its
// gang, the labels and annotations that join them to it, and the PodGroup that describes it to
// the scheduler. The build pipeline stamps the labels into the JobSet, so that no pod ever exists
// without them, and builds the PodGroup, which only the gang controller writes.
package gang

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedulingac "k8s.io/client-go/applyconfigurations/scheduling/v1alpha2"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	schedulerpluginsac "sigs.k8s.io/scheduler-plugins/pkg/generated/applyconfiguration/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoac "volcano.sh/apis/pkg/client/applyconfiguration/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// What pods carry to join their gang.
const (
	// CoschedulingLabel names a pod's PodGroup for the scheduler-plugins Coscheduling plugin.
	CoschedulingLabel = "scheduling.x-k8s.io/pod-group"
	// VolcanoAnnotation names a pod's PodGroup for Volcano.
	VolcanoAnnotation = "scheduling.k8s.io/group-name"
	// KAIQueueLabel names the KAI Scheduler queue; KAI's pod-grouper makes the PodGroup itself.
	KAIQueueLabel = "kai.scheduler/queue"
)

// DefaultScheduleTimeoutSeconds is the Coscheduling timeout when the runtime sets none, or 0.
const DefaultScheduleTimeoutSeconds = 60

// scheduleTimeout is the Coscheduling PodGroup's scheduleTimeoutSeconds for a runtime's policy. 0
// means the default, as upstream Kubeflow Trainer documents it; it is written out, because
// scheduler-plugins would wait for no time at all on a PodGroup's 0.
func scheduleTimeout(policy *trainer.CoschedulingPodGroupPolicySource) int32 {
	if t := ptr.Deref(policy.ScheduleTimeoutSeconds, 0); t > 0 {
		return t
	}
	return DefaultScheduleTimeoutSeconds
}

// WorkloadTemplate is the name of the gang's PodGroup template in its Workload (Kubernetes' own
// gang scheduling), as upstream Kubeflow Trainer's KEP-3015 names it.
const WorkloadTemplate = "trainer"

// Ganged reports whether the policy asks for gang scheduling, by any of its schedulers.
func Ganged(policy *trainer.PodGroupPolicy) bool {
	return NeedsPodGroup(policy) || (policy != nil && policy.KAIScheduler != nil)
}

// NeedsPodGroup reports whether the policy needs a PodGroup the operator writes: Coscheduling's,
// Volcano's or Kubernetes' own (with its Workload), not KAI's, whose PodGroup KAI makes.
func NeedsPodGroup(policy *trainer.PodGroupPolicy) bool {
	return policy != nil && (policy.Coscheduling != nil || policy.Volcano != nil || policy.Workload != nil)
}

// Immutable reports whether a PodGroup's spec cannot change once created, as Kubernetes' own
// cannot: it is made anew to change (the gang controller deletes it first).
func Immutable(pg client.Object) bool {
	_, ok := pg.(*schedulingv1alpha2.PodGroup)
	return ok
}

// PodGroupObject returns an empty PodGroup of the kind the policy needs, to look it up by name,
// or nil when the policy needs none (NeedsPodGroup).
func PodGroupObject(policy *trainer.PodGroupPolicy) client.Object {
	switch {
	case !NeedsPodGroup(policy):
		return nil
	case policy.Coscheduling != nil:
		return &schedulerpluginsv1alpha1.PodGroup{}
	case policy.Volcano != nil:
		return &volcanov1beta1.PodGroup{}
	case policy.Workload != nil:
		return &schedulingv1alpha2.PodGroup{}
	}
	return nil
}

// Stamp joins the JobSet's gang members to their gang: the Coscheduling label, the Volcano
// annotation or Kubernetes' own schedulingGroup on the pod template of every member job; for KAI,
// the queue label on the JobSet and every pod template. It runs last in the pipeline, so that nothing in the TrainJob can remove it.
// It refuses an elastic training under Kubernetes' own gang scheduling, which could not resize it.
func Stamp(b *framework.Draft) error {
	policy := b.Runtime.Spec.PodGroupPolicy
	if policy == nil {
		return nil
	}
	if elastic := framework.ElasticPolicyFor(b.TrainJob, b.MLPolicy()); policy.Workload != nil && elastic != nil {
		// Kubernetes' JobValidation admission refuses to change the parallelism of a Job whose
		// pods name a gang PodGroup: an elastic trainer job could never be resized. Bounds of
		// one size (the TrainJob's own may narrow them so) resize nothing.
		if minNodes, maxNodes := framework.ElasticBounds(elastic); minNodes < maxNodes {
			return b.RuntimeError(field.Forbidden(field.NewPath("spec", "podGroupPolicy", "workload"),
				"Kubernetes' own gang scheduling cannot run an elastic training (mlPolicy.torch.elasticPolicy, minNodes below maxNodes): Kubernetes refuses to change "+
					"the parallelism of a Job whose pods belong to a gang, so the trainer job could not be resized; use coscheduling, volcano or kaiScheduler"))
		}
	}
	js, name := b.JobSet, b.TrainJob.Name
	gang := members(js)
	if kai := policy.KAIScheduler; kai != nil {
		js.Labels = withEntry(js.Labels, KAIQueueLabel, kai.Queue)
	}
	for i := range js.Spec.ReplicatedJobs {
		job := &js.Spec.ReplicatedJobs[i]
		pod := &job.Template.Spec.Template
		switch {
		case policy.KAIScheduler != nil:
			pod.Labels = withEntry(pod.Labels, KAIQueueLabel, policy.KAIScheduler.Queue)
		case !gang[job.Name]:
		case policy.Coscheduling != nil:
			pod.Labels = withEntry(pod.Labels, CoschedulingLabel, name)
		case policy.Volcano != nil:
			pod.Annotations = withEntry(pod.Annotations, VolcanoAnnotation, name)
		case policy.Workload != nil:
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
		}
	}
	return nil
}

// Built reports whether a PodGroup was built from the TrainJob's spec as it is now, under a
// runtime of ML policy p, and from the runtime copy of digest d (the one its JobSet is built from).
func Built(pg metav1.Object, tj *trainer.TrainJob, p *trainer.MLPolicy, d string) bool {
	return framework.Built(pg, tj, p) && pg.GetAnnotations()[trainingruntime.DigestAnnotation] == d
}

// PodGroup builds the PodGroup of the JobSet built, or returns nil when the policy needs none.
// Its minMember is every pod of the member jobs and its minResources their summed requests: the
// scheduler places the gang only when all of it fits.
func PodGroup(b *framework.Draft) (runtime.ApplyConfiguration, error) {
	policy := b.Runtime.Spec.PodGroupPolicy
	if PodGroupObject(policy) == nil {
		return nil, nil
	}
	tj := b.TrainJob
	members, resources := size(b)
	if policy.Workload != nil {
		// No minimum resources: Kubernetes' scheduler finds the gang's pods themselves.
		return schedulingac.PodGroup(tj.Name, tj.Namespace).
			WithLabels(b.Labels()).
			WithAnnotations(map[string]string{framework.SpecHashAnnotation: framework.SpecHash(tj, b.Runtime.Spec.MLPolicy)}).
			WithOwnerReferences(framework.OwnerReferenceApplyConfiguration(tj)).
			WithSpec(schedulingac.PodGroupSpec().
				WithPodGroupTemplateRef(schedulingac.PodGroupTemplateReference().
					WithWorkload(schedulingac.WorkloadPodGroupTemplateReference().
						WithWorkloadName(tj.Name).WithPodGroupTemplateName(WorkloadTemplate))).
				WithSchedulingPolicy(gangPolicy(members))), nil
	}
	if policy.Coscheduling != nil {
		return schedulerpluginsac.PodGroup(tj.Name, tj.Namespace).
			WithLabels(b.Labels()).
			WithAnnotations(map[string]string{framework.SpecHashAnnotation: framework.SpecHash(tj, b.Runtime.Spec.MLPolicy)}).
			WithOwnerReferences(framework.OwnerReferenceApplyConfiguration(tj)).
			WithSpec(schedulerpluginsac.PodGroupSpec().
				WithMinMember(members).
				WithMinResources(resources).
				WithScheduleTimeoutSeconds(scheduleTimeout(policy.Coscheduling))), nil
	}
	spec := volcanoac.PodGroupSpec().WithMinMember(members).WithMinResources(resources)
	if queue := volcanoQueue(b); queue != "" {
		spec.WithQueue(queue)
	}
	priority, err := priorityClass(b)
	if err != nil {
		return nil, err
	}
	if priority != "" {
		spec.WithPriorityClassName(priority)
	}
	if nt := policy.Volcano.NetworkTopology; nt != nil {
		topology := volcanoac.NetworkTopologySpec()
		if nt.Mode != "" {
			topology.WithMode(nt.Mode)
		}
		if nt.HighestTierAllowed != nil {
			topology.WithHighestTierAllowed(*nt.HighestTierAllowed)
		}
		spec.WithNetworkTopology(topology)
	}
	pg := volcanoac.PodGroup(tj.Name, tj.Namespace).
		WithLabels(b.Labels()).
		WithAnnotations(map[string]string{framework.SpecHashAnnotation: framework.SpecHash(tj, b.Runtime.Spec.MLPolicy)}).
		WithOwnerReferences(framework.OwnerReferenceApplyConfiguration(tj)).
		WithSpec(spec)
	// Volcano's generated apply configurations predate the methods controller-runtime's Apply
	// reads (IsApplyConfiguration, GetKind, ...), so this one goes as unstructured.
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pg)
	if err != nil {
		return nil, fmt.Errorf("converting the Volcano PodGroup: %w", err)
	}
	return client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}), nil
}

// Workload builds the Workload of the JobSet built, which its native PodGroup names as its
// template, or returns nil unless the policy is Kubernetes' own gang scheduling. Its one template,
// WorkloadTemplate, is the gang: the initializers are not scheduled with it, as with the other
// schedulers.
func Workload(b *framework.Draft) *schedulingac.WorkloadApplyConfiguration {
	if policy := b.Runtime.Spec.PodGroupPolicy; policy == nil || policy.Workload == nil {
		return nil
	}
	tj := b.TrainJob
	members, _ := size(b)
	return schedulingac.Workload(tj.Name, tj.Namespace).
		WithLabels(b.Labels()).
		WithAnnotations(map[string]string{framework.SpecHashAnnotation: framework.SpecHash(tj, b.Runtime.Spec.MLPolicy)}).
		WithOwnerReferences(framework.OwnerReferenceApplyConfiguration(tj)).
		WithSpec(schedulingac.WorkloadSpec().
			WithControllerRef(schedulingac.TypedLocalObjectReference().
				WithAPIGroup(trainer.GroupVersion.Group).WithKind(trainer.TrainJobKind).WithName(tj.Name)).
			WithPodGroupTemplates(schedulingac.PodGroupTemplate().
				WithName(WorkloadTemplate).WithSchedulingPolicy(gangPolicy(members))))
}

// gangPolicy is the scheduling policy of Kubernetes' own gang of members pods. Kubernetes refuses a
// minCount below 1: a gang of no pod (a DeepSpeed runtime at one node, whose launcher runs as the
// node and waits for a node job of no pod) gets 1, and no pod names its PodGroup.
func gangPolicy(members int32) *schedulingac.PodGroupSchedulingPolicyApplyConfiguration {
	return schedulingac.PodGroupSchedulingPolicy().WithGang(schedulingac.GangSchedulingPolicy().WithMinCount(max(members, 1)))
}

// volcanoQueue is the Volcano queue of the gang: the runtime's volcano.queue, which binds its
// TrainJobs, as KAI's queue does; for a runtime that names none (upstream Kubeflow Trainer's
// runtimes have no such field), the JobSet's scheduling.volcano.sh/queue-name annotation, as the
// runtime's template, the TrainJob's spec.annotations and its runtime patches left it, as upstream
// reads it; else "", Volcano's default queue.
func volcanoQueue(b *framework.Draft) string {
	if queue := ptr.Deref(b.Runtime.Spec.PodGroupPolicy.Volcano.Queue, ""); queue != "" {
		return queue
	}
	return b.JobSet.Annotations[volcanov1beta1.QueueNameAnnotationKey]
}

// priorityClass is the priority class of the gang's Volcano PodGroup: the one the pod templates
// of its member jobs name, or "" when none does. A member that names none is left out: its pods
// take the cluster's default priority. Two members that name different ones are the runtime's
// error (only a runtime sets it): a PodGroup has one priority, and picking one would reorder
// the gang against others silently.
func priorityClass(b *framework.Draft) (string, error) {
	gang := members(b.JobSet)
	var class, from string
	for i, job := range b.JobSet.Spec.ReplicatedJobs {
		name := job.Template.Spec.Template.Spec.PriorityClassName
		switch {
		case !gang[job.Name] || name == "" || name == class:
		case class == "":
			class, from = name, job.Name
		default:
			return "", b.RuntimeError(field.Invalid(
				framework.RuntimeJobsPath.Index(i).Child("template", "spec", "template", "spec", "priorityClassName"), name,
				fmt.Sprintf("replicated job %q names priority class %q and replicated job %q names %q: the jobs of a gang must name the same one, as its Volcano PodGroup has one priority",
					job.Name, name, from, class)))
		}
	}
	return class, nil
}

// members names the replicated jobs whose pods are the gang: those that run together. Not the
// initializers, which finish before training starts, and not the jobs that start only once a
// member job is ready or done (dependsOn), such as an MPI launcher that waits for its nodes: their
// pods do not exist while the gang is being placed. A job that waits only for the initializers
// is a member. JobSet lets a job depend only on jobs listed before it, so one pass decides.
func members(js *jobsetv1alpha2.JobSet) map[string]bool {
	m := map[string]bool{}
	for _, job := range js.Spec.ReplicatedJobs {
		if trainer.IsInitializer(&job) {
			continue
		}
		m[job.Name] = !slices.ContainsFunc(job.DependsOn, func(d jobsetv1alpha2.DependsOn) bool { return m[d.Name] })
	}
	return m
}

// size counts the pods of the member jobs that must run at once (replicas × parallelism, and for
// an elastic trainer job its minNodes: it may start with that many) and sums their requests, as
// the scheduler will see them: requests default to limits, and init containers and sidecars
// count as Kubernetes counts them.
func size(b *framework.Draft) (int32, corev1.ResourceList) {
	var count int32
	total := corev1.ResourceList{}
	for _, m := range memberPods(b) {
		pods := m.pods
		count += pods
		pod := &corev1.Pod{Spec: *b.JobSet.Spec.ReplicatedJobs[m.index].Template.Spec.Template.Spec.DeepCopy()}
		defaultRequestsToLimits(pod.Spec.InitContainers)
		defaultRequestsToLimits(pod.Spec.Containers)
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			q.Mul(int64(pods))
			if sum, ok := total[name]; ok {
				q.Add(sum)
			}
			total[name] = q
		}
	}
	return count, total
}

// memberPod is a member job of the gang, and how many of its pods must run at once.
type memberPod struct {
	index int // in the JobSet's replicated jobs
	pods  int32
}

// memberPods lists the gang's member jobs (members), each with its pods that must run at once:
// replicas × parallelism, and for an elastic trainer job its minNodes, which it may start with.
func memberPods(b *framework.Draft) []memberPod {
	js, gang := b.JobSet, members(b.JobSet)
	minNodes := elasticMinNodes(b)
	var out []memberPod
	for i := range js.Spec.ReplicatedJobs {
		job := &js.Spec.ReplicatedJobs[i]
		if !gang[job.Name] {
			continue
		}
		parallelism := ptr.Deref(job.Template.Spec.Parallelism, 1)
		if minNodes != nil && job.Name == b.TrainerJob().Name {
			parallelism = *minNodes
		}
		out = append(out, memberPod{index: i, pods: job.Replicas * parallelism})
	}
	return out
}

// elasticMinNodes is the fewest nodes an elastic torch TrainJob runs on, or nil when it is not
// elastic.
func elasticMinNodes(b *framework.Draft) *int32 {
	p := framework.ElasticPolicyFor(b.TrainJob, b.Runtime.Spec.MLPolicy)
	if p == nil {
		return nil
	}
	minNodes, _ := framework.ElasticBounds(p)
	return &minNodes
}

// defaultRequestsToLimits does what the API server does to a pod: a resource with a limit and no
// request requests its limit.
func defaultRequestsToLimits(containers []corev1.Container) {
	for i := range containers {
		r := &containers[i].Resources
		for name, limit := range r.Limits {
			if _, ok := r.Requests[name]; !ok {
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[name] = limit
			}
		}
	}
}

func withEntry(m map[string]string, key, value string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[key] = value
	return m
}
