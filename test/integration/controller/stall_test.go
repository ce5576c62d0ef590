package controller

import (
	"context"
	"encoding/json"
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

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// stallRuntime creates a TrainingRuntime of one replicated job "node" of 2 pods, with a stall
// policy, and returns its name.
func stallRuntime(t *testing.T, ns string, policy *trainer.StallPolicy) string {
	t.Helper()
	spec := utiltesting.MakeRuntimeSpec().NumNodes(2).StallPolicy(policy).Obj()
	require.NoError(t, k8sClient.Create(context.Background(), utiltesting.TrainingRuntime("stalls", ns, spec)))
	return "stalls"
}

// runTrainJob creates a TrainJob of the runtime and makes every pod of its training ready, as
// JobSet's controller would report it, and returns it Running.
func runTrainJob(t *testing.T, tj *trainer.TrainJob) (*trainer.TrainJob, *jobsetv1alpha2.JobSet) {
	t.Helper()
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	setJobSetStatus(t, js, readyStatus)
	return waitForTrainJob(t, tj, stateIs(trainer.TrainJobRunning)), js
}

// readyStatus is the status of a JobSet of one Job of 2 pods, all ready.
var readyStatus = jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: 1, Ready: 1}}}

func stateIs(state string) func(c *assert.CollectT, tj *trainer.TrainJob) {
	return func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Equal(c, state, tj.Status.State) }
}

// reportProgress writes a trainer's report into the TrainJob's status as the progress endpoint
// does when it says something new: the report, and lastProgressTime on the operator's clock, in
// one merge patch under the endpoint's field manager.
func reportProgress(t *testing.T, tj *trainer.TrainJob, percent int32) time.Time {
	t.Helper()
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"trainerStatus":    map[string]any{"progressPercentage": percent, "lastUpdatedTime": now},
		"lastProgressTime": now,
	}})
	require.NoError(t, err)
	obj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: tj.Namespace}}
	require.NoError(t, k8sClient.Status().Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, patch),
		client.FieldOwner("trainer.kubeflow.org/progress")))
	return now.Time
}

// stallMetric reads a counter of the manager's stalls or restarts.
func stallMetric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	m, err := cluster.ScrapeMetrics()
	require.NoError(t, err)
	return m.Value(name, labels)
}

// A trainer that reports, then stops, while every pod runs: once its runtime's deadline passed
// since the report, the TrainJob is Stalled and Failed, its JobSet suspended first and deleted once the status says so. A TrainJob of
// the same runtime whose trainer never reports runs on.
func TestAStalledTrainJobFails(t *testing.T) {
	ns := newNamespace(t)
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 2, Action: trainer.StallActionFail})
	stallsBefore := stallMetric(t, "trainjob_stalls_total", map[string]string{"action": "Fail"})
	silent, _ := runTrainJob(t, utiltesting.MakeTrainJob("silent", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj())
	tj, _ := runTrainJob(t, utiltesting.MakeTrainJob("hangs", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj())

	reported := reportProgress(t, tj, 10)
	stalled := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason)
		conditionIs(c, tj, trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason)
	})
	failed := apimeta.FindStatusCondition(stalled.Status.Conditions, trainer.TrainJobFailed)
	assert.GreaterOrEqual(t, failed.LastTransitionTime.Sub(reported.Truncate(time.Second)), 2*time.Second, "failed before its deadline")
	assert.Contains(t, failed.Message, `TrainingRuntime "stalls" stallPolicy.progressDeadlineSeconds (2s)`)
	assert.Contains(t, failed.Message, "its last progress was at "+stalled.Status.LastProgressTime.UTC().Format(time.RFC3339))
	assert.Equal(t, trainer.TrainJobFailed, stalled.Status.State)
	waitForJobSetGone(t, tj, "the JobSet of a TrainJob failed for a stall, and so its pods, stayed")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Subset(c, eventReasons(t, stalled), []string{"Warning/ProgressDeadlineExceeded"})
	}, timeout, interval)
	assert.Equal(t, stallsBefore+1, stallMetric(t, "trainjob_stalls_total", map[string]string{"action": "Fail"}))

	silent = got(t, silent)
	assert.Equal(t, trainer.TrainJobRunning, silent.Status.State, "a TrainJob whose trainer never reported stalled: %v", silent.Status.Conditions)
	assert.Nil(t, apimeta.FindStatusCondition(silent.Status.Conditions, trainer.TrainJobStalled))
}

