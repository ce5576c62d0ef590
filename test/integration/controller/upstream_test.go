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
}
