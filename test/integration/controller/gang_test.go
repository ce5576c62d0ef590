package controller

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/gang"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// gangRuntime creates a namespaced torch runtime with a gang policy and 1-CPU nodes, changed by
// edits.
func gangRuntime(t *testing.T, ns string, policy trainer.PodGroupPolicySource, edits ...func(*trainer.TrainingRuntimeSpec)) {
	t.Helper()
	node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	node.Template.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(node).NumNodes(2).
		Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(1))}).PodGroupPolicy(policy).Obj()
	for _, edit := range edits {
		edit(&spec)
	}
	require.NoError(t, k8sClient.Create(context.Background(), utiltesting.TrainingRuntime("gang", ns, spec)))
}

// creationRevision is the etcd revision an object was created at, as long as nothing has written
// it since: the PodGroup and JobSet here have no controller writing their status.
func creationRevision(t *testing.T, obj client.Object) int64 {
	n, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	require.NoError(t, err)
	return n
}

func TestCoschedulingPodGroupComesBeforeTheJobSet(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("gang", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	pg := &schedulerpluginsv1alpha1.PodGroup{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
	assert.Less(t, creationRevision(t, pg), creationRevision(t, js), "the JobSet was created before its PodGroup")
	assert.Equal(t, schedulerpluginsv1alpha1.PodGroupSpec{
		MinMember:              2,
		MinResources:           corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		ScheduleTimeoutSeconds: ptr.To[int32](60),
	}, pg.Spec)
	assert.True(t, metav1.IsControlledBy(pg, got(t, tj)))
	assert.Equal(t, []string{"trainer.kubeflow.org/gang/Update"}, managers(pg), "only the gang controller writes PodGroups")
	assert.Equal(t, "gang", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels[gang.CoschedulingLabel])

	// A PodGroup someone deletes is put back, also for a gang that runs.
	require.NoError(t, k8sClient.Delete(ctx, pg))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		again := &schedulerpluginsv1alpha1.PodGroup{}
		if assert.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), again)) {
			assert.NotEqual(c, pg.UID, again.UID, "the deleted PodGroup")
			assert.Equal(c, int32(2), again.Spec.MinMember)
		}
	}, timeout, interval, "the deleted PodGroup was not put back")

	// Deleting the TrainJob deletes its PodGroup.
	require.NoError(t, k8sClient.Delete(ctx, tj))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(pg), &schedulerpluginsv1alpha1.PodGroup{}))
	}, timeout, interval, "the garbage collector did not delete the PodGroup")
}

// A gang its scheduler cannot place is reported once it has waited past its timeout, from when
// its scheduler says it waits, and no longer once it runs.
func TestAGangPastItsTimeoutIsReported(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](1)}})
	tj := utiltesting.MakeTrainJob("late", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	pastTimeout := func(c require.TestingT) float64 {
		v, _ := metricValue(c, "trainjob_gangs_past_timeout", "scheduler", "coscheduling")
		return v
	}
	// Nothing else in the suite says a gang waits.
	require.Zero(t, pastTimeout(t), "a gang whose scheduler says nothing waits")

	// Its scheduler's controller says that all its pods exist and not all run.
	setPhase := func(phase schedulerpluginsv1alpha1.PodGroupPhase) {
		pg := &schedulerpluginsv1alpha1.PodGroup{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
		pg.Status.Phase = phase
		require.NoError(t, k8sClient.Status().Update(ctx, pg))
	}
	setPhase(schedulerpluginsv1alpha1.PodGroupScheduling)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, pastTimeout(c))
		waited, _ := metricValue(c, "trainjob_gang_oldest_wait_seconds", "scheduler", "coscheduling")
		assert.Greater(c, waited, 1.0)
	}, timeout, interval, "the gang past its timeout was not reported")

	setPhase(schedulerpluginsv1alpha1.PodGroupRunning)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Zero(c, pastTimeout(c))
	}, timeout, interval, "a gang that runs is still reported")
}

func TestVolcanoPodGroup(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{Queue: ptr.To("research")}})
	tj := utiltesting.MakeTrainJob("volc", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").NumNodes(3).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	pg := &volcanov1beta1.PodGroup{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
	assert.Equal(t, int32(3), pg.Spec.MinMember)
	assert.Equal(t, "research", pg.Spec.Queue)
	assert.Equal(t, &corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}, pg.Spec.MinResources)
	assert.True(t, metav1.IsControlledBy(pg, got(t, tj)))
	assert.Equal(t, "volc", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Annotations[gang.VolcanoAnnotation])
}

