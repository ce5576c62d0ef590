package controller

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/progress"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// Review (stall detection): hostile and unlucky cases of a stall Restart.

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

// Review, failing test: a TrainJob suspended, edited and resumed (Kueue's preemption and
// re-admission to another flavor, which rewrites spec.runtimePatches) while its JobSet is
// suspended for a stall restart, and while the operator does not see it (manager down, or the
// three writes land between two reconciles): the operator takes the resumed TrainJob for the
// restart it began (restartingForStall), and its `case restarting:` comes before the rebuild
// case in reconcile's step 4, so the JobSet is resumed as it was built, with the old placement.
// The edit is then lost for good: the reconcile writes Created with the new generation, so
// changedUnseen never fires again. TestAnEditMadeWhileSuspendedIsNeverDropped holds this for a
// running JobSet; not for one mid-restart.
func TestReviewAnEditMadeWhileSuspendedMidStallRestartIsNotDropped(t *testing.T) {
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

// Review, failing test: the restart resumes the JobSet once JobSet counts no Job active or
// ready (jobsStopped). Job's controller counts a pod active only while it has no deletion
// timestamp: a suspended Job's pods stop counting the moment their deletion begins, not when
// they are gone (their terminationGracePeriodSeconds; a trainer hung in NCCL often ignores
// SIGTERM and is killed only at its end). The Job says so in status.terminating. The operator
// resumes the JobSet while the old, hung pods still run: the new gang starts beside them (GPUs
// still held, JobSet's headless service publishes not-ready addresses, so rank 0's host name
// can resolve to the old pod). docs/progress.md says "once JobSet counts none of its Jobs active
// (their pods are gone)": the second half does not hold.
func TestReviewAStallRestartWaitsForTheOldPodsToBeGone(t *testing.T) {
	ns := newNamespace(t)
	tj, js := stalledForRestart(t, ns, "terminating")

	// The JobSet's Job, suspended: its 2 pods are terminating, none active nor ready.
	job := createJob(t, js, js.Name+"-node-0")
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

// Review, failing test: the progress endpoint writes a TrainJob's progress at most once per
// --progress-interval (30 s by default; all TrainJobs together at most --progress-qps, 20 a
// second, one writer: with N TrainJobs reporting, each is written every max(interval, N/qps):
// 50 s at 1,000, 500 s at 10,000), and lastProgressTime moves only when a report is written.
// Admission accepts any progressDeadlineSeconds >= 1, with no word of that lag: a deadline
// shorter than it stalls, and with Fail kills, a trainer that reports new progress every half
// second. Here the interval is 10 s and the deadline 5 s.
func TestReviewAHealthyTrainerIsNotStalledByTheProgressWriteInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := newNamespace(t)
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 3600, Action: trainer.StallActionFail})
	tj, _ := runTrainJob(t, utiltesting.MakeTrainJob("healthy", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).ProgressDeadlineSeconds(5).Obj())

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns}}
	require.NoError(t, k8sClient.Create(ctx, sa))
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{progress.Audience(ns, tj.Name)}, ExpirationSeconds: ptr.To[int64](3600),
	}}
	require.NoError(t, k8sClient.SubResource("token").Create(ctx, sa, req))
	server := progress.NewServer(k8sClient, progress.Options{Interval: 10 * time.Second})
	go func() { _ = server.Start(ctx) }()
	mux := http.NewServeMux()
	mux.Handle(progress.Pattern, server)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	url := ts.URL + progress.Path(ns, tj.Name)

	// The trainer advances every half second.
	go func() {
		for i := int32(1); i < 100 && ctx.Err() == nil; i++ {
			body := bytes.NewBufferString(fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d}}`, i))
			r, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
			r.Header.Set("Authorization", "Bearer "+req.Status.Token)
			if resp, err := http.DefaultClient.Do(r); err == nil {
				resp.Body.Close()
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.NotNil(c, tj.Status.LastProgressTime) })
	assert.Never(t, func() bool {
		return apimeta.FindStatusCondition(got(t, tj).Status.Conditions, trainer.TrainJobStalled) != nil
	}, 12*time.Second, 200*time.Millisecond, "a trainer reporting new progress every 0.5 s was Stalled (and Failed): its reports reach the status every 10 s, its deadline is 5 s")
}

// Review, failing test: anyone who may patch a JobSet (its annotations are not the operator's
// alone) can write trainer.kubeflow.org/stall-restarts on a running TrainJob's JobSet, and
// catchStall takes it at its word: status.stallRestarts jumps to the number, the TrainJob says
// Stalled=False/Restarted and a restart that never happened, and trainjob_restarts_total
// {cause="stall"} grows by the difference (here a million) in one step. The number should only be
// taken when it is the next one (status.stallRestarts+1) and the JobSet was suspended by the
// operator for it; otherwise ignored.
func TestReviewAForgedStallRestartsAnnotationIsNotCounted(t *testing.T) {
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

// Review (held up): a manager that stops mid-restart (JobSet suspended for restart 1, its Jobs
// stopping) leaves it to the next, which resumes the JobSet once the Jobs stopped and counts the
// restart once; a TrainJob that Kueue suspends in the middle of a restart keeps its JobSet
// suspended (the restart does not undo Kueue's suspension) and is resumed with it.
func TestReviewAStallRestartSurvivesAManagerRestartAndAKueueSuspension(t *testing.T) {
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

// Review, failing test: the progress endpoint is served by the manager (its webhook server).
// While every replica is down (an upgrade, a crash loop, a lost node) trainers cannot report,
// and lastProgressTime stands still. The manager that starts reconciles every TrainJob at once
// and stalls every one whose deadline passed during the outage, before any trainer could
// report again: with Fail, an outage longer than the deadline fails every training in the
// cluster that was progressing all along. The stall clock should count from no earlier than
// when the endpoint came back (e.g. the later of lastProgressTime, readyTime and the manager's
// start, or a deadline's grace after it). Here: deadline 3 s, 5 s down, and the trainer reports
// 2 s after the manager is back.
func TestReviewAManagerOutageDoesNotFailProgressingTrainJobs(t *testing.T) {
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
