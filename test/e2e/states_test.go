package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// runningIs checks the TrainJob's Running condition and its READY column.
func runningIs(status metav1.ConditionStatus, reason, ready string) func(c *assert.CollectT, tj *trainer.TrainJob) {
	return func(c *assert.CollectT, tj *trainer.TrainJob) {
		cond := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobRunning)
		if assert.NotNil(c, cond, "no Running condition: %v", tj.Status.Conditions) {
			assert.Equal(c, status, cond.Status)
			assert.Equal(c, reason, cond.Reason)
		}
		assert.Equal(c, ready, tj.Status.Ready)
	}
}

// TestRunningFollowsThePods runs a TrainJob whose pods run on: once the kubelet reports both ready
// and the Job controller and JobSet's controller have counted them, the TrainJob is Running 2/2;
// suspended, it no longer is; resumed, it is again.
func TestRunningFollowsThePods(t *testing.T) {
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	tj := runningTrainJob(t, ns, "steady", "plain")

	got := waitForTrainJob(t, tj, runningIs(metav1.ConditionTrue, trainer.TrainJobNodesReadyReason, "2/2"))
	assert.Equal(t, trainer.TrainJobRunning, got.Status.Conditions[0].Type, "STATE shows Running")

	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }))
	waitForTrainJob(t, tj, runningIs(metav1.ConditionFalse, trainer.TrainJobSuspendedReason, "0/2"))
	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))
	waitForTrainJob(t, tj, runningIs(metav1.ConditionTrue, trainer.TrainJobNodesReadyReason, "2/2"))
}

// TestTTLDeletesAFinishedTrainJobAndAllItOwns runs TrainJobs to Complete: the one with
// ttlSecondsAfterFinished 0 goes at once with its JobSet, Jobs and pods; the one without stays.
func TestTTLDeletesAFinishedTrainJobAndAllItOwns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	kept := createTrainJob(t, ns, "kept", "plain", nil)
	brief := createTrainJob(t, ns, "brief", "plain", func(w *utiltesting.TrainJobWrapper) { w.TTLSecondsAfterFinished(0) })

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(brief), &trainer.TrainJob{})), "the TrainJob")
		assert.True(c, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(brief), &jobsetv1alpha2.JobSet{})), "its JobSet")
		assert.Empty(c, names(jobsOf(c, brief)), "its Jobs")
		assert.Empty(c, names(pods(c, brief)), "its pods")
	}, timeout, interval, "a TrainJob with ttlSecondsAfterFinished 0 is not deleted with all it owns")
	got := waitForComplete(t, kept)
	assert.NotEmpty(t, names(jobsOf(t, got)), "the TrainJob without a TTL lost its Jobs")
}
