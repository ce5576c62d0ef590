package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// Hostile and unlucky cases of a stall Restart.

// stalledForRestart runs a TrainJob of a Restart runtime of deadline 2s, reports progress once,
// and waits until the operator suspended its JobSet for restart 1, its pods still counted.
func stalledForRestart(t *testing.T, ns, name string) (*trainer.TrainJob, *jobsetv1alpha2.JobSet) {
	t.Helper()
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 2, Action: trainer.StallActionRestart})
	tj, js := runTrainJob(t, utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj())
	reportProgress(t, tj, 10)
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(true), js.Spec.Suspend)
		assert.Equal(c, "1", js.Annotations["trainer.kubeflow.org/stall-restarts"])
	})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason)
	})
	return tj, js
}

// A TrainJob suspended, edited and resumed (Kueue's preemption and re-admission elsewhere, which
// rewrites spec.runtimePatches) while its JobSet is suspended for a stall restart, unseen by the
// operator, is built again from the edit: the restart does not resume the JobSet as it was.
func TestAnEditMadeWhileSuspendedMidStallRestartIsNotDropped(t *testing.T) {
	ns := newNamespace(t)
	tj, js := stalledForRestart(t, ns, "preempted")

	stopManager()
	zone := func(z string) []trainer.RuntimePatch {
		return []trainer.RuntimePatch{utiltesting.JobPatch("kueue.x-k8s.io/manager",
			utiltesting.PodPatch("node", &trainer.MetadataPatch{Labels: map[string]string{z: "true"}}, nil))}
	}
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.RuntimePatches = zone("east") })
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	// JobSet's controller stopped the Jobs meanwhile.
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Suspended: 1}}})
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop

	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
	})
	// Resumed: with the edit, now or after a rebuild (it never comes: the status now says the
	// JobSet is of the TrainJob's generation).
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, "true", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels["east"],
			"the JobSet runs without the edit made while the TrainJob was suspended (Kueue's placement lost)")
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
	})
}

// A stall restart resumes the JobSet only once its Jobs count no terminating pod: Job's controller
// stops counting a pod active when its deletion begins, and a hung trainer that ignores SIGTERM
// runs on for its grace period, on the GPUs and under the host name the new gang needs.
func TestAStallRestartWaitsForTheOldPodsToBeGone(t *testing.T) {
	ns := newNamespace(t)
	tj, js := stalledForRestart(t, ns, "terminating")

	// The JobSet's Job, suspended: its 2 pods are terminating, none active nor ready.
	job := createJob(t, js, js.Name+"-node-0")
	job.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(js, jobsetv1alpha2.SchemeGroupVersion.WithKind("JobSet"))}
	require.NoError(t, k8sClient.Update(context.Background(), job))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), job))
		job.Status = batchv1.JobStatus{Active: 0, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](2)}
		require.NoError(c, k8sClient.Status().Update(context.Background(), job))
	}, timeout, interval)
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Suspended: 1}}})

	assertNever(t, func() bool {
		return !ptr.Deref(waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {}).Spec.Suspend, false)
	}, "the JobSet was resumed while its Job still had 2 terminating pods of the hung attempt")
}

