package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

func TestRunningOnceEveryPodOfTheTrainingIsReady(t *testing.T) {
	ns, runtime := setup(t) // One replicated job "node" of 2 pods.
	tj := utiltesting.MakeTrainJob("run", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1}}})
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, "0/2", tj.Status.Ready)
	})
	assert.Nil(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobRunning), "not running yet, and never was")

	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1, Ready: 1}}})
	got = waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobRunning, metav1.ConditionTrue, trainer.TrainJobNodesReadyReason)
	})
	assert.Equal(t, "2/2", got.Status.Ready)
	assert.Equal(t, trainer.TrainJobRunning, got.Status.Conditions[0].Type, "Running leads Created, for the STATE column")

	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1}}})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobNodesNotReadyReason)
	})

	updateTrainJob(t, got, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobSuspendedReason)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Subset(c, eventReasons(t, got), []string{"Normal/NodesReady", "Normal/NodesNotReady", "Normal/Suspended"})
	}, timeout, interval)
}

// completeJobSet completes the TrainJob's JobSet, as JobSet's controller would.
func completeJobSet(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{TerminalState: string(jobsetv1alpha2.JobSetCompleted)})
}

// finish completes the TrainJob's JobSet and waits for the TrainJob to be Complete.
func finish(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	completeJobSet(t, tj)
	return waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobComplete, metav1.ConditionTrue, "JobSetCompleted")
	})
}

func gone(obj client.Object) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object)))
	}
}

func TestAFinishedTrainJobIsDeletedWithItsJobSetAfterItsTTL(t *testing.T) {
	ns, runtime := setup(t)
	trainJob := func(name string) *utiltesting.TrainJobWrapper {
		return utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime)
	}
	now, later, never := trainJob("now").TTLSecondsAfterFinished(0).Obj(), trainJob("later").TTLSecondsAfterFinished(3600).Obj(), trainJob("never").Obj()
	for _, tj := range []*trainer.TrainJob{now, later, never} {
		require.NoError(t, k8sClient.Create(context.Background(), tj))
	}
	running := waitForJobSet(t, now, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	assertNever(t, gone(now), "a TrainJob with a TTL was deleted before it finished")

	completeJobSet(t, now) // Deleted as soon as it is Complete: there may be no time to see it so.
	for _, tj := range []*trainer.TrainJob{later, never} {
		finish(t, tj)
	}
	require.Eventually(t, gone(now), timeout, interval, "the TrainJob with ttlSecondsAfterFinished 0 is still there")
	require.Eventually(t, gone(running), timeout, interval, "its JobSet is still there")
	assertNever(t, func() bool { return gone(later)() || gone(never)() }, "a TrainJob whose TTL has not passed, or that has none, was deleted")
}

// A TrainJob's TTL counts from its terminal condition's time, not from when the manager saw it:
// one that finished while no manager ran, longer ago than its TTL, is deleted as soon as a
// manager starts.
func TestTheTTLCountsFromTheFinishAcrossARestart(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	trainJob := func(name string) *trainer.TrainJob {
		return utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	}
	past, pending := trainJob("past"), trainJob("pending")
	for _, tj := range []*trainer.TrainJob{past, pending} {
		require.NoError(t, k8sClient.Create(ctx, tj))
		finish(t, tj)
	}

	stopManager()
	for tj, ttl := range map[*trainer.TrainJob]int32{past: 60, pending: 3600} {
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), tj))
		c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobComplete)
		c.LastTransitionTime = metav1.NewTime(time.Now().Add(-2 * time.Minute))
		require.NoError(t, k8sClient.Status().Update(ctx, tj))
		tj.Spec.TTLSecondsAfterFinished = ptr.To(ttl)
		require.NoError(t, k8sClient.Update(ctx, tj))
	}
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop

	require.Eventually(t, gone(past), timeout, interval, "finished 2 minutes ago with a TTL of 60 s, and still there")
	assertNever(t, gone(pending), "finished 2 minutes ago with a TTL of an hour, and deleted")
}

// createJob creates a Job from the JobSet's first replicated job, as JobSet's controller would.
func createJob(t *testing.T, js *jobsetv1alpha2.JobSet, name string) *batchv1.Job {
	t.Helper()
	template := js.Spec.ReplicatedJobs[0].Template
	job := &batchv1.Job{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: *template.Spec.DeepCopy()}
	job.Name, job.Namespace = name, js.Namespace
	require.NoError(t, k8sClient.Create(context.Background(), job))
	return job
}

// setJobCounts writes a Job's counts of pods, as Job's controller would.
func setJobCounts(t *testing.T, job *batchv1.Job, active, ready, succeeded int32) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), job))
		job.Status.Active, job.Status.Ready, job.Status.Succeeded = active, ptr.To(ready), succeeded
		require.NoError(c, k8sClient.Status().Update(context.Background(), job))
	}, timeout, interval)
}

// A TrainJob's first running pod is seen in its Jobs' counts, once: the TrainJob's other Jobs
// and pods that start later, and its Jobs that a restarted manager lists, are not counted again.
func TestTheFirstPodIsCountedOncePerTrainJob(t *testing.T) {
	ns, runtime := setup(t)
	trainJob := func(name string) *batchv1.Job {
		tj := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
		require.NoError(t, k8sClient.Create(context.Background(), tj))
		js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
		return createJob(t, js, name+"-node-0")
	}
	counted := func() float64 {
		m, err := cluster.ScrapeMetrics()
		require.NoError(t, err)
		return m.Value("trainjob_time_to_first_pod_running_seconds", nil)
	}
	first := trainJob("first")
	assert.Equal(t, "first", first.Labels[trainer.TrainJobNameLabel], "the build labels the JobSet's Jobs with their TrainJob's name")
	firstAgain := createJob(t, waitForJobSet(t, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: ns}},
		func(*assert.CollectT, *jobsetv1alpha2.JobSet) {}), "first-node-1")
	before := counted()

	setJobCounts(t, first, 2, 0, 0) // Pods, but none running yet.
	assertNever(t, func() bool { return counted() != before }, "a TrainJob's first pod was counted before any ran")
	setJobCounts(t, first, 2, 1, 0)
	require.Eventually(t, func() bool { return counted() == before+1 }, timeout, interval, "the first ready pod is not counted")
	setJobCounts(t, first, 1, 1, 1)
	setJobCounts(t, firstAgain, 2, 2, 0)
	assertNever(t, func() bool { return counted() != before+1 }, "a TrainJob's later pods were counted as its first")

	restartManager(t)
	second := trainJob("second")
	setJobCounts(t, first, 0, 0, 2)
	setJobCounts(t, second, 1, 0, 1) // One pod ran to its end unseen: it ran.
	require.Eventually(t, func() bool { return counted() == before+2 }, timeout, interval, "the first pod after a restart is not counted")
	assertNever(t, func() bool { return counted() != before+2 }, "a Job that had run before the restart was counted again")
}
