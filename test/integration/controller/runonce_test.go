package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// No training runs twice: these tests delete a TrainJob's JobSet in the ways that happen (a
// finalizer holding it while it finishes, a user, a deletion while no manager runs) and check
// that the TrainJob never gets a second JobSet once its pods may have run.

// noSecondJobSet checks for two seconds that the TrainJob gets no JobSet after first's.
func noSecondJobSet(t *testing.T, tj *trainer.TrainJob, first *jobsetv1alpha2.JobSet) {
	t.Helper()
	assertNever(t, func() bool {
		js := &jobsetv1alpha2.JobSet{}
		return k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), js) == nil && js.UID != first.UID
	}, "a second JobSet was created: the training would run again")
}

// TestAJobSetThatFinishesWhileBeingDeletedFinishesTheTrainJob: a JobSet held by a finalizer
// (another controller's, or a foreground deletion's) reaches its terminal state while it is
// being deleted, as one deleted by JobSet's ttlSecondsAfterFinished does. The TrainJob takes that
// state, and gets no new JobSet once the old one is gone.
func TestAJobSetThatFinishesWhileBeingDeletedFinishesTheTrainJob(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("ttl", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	js.Finalizers = append(js.Finalizers, holdFinalizer)
	require.NoError(t, k8sClient.Update(ctx, js))
	require.NoError(t, k8sClient.Delete(ctx, js))

	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{
		TerminalState: string(jobsetv1alpha2.JobSetCompleted),
		Conditions: []metav1.Condition{{Type: string(jobsetv1alpha2.JobSetCompleted), Status: metav1.ConditionTrue,
			Reason: "AllJobsCompleted", Message: "jobset completed successfully", LastTransitionTime: metav1.Now()}},
	})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted")
	})

	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(js), js))
	js.Finalizers = nil
	require.NoError(t, k8sClient.Update(ctx, js))
	require.Eventually(t, gone(js), timeout, interval)
	noSecondJobSet(t, tj, js)
}

// TestAJobSetDeletedAfterItsPodsMayHaveRunIsNotCreatedAgain: a running TrainJob's JobSet deleted
// before it finished (by a user, or by JobSet's TTL while no manager saw it finish) fails the
// TrainJob, saying so, instead of running the training a second time; also when the deletion
// happens while the manager is down, and its cache is new when it starts. A suspended TrainJob's
// JobSet, whose pods do not run, is made again.
func TestAJobSetDeletedAfterItsPodsMayHaveRunIsNotCreatedAgain(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	running := utiltesting.MakeTrainJob("running", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	whileDown := utiltesting.MakeTrainJob("while-down", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	suspended := utiltesting.MakeTrainJob("suspended", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Suspend(true).Obj()
	jobSets := map[string]*jobsetv1alpha2.JobSet{}
	for _, tj := range []*trainer.TrainJob{running, whileDown, suspended} {
		require.NoError(t, k8sClient.Create(ctx, tj))
		jobSets[tj.Name] = waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
		waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
			conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
		})
	}

	require.NoError(t, k8sClient.Delete(ctx, jobSets["running"]))
	stopManager()
	require.NoError(t, k8sClient.Delete(ctx, jobSets["while-down"]))
	require.Eventually(t, gone(jobSets["while-down"]), timeout, interval)
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop

	for _, tj := range []*trainer.TrainJob{running, whileDown} {
		got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
			conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobJobSetDeletedReason)
		})
		assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, "not run a second time")
		assert.Empty(t, got.Status.Ready, "READY counts the pods of a JobSet that is gone")
		noSecondJobSet(t, tj, jobSets[tj.Name])
	}

	require.NoError(t, k8sClient.Delete(ctx, jobSets["suspended"]))
	again := waitForJobSet(t, suspended, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.NotEqual(c, jobSets["suspended"].UID, js.UID)
	})
	assert.Equal(t, ptr.To(true), again.Spec.Suspend)
}

// TestAnEditMadeWhileSuspendedIsNeverDropped: while no manager runs, a running gang TrainJob is
// suspended, given more nodes and a label, and resumed, as Kueue's preemption and re-admission
// would. The manager that starts sees only the resumed TrainJob, its JobSet still running the
// old spec: it stops the JobSet, resizes the PodGroup, builds the JobSet again (a new one: its
// size cannot change in place) and resumes it, and the TrainJob does not fail for the JobSet it
// deleted itself.
func TestAnEditMadeWhileSuspendedIsNeverDropped(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("unseen", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	first := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})

	stopManager()
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](3)}
		tj.Spec.Labels = map[string]string{"edited": "while-suspended"}
	})
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	// Another writer of the TrainJob meanwhile (a trainer's progress, a label): the operator's
	// status writes lose conflicts now and then, and no step may rely on one having landed.
	churn := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-churn:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_ = k8sClient.Patch(ctx, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: ns}},
				client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"churn":"%d"}}}`, i)))
		}
	}()
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop

	js := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.NotEqual(c, first.UID, js.UID, "the JobSet running the old spec is still there")
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
	})
	close(churn)
	<-churned
	assert.Equal(t, ptr.To[int32](3), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	assert.Equal(t, "while-suspended", js.Labels["edited"])
	pg := &schedulerpluginsv1alpha1.PodGroup{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
	assert.Equal(t, int32(3), pg.Spec.MinMember, "the JobSet was resumed before its PodGroup was resized")
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason)
	})
	assert.Nil(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed), "the TrainJob failed for the JobSet the operator deleted to build it again")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, got), "Normal/"+trainer.TrainJobRebuildingReason)
	}, timeout, interval)
}

// TestTTLEditsOfARunningTrainJobNeverRestartIt: a running TrainJob's ttlSecondsAfterFinished may
// change (admission allows it, as for a Job), twice while no manager runs: its JobSet is not built
// from it, so nothing about the running JobSet changes.
func TestTTLEditsOfARunningTrainJobNeverRestartIt(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("ttl-edits", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	first := waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})

	stopManager()
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](3600) })
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](7200) })
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop

	waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
		assert.Equal(c, got.Generation, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobCreated).ObservedGeneration)
	})
	assertNever(t, func() bool {
		js := &jobsetv1alpha2.JobSet{}
		return k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js) != nil || js.UID != first.UID || ptr.Deref(js.Spec.Suspend, false)
	}, "the running JobSet was suspended or replaced for a TTL edit")
	assert.NotContains(t, eventReasons(t, got(t, tj)), "Normal/"+trainer.TrainJobRebuildingReason)
}
