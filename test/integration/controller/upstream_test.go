package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// Under upstream's conditions, the manager's default, a TrainJob has no condition from its
// creation to its end but Suspended=True while suspended: upstream's SDK sees it Running only
// then. Its state, start time and the generation of its JobSet are in status fields, which keep
// what the rules that never run a training twice need: a JobSet deleted after the pods may have
// run still fails the TrainJob, rather than run it again.
func TestUpstreamConditions(t *testing.T) {
	withManager(t, controller.Options{Conditions: controller.UpstreamConditions})
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("sdk", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	state := func(state, ready string, conditions ...string) func(c *assert.CollectT, tj *trainer.TrainJob) {
		return func(c *assert.CollectT, tj *trainer.TrainJob) {
			assert.Equal(c, state, tj.Status.State)
			assert.Equal(c, ready, tj.Status.Ready)
			var got []string
			for _, cond := range tj.Status.Conditions {
				got = append(got, cond.Type+"="+string(cond.Status))
			}
			assert.Equal(c, conditions, got)
		}
	}
	got := waitForTrainJob(t, tj, state(trainer.TrainJobCreated, "0/2"))
	assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
	require.NotNil(t, got.Status.StartTime)
	assert.Equal(t, got.CreationTimestamp, *got.Status.StartTime, "never suspended, it started when it was created")

	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1, Ready: 1}}})
	waitForTrainJob(t, tj, state(trainer.TrainJobRunning, "2/2"))

	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	waitForTrainJob(t, tj, state(trainer.TrainJobSuspended, "2/2", "Suspended=True"))
	time.Sleep(time.Second) // The resume's start time is a second of its own.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	got = waitForTrainJob(t, tj, state(trainer.TrainJobRunning, "2/2"))
	assert.True(t, got.Status.StartTime.After(got.CreationTimestamp.Time), "the start time is the resume's: %v", got.Status.StartTime)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Subset(c, eventReasons(t, got), []string{"Normal/JobsCreated", "Normal/NodesReady", "Normal/Suspended", "Normal/Resumed"})
	}, timeout, interval)

	require.NoError(t, k8sClient.Delete(context.Background(), js))
	got = waitForTrainJob(t, tj, state(trainer.TrainJobFailed, "", "Failed=True"))
	assert.Equal(t, trainer.TrainJobJobSetDeletedReason, got.Status.Conditions[0].Reason)
}

// A deadline counts from the last resume under upstream's conditions too, though no Suspended
// condition stays to say when that was.
func TestUpstreamConditionsKeepTheDeadlineFromTheResume(t *testing.T) {
	withManager(t, controller.Options{Conditions: controller.UpstreamConditions})
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("deadline", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Suspend(true).Obj()
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](3)
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, trainer.TrainJobSuspended, tj.Status.State)
	})
	time.Sleep(4 * time.Second) // Longer than the deadline, suspended: its clock is stopped.

	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	resumed := time.Now()
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobDeadlineExceededReason)
	})
	assert.GreaterOrEqual(t, time.Since(resumed), 2*time.Second, "it failed before its deadline from the resume: %v", got.Status.Conditions)
	// As upstream's: the JobSet is deleted at the deadline, after the status says so.
	waitForJobSetGone(t, tj, "the JobSet of a TrainJob past its deadline stayed")
}

// TestAnUpgradeKeepsTheClockOfAResumedTrainJob resumes a TrainJob past its deadline's length of
// suspension, then hands it, with the status an operator without status.startTime left (Created
// and Suspended=False conditions only), to a manager with upstream's conditions: the deadline
// still counts from the resume, not from the creation, and fails the TrainJob when it passes, with
// no other event to wake the operator.
func TestAnUpgradeKeepsTheClockOfAResumedTrainJob(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("upgraded", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Suspend(true).Obj()
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](6)
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, trainer.TrainJobSuspended, tj.Status.State)
	})
	time.Sleep(7 * time.Second) // Suspended longer than the deadline: its clock is stopped.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })

	stopManager()
	resumed := metav1.Now()
	old := got(t, tj)
	old.Status = trainer.TrainJobStatus{Conditions: []metav1.Condition{
		{Type: trainer.TrainJobSuspended, Status: metav1.ConditionFalse, Reason: trainer.TrainJobResumedReason, Message: "TrainJob is resumed", LastTransitionTime: resumed, ObservedGeneration: old.Generation},
		{Type: trainer.TrainJobCreated, Status: metav1.ConditionTrue, Reason: trainer.TrainJobJobsCreatedReason, Message: "created", LastTransitionTime: resumed, ObservedGeneration: old.Generation},
	}}
	require.NoError(t, k8sClient.Status().Update(ctx, old))
	stop, err := cluster.StartManager(controller.Options{MaxConcurrentReconciles: 4, RuntimeGracePeriod: runtimeGracePeriod, Conditions: controller.UpstreamConditions})
	require.NoError(t, err)
	stopManager = stop
	t.Cleanup(func() { restartManager(t) })

	upgraded := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, trainer.TrainJobCreated, tj.Status.State)
	})
	require.NotNil(t, upgraded.Status.StartTime)
	assert.Equal(t, resumed.Unix(), upgraded.Status.StartTime.Unix(), "the start time is the resume's")
	failed := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobDeadlineExceededReason)
	})
	assert.GreaterOrEqual(t, failedAt(failed).Sub(resumed.Time), 5*time.Second, "failed before its deadline from the resume")
}

// failedAt is when the TrainJob's Failed condition became True.
func failedAt(tj *trainer.TrainJob) time.Time {
	for _, c := range tj.Status.Conditions {
		if c.Type == trainer.TrainJobFailed {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