// TestVolcanoPodGroupPlacement: the Volcano PodGroup the API server stores has the runtime's
// network topology (with the schema's defaults), the priority class of the gang's pods, and the
// queue the TrainJob chose with Volcano's queue annotation, its runtime naming none.
func TestVolcanoPodGroupPlacement(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{
		NetworkTopology: &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.SoftNetworkTopologyMode},
	}}, func(spec *trainer.TrainingRuntimeSpec) {
		spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.PriorityClassName = "training-high"
	})
	tj := utiltesting.MakeTrainJob("placed", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	tj.Spec.Annotations = map[string]string{volcanov1beta1.QueueNameAnnotationKey: "urgent"}
	require.NoError(t, k8sClient.Create(ctx, tj))

	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	pg := &volcanov1beta1.PodGroup{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
	assert.Equal(t, volcanov1beta1.PodGroupSpec{
		MinMember:         2,
		MinResources:      &corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Queue:             "urgent",
		PriorityClassName: "training-high",
		NetworkTopology:   &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.SoftNetworkTopologyMode, HighestTierAllowed: ptr.To(1)},
	}, pg.Spec)
}

func TestKAIQueueLabelsAndNoPodGroup(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "team-a"}})
	tj := utiltesting.MakeTrainJob("kai", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	assert.Equal(t, "team-a", js.Labels[gang.KAIQueueLabel])
	assert.Equal(t, "team-a", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels[gang.KAIQueueLabel])
	assert.Len(t, js.OwnerReferences, 1)
	for _, pg := range []client.Object{&schedulerpluginsv1alpha1.PodGroup{}, &volcanov1beta1.PodGroup{}} {
		assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg)), "a PodGroup was made for KAI")
	}
}

func TestSuspendedGangIsResized(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("queued", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Suspend(true).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	spec := func(c *assert.CollectT) schedulerpluginsv1alpha1.PodGroupSpec {
		pg := &schedulerpluginsv1alpha1.PodGroup{}
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
		return pg.Spec
	}
	minMember := func(c *assert.CollectT) int32 { return spec(c).MinMember }
	minResources := func(c *assert.CollectT) corev1.ResourceList { return spec(c).MinResources }
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, int32(2), minMember(c)) }, timeout, interval)
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](4)} })
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, int32(4), minMember(c)) }, timeout, interval)

	// A resource the TrainJob no longer asks for leaves the gang's minResources: a stale one
	// would keep the gang waiting for what it does not need.
	withGPU := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1")}
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Requests: withGPU, Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("4")}, minResources(c))
	}, timeout, interval)
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer.ResourcesPerNode = nil })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}, minResources(c))
	}, timeout, interval)

	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
		assert.Equal(c, ptr.To[int32](4), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	})
}

// A gang-scheduled TrainJob that cannot be built says so: it does not wait silently for a
// PodGroup that the gang controller cannot build either.
func TestGangTrainJobThatCannotBeBuiltSaysSo(t *testing.T) {
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("broken", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").
		PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"launcher"}}).Obj()
	require.NoError(t, k8sClient.Create(context.Background(), tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message, "spec.podSpecOverrides[0].targetJobs[0]")
}

// refusePodGroups makes the API server refuse the given operations on coscheduling PodGroups in
// namespace ns, with message, as a closed queue's webhook, a quota or a cluster policy would: a
// ValidatingAdmissionPolicy. It returns once the refusal is in force, and the function that lifts
// it.
func refusePodGroups(t *testing.T, ns, message string, operations ...admissionregistrationv1.OperationType) (lift func()) {
	t.Helper()
	return refuse(t, ns, message, "", admissionregistrationv1.Rule{APIGroups: []string{"scheduling.x-k8s.io"}, APIVersions: []string{"v1alpha1"},
		Resources: []string{"podgroups"}}, &schedulerpluginsv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}, operations...)
}

