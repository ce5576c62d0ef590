package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// budgetOf waits for the TrainJob's PodDisruptionBudget to pass check.
func budgetOf(t *testing.T, tj *trainer.TrainJob, check func(*assert.CollectT, *policyv1.PodDisruptionBudget)) *policyv1.PodDisruptionBudget {
	t.Helper()
	return utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(tj), &policyv1.PodDisruptionBudget{}, check)
}

func noBudget(tj *trainer.TrainJob) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), &policyv1.PodDisruptionBudget{}))
	}
}

// A running gang TrainJob has a PodDisruptionBudget for its gang's pods, all of which must stay
// (minAvailable): a drain evicts none of them. It is the TrainJob's, set right when changed,
// removed while the TrainJob is suspended and once it finished, and back when it resumes.
func TestARunningGangHasAPodDisruptionBudget(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("gang", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	want := policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(2)),
		Selector: &metav1.LabelSelector{
			MatchLabels: map[string]string{jobsetv1alpha2.JobSetNameKey: "gang"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: jobsetv1alpha2.ReplicatedJobNameKey, Operator: metav1.LabelSelectorOpIn, Values: []string{"node"},
			}},
		},
	}
	pdb := budgetOf(t, tj, func(c *assert.CollectT, pdb *policyv1.PodDisruptionBudget) {
		assert.Equal(c, want, pdb.Spec)
	})
	assert.True(t, metav1.IsControlledBy(pdb, got(t, tj)))
	assert.Equal(t, "gang", pdb.Labels[trainer.TrainJobNameLabel])

	// Someone lowers it, and strips its label: it is set right.
	pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(1))
	pdb.Labels = nil
	require.NoError(t, k8sClient.Update(ctx, pdb))
	budgetOf(t, tj, func(c *assert.CollectT, pdb *policyv1.PodDisruptionBudget) {
		assert.Equal(c, want, pdb.Spec)
		assert.Equal(c, "gang", pdb.Labels[trainer.TrainJobNameLabel])
	})

	// Suspended: none. Resumed: back.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	require.Eventually(t, noBudget(tj), timeout, interval, "a suspended gang keeps its PodDisruptionBudget")
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	budgetOf(t, tj, func(c *assert.CollectT, pdb *policyv1.PodDisruptionBudget) { assert.Equal(c, want, pdb.Spec) })

	// Finished: none.
	finish(t, tj)
	require.Eventually(t, noBudget(tj), timeout, interval, "a finished gang keeps its PodDisruptionBudget")
}

// A PodDisruptionBudget of the TrainJob's name that is someone else's is never touched: the gang
// goes without one, and the TrainJob says so in a Warning event. A TrainJob without a gang gets
// none.
func TestSomeoneElsesPodDisruptionBudgetIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	theirs := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}}},
	}
	require.NoError(t, k8sClient.Create(ctx, theirs))
	tj := utiltesting.MakeTrainJob("taken", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, tj), "Warning/"+trainer.TrainJobObjectNotOwnedReason)
	}, timeout, interval, "the TrainJob did not say its gang has no PodDisruptionBudget")
	after := &policyv1.PodDisruptionBudget{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(theirs), after))
	assert.Equal(t, theirs.Spec, after.Spec, "someone else's PodDisruptionBudget was changed")
	assert.Empty(t, after.OwnerReferences)
	assert.Equal(t, theirs.ResourceVersion, after.ResourceVersion, "someone else's PodDisruptionBudget was written")

	plainNS, runtime := setup(t)
	plain := utiltesting.MakeTrainJob("plain", plainNS).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, plain))
	waitForJobSet(t, plain, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	assertNever(t, func() bool { return !noBudget(plain)() }, "a TrainJob without a gang got a PodDisruptionBudget")
}

// A JobSet that failed after it was suspended failed for its suspension: a Job's pod failure
// policy counts the pods a suspension stops as any failed pods, and a rule of the runtime's
// runPolicy.failurePolicy may match their exit code (143 for SIGTERM). The TrainJob is not failed;
// its JobSet is made anew, and the TrainJob runs again once resumed.
func TestAJobSetThatFailedForItsSuspensionIsMadeAnew(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("preempted", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	first := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	first = waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(true), js.Spec.Suspend) })

	suspendedAt := metav1.Now()
	setJobSetStatus(t, first, jobsetv1alpha2.JobSetStatus{
		TerminalState: string(jobsetv1alpha2.JobSetFailed),
		Conditions: []metav1.Condition{
			{Type: string(jobsetv1alpha2.JobSetSuspended), Status: metav1.ConditionTrue, Reason: "SuspendedJobs", Message: "jobset is suspended", LastTransitionTime: suspendedAt},
			{Type: string(jobsetv1alpha2.JobSetFailed), Status: metav1.ConditionTrue, Reason: "FailJobSetFailurePolicyAction",
				Message: "Container node for pod ns/p failed with exit code 143 matching FailJob rule at index 1", LastTransitionTime: suspendedAt},
		},
	})
	again := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.NotEqual(c, first.UID, js.UID, "the JobSet that failed for its suspension was not made anew")
	})
	assert.Equal(t, ptr.To(true), again.Spec.Suspend)
	assert.False(t, apimeta.IsStatusConditionTrue(got(t, tj).Status.Conditions, trainer.TrainJobFailed), "the suspension failed the TrainJob")

	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	assert.False(t, apimeta.IsStatusConditionTrue(got(t, tj).Status.Conditions, trainer.TrainJobFailed))

	// One that failed while it ran, and was suspended after, is the training's failure.
	other := utiltesting.MakeTrainJob("failed", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, other))
	js := waitForJobSet(t, other, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	failedAt := metav1.Now()
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{
		TerminalState: string(jobsetv1alpha2.JobSetFailed),
		Conditions: []metav1.Condition{{Type: string(jobsetv1alpha2.JobSetFailed), Status: metav1.ConditionTrue, Reason: "FailedJobs",
			Message: "jobset failed due to one or more job failures", LastTransitionTime: failedAt}},
	})
	waitForTrainJob(t, other, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs")
	})
}