// Restart stops every pod of a stalled TrainJob by suspending its JobSet, and resumes it once
// JobSet reports its Jobs stopped; the TrainJob itself is never suspended, nor its start time
// moved. The stall clock starts again when its pods are all ready again: with no new progress, it
// stalls again a deadline later, and is restarted again.
func TestAStalledTrainJobIsRestartedAsAWhole(t *testing.T) {
	ns := newNamespace(t)
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 2, Action: trainer.StallActionRestart})
	restartsBefore := stallMetric(t, "trainjob_restarts_total", map[string]string{"cause": "stall"})
	tj, js := runTrainJob(t, utiltesting.MakeTrainJob("hangs", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj())
	startTime := tj.Status.StartTime
	require.NotNil(t, startTime)

	reportProgress(t, tj, 10)
	suspended := func(n string) func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		return func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
			assert.Equal(c, ptr.To(true), js.Spec.Suspend)
			assert.Equal(c, n, js.Annotations["trainer.kubeflow.org/stall-restarts"])
		}
	}
	waitForJobSet(t, tj, suspended("1"))
	restarting := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason)
	})
	assert.Equal(t, ptr.To(false), restarting.Spec.Suspend, "the operator suspended the TrainJob itself")
	assertNever(t, func() bool {
		return !ptr.Deref(waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {}).Spec.Suspend, false)
	},
		"the JobSet was resumed before its Jobs stopped")

	// JobSet's controller stops the Jobs.
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Suspended: 1}}})
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(false), js.Spec.Suspend) })
	restarted := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(1), tj.Status.StallRestarts)
		conditionIs(c, tj, trainer.TrainJobStalled, metav1.ConditionFalse, trainer.TrainJobRestartedReason)
	})
	assert.Equal(t, startTime.Unix(), restarted.Status.StartTime.Unix(), "a restart moved the start time, from which activeDeadlineSeconds counts")
	assert.Nil(t, apimeta.FindStatusCondition(restarted.Status.Conditions, trainer.TrainJobSuspended), "a restart is no suspension")
	assert.Equal(t, restartsBefore+1, stallMetric(t, "trainjob_restarts_total", map[string]string{"cause": "stall"}))

	// Ready again, and no progress since: stalled again, a deadline after the pods were ready.
	setJobSetStatus(t, js, readyStatus)
	ready := waitForTrainJob(t, tj, stateIs(trainer.TrainJobRunning))
	require.NotNil(t, ready.Status.ReadyTime)
	waitForJobSet(t, tj, suspended("2"))
	again := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason)
	})
	stalledAt := apimeta.FindStatusCondition(again.Status.Conditions, trainer.TrainJobStalled).LastTransitionTime
	assert.GreaterOrEqual(t, stalledAt.Sub(ready.Status.ReadyTime.Time), 2*time.Second, "the stall clock did not start again when the pods were ready")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Subset(c, eventReasons(t, tj), []string{"Warning/ProgressDeadlineExceeded", "Normal/Restarted"})
	}, timeout, interval)
	assert.NotContains(t, eventReasons(t, tj), "Normal/Resumed")
}

// Report only says so: under upstream's conditions, the default, Stalled=True is the only
// condition of a stalled TrainJob, which is still Running, and goes once the trainer's progress
// advances again. The TrainJob's spec.progressDeadlineSeconds overrides its runtime's.
func TestAReportedStallEndsWhenProgressAdvances(t *testing.T) {
	withManager(t, controller.Options{Conditions: controller.UpstreamConditions})
	ns := newNamespace(t)
	runtime := stallRuntime(t, ns, &trainer.StallPolicy{ProgressDeadlineSeconds: 3600, Action: trainer.StallActionReport})
	tj, _ := runTrainJob(t, utiltesting.MakeTrainJob("slow", ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).ProgressDeadlineSeconds(2).Obj())

	reportProgress(t, tj, 10)
	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason)
	})
	assert.Len(t, got.Status.Conditions, 1, "upstream's conditions and Stalled only")
	assert.Equal(t, trainer.TrainJobRunning, got.Status.State)
	assert.Contains(t, got.Status.Conditions[0].Message, "spec.progressDeadlineSeconds (2s)")
	assert.Equal(t, ptr.To(false), waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {}).Spec.Suspend, "Report stopped the pods")

	reportProgress(t, tj, 20)
	got = waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Empty(c, tj.Status.Conditions)
		assert.Equal(c, trainer.TrainJobRunning, tj.Status.State)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Subset(c, eventReasons(t, got), []string{"Warning/ProgressDeadlineExceeded", "Normal/ProgressResumed"})
	}, timeout, interval)
}