// refuse makes the API server refuse the operations on the resources of rule in namespace ns,
// with message and reason (Invalid when empty): a ValidatingAdmissionPolicy. It returns once a
// dry-run create of probe is refused, and the function that lifts the refusal (the test's end
// does too).
func refuse(t *testing.T, ns, message string, reason metav1.StatusReason, rule admissionregistrationv1.Rule, probe client.Object, operations ...admissionregistrationv1.OperationType) (lift func()) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-" + rule.Resources[0] + "-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: operations, Rule: rule},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: message}},
		},
	}
	if reason != "" {
		policy.Spec.Validations[0].Reason = &reason
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			}},
		},
	}
	require.NoError(t, k8sClient.Create(ctx, policy))
	require.NoError(t, k8sClient.Create(ctx, binding))
	lift = func() {
		require.NoError(t, client.IgnoreNotFound(k8sClient.Delete(ctx, binding)))
		require.NoError(t, client.IgnoreNotFound(k8sClient.Delete(ctx, policy)))
	}
	t.Cleanup(lift)
	// In force once a dry-run create in the namespace is refused with the message (every policy
	// here refuses creates).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Create(ctx, probe.DeepCopyObject().(client.Object), client.DryRunAll)
		assert.ErrorContains(c, err, message)
	}, timeout, interval, "the policy is not in force")
	return lift
}

// TestARefusedPodGroupIsReportedAndTriedAgain: the API server refuses the gang's PodGroup (here a
// policy; a closed Volcano queue or a quota alike). The TrainJob says so, in its Created
// condition with the API server's reason and a Warning event, and goes on, without a restart,
// once the refusal is lifted.
func TestARefusedPodGroupIsReportedAndTriedAgain(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	const reason = "queue research is closed"
	lift := refusePodGroups(t, ns, reason, admissionregistrationv1.Create, admissionregistrationv1.Update)
	tj := utiltesting.MakeTrainJob("refused", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobPodGroupCreationFailedReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message, reason)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, tj), "Warning/"+trainer.TrainJobPodGroupCreationFailedReason)
	}, timeout, interval)
	assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})),
		"the JobSet was made without its gang's PodGroup")

	lift()
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &schedulerpluginsv1alpha1.PodGroup{}))
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
}

// TestAPodGroupFollowsARuntimeFixedBeforeTheFirstJobSet: a gang's first JobSet is refused (a
// policy, a quota), and its runtime is fixed meanwhile (4 nodes to 2). The JobSet is built from
// the fixed runtime, and so is the PodGroup before it: a PodGroup of the old size never lets a
// gang of 2 schedule.
func TestAPodGroupFollowsARuntimeFixedBeforeTheFirstJobSet(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}},
		func(spec *trainer.TrainingRuntimeSpec) { spec.MLPolicy.NumNodes = ptr.To[int32](4) })
	lift := refuse(t, ns, "no room for 4 nodes", "", admissionregistrationv1.Rule{APIGroups: []string{jobsetv1alpha2.GroupVersion.Group},
		APIVersions: []string{jobsetv1alpha2.GroupVersion.Version}, Resources: []string{"jobsets"}},
		&jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}, admissionregistrationv1.Create)
	tj := utiltesting.MakeTrainJob("fixed", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	pg := &schedulerpluginsv1alpha1.PodGroup{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
		assert.Equal(c, int32(4), pg.Spec.MinMember)
	}, timeout, interval)
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsCreationFailedReason)
	})

	rt := &trainer.TrainingRuntime{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gang"}, rt))
	rt.Spec.MLPolicy.NumNodes = ptr.To[int32](2)
	require.NoError(t, k8sClient.Update(ctx, rt))
	lift()
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	assert.Equal(t, ptr.To[int32](2), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
	assert.Equal(t, int32(2), pg.Spec.MinMember, "the PodGroup kept the size of the runtime before its fix")
	assert.Equal(t, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}, pg.Spec.MinResources)
}

// TestAGangIsNeverResumedBeforeItsPodGroupIsResized: a suspended gang TrainJob is resized and
// resumed (as Kueue does) while its PodGroup cannot be resized yet. Its JobSet stays suspended,
// with the TrainJob saying why, until the PodGroup has the TrainJob's size: part of a gang never
// starts and holds nodes.
func TestAGangIsNeverResumedBeforeItsPodGroupIsResized(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("queued", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Suspend(true).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	pg := &schedulerpluginsv1alpha1.PodGroup{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
		assert.Equal(c, int32(2), pg.Spec.MinMember)
	}, timeout, interval)
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	lift := refusePodGroups(t, ns, "quota exceeded", admissionregistrationv1.Create, admissionregistrationv1.Update)
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](4)} })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To[int32](4), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	})
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobPodGroupCreationFailedReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).Message, "quota exceeded")
	assertNever(t, func() bool {
		js := &jobsetv1alpha2.JobSet{}
		return k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js) == nil && !ptr.Deref(js.Spec.Suspend, false)
	}, "the JobSet was resumed while its PodGroup still had the old size")

	lift()
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
	})
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
	assert.Equal(t, int32(4), pg.Spec.MinMember)
}

