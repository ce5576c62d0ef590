package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// stallDeadline is the runtimes' progress deadline here: short, for a quick suite, and long
// enough that a report is seen before it passes.
const stallDeadline = 3

// hangingTrainJob runs a TrainJob of 2 nodes whose KWOK pods keep running, of a runtime with the
// stall policy's action, and reports progress for it as its trainer would, once: then the trainer
// falls silent. It returns the TrainJob, Running, the trainer's reporter and token, and when the
// report was accepted.
func hangingTrainJob(t *testing.T, action trainer.StallAction) (*trainer.TrainJob, reporter, string, time.Time) {
	t.Helper()
	ns := newNamespace(t)
	createRuntime(t, ns, "hangs", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).
		StallPolicy(&trainer.StallPolicy{ProgressDeadlineSeconds: stallDeadline, Action: action}).Obj())
	tj := runningTrainJob(t, ns, "hangs", "hangs")
	tj = waitForTrainJob(t, tj, stateIs(trainer.TrainJobRunning))
	trainerSide, token := trainerOf(t, tj)
	require.Equal(t, http.StatusOK, trainerSide.post(t, token, report(10)))
	reported := time.Now()
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.NotNil(c, tj.Status.LastProgressTime, "the report did not start the stall clock")
	})
	return tj, trainerSide, token, reported
}

// runningPods are the UIDs of the TrainJob's pods that run.
func runningPods(c require.TestingT, tj *trainer.TrainJob) []string {
	var uids []string
	for _, p := range pods(c, tj) {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			uids = append(uids, string(p.UID))
		}
	}
	return uids
}

// A trainer that reports, then hangs with every pod running: its TrainJob is Stalled and Failed,
// as its runtime's policy says, once the deadline passed since the report; its pods are stopped.
// The same report sent again, as a trainer stuck at one step may, is no progress. Upstream's SDK
// sees the TrainJob Failed.
func TestAStalledTrainJobFails(t *testing.T) {
	tj, trainerSide, token, reported := hangingTrainJob(t, trainer.StallActionFail)
	first := current(t, tj).Status
	time.Sleep(time.Second) // The report's lastUpdatedTime, the trainer's clock, is a second later.
	require.Equal(t, http.StatusOK, trainerSide.post(t, token, report(10)))
	again := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.True(c, tj.Status.TrainerStatus.LastUpdatedTime.After(first.TrainerStatus.LastUpdatedTime.Time), "the report sent again is not written")
	})
	assert.Equal(t, first.LastProgressTime.Unix(), again.Status.LastProgressTime.Unix(), "the same report sent again moved lastProgressTime")

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		isTrue(trainer.TrainJobFailed)(c, tj)
		isTrue(trainer.TrainJobStalled)(c, tj)
	})
	failed := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
	assert.Equal(t, trainer.TrainJobProgressDeadlineExceededReason, failed.Reason)
	assert.GreaterOrEqual(t, failed.LastTransitionTime.Sub(reported.Truncate(time.Second)), stallDeadline*time.Second, "failed before its deadline")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, pods(c, tj), "the pods of a TrainJob failed for a stall run on")
		assert.Equal(c, "Failed", sdkStatus(c, got, 2))
		assert.Subset(c, utiltesting.EventReasons(c, k8sClient, tj), []string{"Warning/ProgressDeadlineExceeded"})
	}, timeout, interval)
}

// A trainer that reports, then hangs with every pod running: its TrainJob is Stalled and
// restarted as a whole, its pods replaced by new ones that run, without ever being suspended
// itself; the stall is over, and the SDK sees it Running again. Its deadline may change while it
// runs: raised, it stalls no more.
func TestAStalledTrainJobIsRestarted(t *testing.T) {
	tj, _, _, _ := hangingTrainJob(t, trainer.StallActionRestart)
	before := runningPods(t, tj)
	require.Len(t, before, 2)

	restarted := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.GreaterOrEqual(c, tj.Status.StallRestarts, int32(1))
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		obj := current(c, tj)
		obj.Spec.ProgressDeadlineSeconds = ptr.To[int32](3600)
		assert.NoError(c, k8sClient.Update(t.Context(), obj))
	}, timeout, interval)
	assert.Equal(t, tj.Status.StartTime.Unix(), restarted.Status.StartTime.Unix(), "a restart moved the start time, from which activeDeadlineSeconds counts")
	assert.False(t, ptr.Deref(restarted.Spec.Suspend, false), "the operator suspended the TrainJob itself")

	running := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		stateIs(trainer.TrainJobRunning)(c, tj)
		assert.Empty(c, tj.Status.Conditions, "the stall is over: upstream's SDK must see the TrainJob run")
		after := runningPods(c, tj)
		assert.Len(c, after, 2)
		for _, uid := range before {
			assert.NotContains(c, after, uid, "a pod from before the restart still runs")
		}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "Running", sdkStatus(c, running, 2))
		assert.Subset(c, utiltesting.EventReasons(c, k8sClient, tj), []string{"Warning/ProgressDeadlineExceeded", "Normal/Restarted"})
	}, timeout, interval)
	assert.Never(t, func() bool { return current(t, tj).Status.StallRestarts != running.Status.StallRestarts },
		2*stallDeadline*time.Second, interval, "restarted again past a deadline raised while it ran")
}