// A stall-restarts annotation someone else wrote on a JobSet (a number that is not the TrainJob's
// next restart) is not counted: no restart that never happened in status or metrics.
func TestAForgedStallRestartsAnnotationIsNotCounted(t *testing.T) {
	ns := newNamespace(t)
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 3600, Action: trainer.StallActionRestart})
	restartsBefore := stallMetric(t, "trainjob_restarts_total", map[string]string{"cause": "stall"})
	tj, js := runTrainJob(t, utiltesting.MakeTrainJob("forged", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj())

	require.NoError(t, k8sClient.Patch(context.Background(), js, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"trainer.kubeflow.org/stall-restarts":"1000000"}}}`))))
	reconcileOnce := func() {
		updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.ProgressDeadlineSeconds = ptr.To[int32](3000) })
	}
	reconcileOnce() // A reconcile.
	time.Sleep(2 * time.Second)
	now := got(t, tj)
	assert.Equal(t, int32(0), now.Status.StallRestarts, "a forged annotation counted as stall restarts")
	assert.Nil(t, apimeta.FindStatusCondition(now.Status.Conditions, trainer.TrainJobStalled), "a TrainJob that never stalled says it was restarted for a stall")
	assert.Equal(t, restartsBefore, stallMetric(t, "trainjob_restarts_total", map[string]string{"cause": "stall"}), "trainjob_restarts_total{cause=stall} moved for a forged annotation")
}

// A manager that stops mid-restart leaves it to the next, which resumes the JobSet once its Jobs
// stopped and counts the restart once; a TrainJob that Kueue suspends in the middle of a restart
// keeps its JobSet suspended and is resumed with it.
func TestAStallRestartSurvivesAManagerRestartAndAKueueSuspension(t *testing.T) {
	ns := newNamespace(t)
	restartsBefore := stallMetric(t, "trainjob_restarts_total", map[string]string{"cause": "stall"})
	tj, js := stalledForRestart(t, ns, "interrupted")

	stopManager()
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Suspended: 1}}})
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Equal(c, int32(1), tj.Status.StallRestarts) })
	assert.Equal(t, restartsBefore+1, stallMetric(t, "trainjob_restarts_total", map[string]string{"cause": "stall"}))

	// Ready again, stalls again: restart 2 begins; Kueue suspends the TrainJob meanwhile.
	setJobSetStatus(t, js, readyStatus)
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, "2", js.Annotations["trainer.kubeflow.org/stall-restarts"])
		assert.Equal(c, ptr.To(true), js.Spec.Suspend)
	})
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason)
	})
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Suspended: 1}}})
	assertNever(t, func() bool {
		return !ptr.Deref(waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {}).Spec.Suspend, false)
	}, "the restart resumed the JobSet of a TrainJob Kueue suspended")
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	after := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason)
	})
	t.Logf("after Kueue's resume: stallRestarts=%d, Stalled=%+v", after.Status.StallRestarts, apimeta.FindStatusCondition(after.Status.Conditions, trainer.TrainJobStalled))
}

// While every replica of the manager is down, trainers cannot report (the progress endpoint is
// the manager's): a stall is never counted from before the manager started, so the TrainJobs
// whose deadline passed meanwhile get a whole deadline to report again.
func TestAManagerOutageDoesNotFailProgressingTrainJobs(t *testing.T) {
	ns := newNamespace(t)
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 3, Action: trainer.StallActionFail})
	tj, _ := runTrainJob(t, utiltesting.MakeTrainJob("outage", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj())
	reportProgress(t, tj, 10)
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.NotNil(c, tj.Status.LastProgressTime) })

	stopManager()
	time.Sleep(5 * time.Second) // The trainer's reports meanwhile are refused: no endpoint.
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop
	time.Sleep(2 * time.Second) // A trainer reports every few seconds at best (30 s is common).
	reportProgress(t, tj, 11)   // Its first report once the endpoint is back.

	time.Sleep(time.Second)
	got := got(t, tj)
	assert.Nil(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed),
		"a trainer that could not report while the manager was down was failed for a stall when it came back")
}

// A Restart policy restarts a TrainJob at most maxRestarts times: the stall after them fails it.
func TestAStallAfterTheLastRestartFails(t *testing.T) {
	ns := newNamespace(t)
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 2, Action: trainer.StallActionRestart, MaxRestarts: ptr.To[int32](0)})
	tj, _ := runTrainJob(t, utiltesting.MakeTrainJob("spent", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj())
	reportProgress(t, tj, 10)
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason)
	})
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, "after 0 restarts for stalls (stallPolicy.maxRestarts)")
	assert.Zero(t, got.Status.StallRestarts)
	waitForJobSetGone(t, tj, "the JobSet of a TrainJob failed for a stall, and so its pods, stayed")
}