// TestAPodGroupStrippedOfItsMetadataIsStillTheTrainJobs: someone removes all the labels (which put
// it in the operator's cache) or all the annotations (its spec hash) of a suspended gang's
// PodGroup. It is still the TrainJob's, by its owner reference: on resume it is resized and
// labelled again, and the gang resumes, not wait forever nor be taken for someone else's.
func TestAPodGroupStrippedOfItsMetadataIsStillTheTrainJobs(t *testing.T) {
	for name, strip := range map[string]string{
		"labels":      `{"metadata":{"labels":null}}`,
		"annotations": `{"metadata":{"annotations":null}}`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := newNamespace(t)
			gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
			tj := utiltesting.MakeTrainJob("stripped", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Suspend(true).Obj()
			require.NoError(t, k8sClient.Create(ctx, tj))
			waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
			pg := &schedulerpluginsv1alpha1.PodGroup{}
			require.EventuallyWithT(t, func(c *assert.CollectT) { require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg)) }, timeout, interval)
			require.NoError(t, k8sClient.Patch(ctx, pg, client.RawPatch(types.MergePatchType, []byte(strip))))

			updateTrainJob(t, tj, func(tj *trainer.TrainJob) {
				tj.Spec.Suspend = ptr.To(false)
				tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](3)}
			})
			waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
			require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
			assert.Equal(t, int32(3), pg.Spec.MinMember)
			assert.Equal(t, "stripped", pg.Labels[trainer.TrainJobNameLabel])
			assert.True(t, metav1.IsControlledBy(pg, got(t, tj)))
		})
	}
}

// TestAnElasticGangStarts: an elastic TrainJob of a gang, with its size set (as admission sets
// it). The gang controller may build the PodGroup before the TrainJob's runtime snapshot is
// recorded, and the TrainJob controller after: both must agree that the PodGroup was built from
// the TrainJob as it is (an elastic TrainJob's size is no part of it), or the JobSet waits for a
// PodGroup that is never rebuilt.
func TestAnElasticGangStarts(t *testing.T) {
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}, func(spec *trainer.TrainingRuntimeSpec) {
		spec.MLPolicy.NumNodes = nil
		spec.MLPolicy.Torch.ElasticPolicy = &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](3)}
	})
	tj := utiltesting.MakeTrainJob("elastic", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").NumNodes(2).Obj()
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	assert.Equal(t, ptr.To[int32](2), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	pg := &schedulerpluginsv1alpha1.PodGroup{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), pg))
	assert.Equal(t, int32(1), pg.Spec.MinMember, "an elastic gang is sized for minNodes")
}

// A suspended gang's TrainJob, cached as a summary once its JobSet is built from its spec
// (framework.Summarize), has a PodGroup someone deleted put back as built from the whole
// TrainJob: with the resources its trainer asks for, not the runtime's.
func TestASuspendedGangsPodGroupIsBuiltAgainWhole(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("gang", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Suspend(true).
		Trainer(&trainer.Trainer{Args: []string{strings.Repeat("# the training function\n", 60)}, ResourcesPerNode: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	sixCPUs := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6")}
	pg := &schedulerpluginsv1alpha1.PodGroup{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if assert.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg)) {
			assert.True(c, sixCPUs.Cpu().Equal(*pg.Spec.MinResources.Cpu()), "built from the trainer's resources: %v", pg.Spec.MinResources)
		}
	}, timeout, interval)
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(true), js.Spec.Suspend) })
	waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration)
	})

	require.NoError(t, k8sClient.Delete(ctx, pg))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		again := &schedulerpluginsv1alpha1.PodGroup{}
		if assert.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), again)) {
			assert.NotEqual(c, pg.UID, again.UID, "the deleted PodGroup")
			assert.True(c, sixCPUs.Cpu().Equal(*again.Spec.MinResources.Cpu()), "built from the whole TrainJob: %v", again.Spec.MinResources)
		}
	}, timeout, interval, "the deleted PodGroup was not put back as built")
}
