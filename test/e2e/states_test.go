package e2e

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetconstants "sigs.k8s.io/jobset/pkg/constants"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// sdkStatus is the status upstream's Python SDK reports for a TrainJob (kubeflow/sdk, the
// Kubernetes backend's __get_trainjob_from_cr), read from the same objects: Complete or Failed
// when such a condition is True; else, only while the TrainJob has no condition at all, Running
// once as many node pods run or have succeeded as it has nodes; else Created, the SDK's default.
// Where the SDK raises on a pod (a launcher or node pod without its completion index label or a
// container named node), the check fails.
func sdkStatus(c *assert.CollectT, tj *trainer.TrainJob, numNodes int) string {
	list := &corev1.PodList{}
	selector, err := labels.Parse(jobsetv1alpha2.JobSetNameKey + "=" + tj.Name + "," + jobsetv1alpha2.ReplicatedJobNameKey +
		" in (dataset-initializer, model-initializer, launcher, node)")
	require.NoError(c, err)
	require.NoError(c, k8sClient.List(context.Background(), list, client.InNamespace(tj.Namespace), client.MatchingLabelsSelector{Selector: selector}))
	running := 0
	for _, pod := range list.Items {
		if job := pod.Labels[jobsetv1alpha2.ReplicatedJobNameKey]; job != "launcher" && job != "node" {
			continue
		}
		_, indexed := pod.Labels[batchv1.JobCompletionIndexAnnotation]
		assert.True(c, indexed, "pod %s has no %s label: the SDK fails to list the TrainJob's steps", pod.Name, batchv1.JobCompletionIndexAnnotation)
		assert.True(c, slices.ContainsFunc(pod.Spec.Containers, func(ct corev1.Container) bool { return ct.Name == "node" }),
			"pod %s has no container named node: the SDK fails to list the TrainJob's steps", pod.Name)
		if pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded {
			running++
		}
	}
	status := "Created"
	if len(tj.Status.Conditions) > 0 {
		for _, cond := range tj.Status.Conditions {
			if (cond.Type == trainer.TrainJobComplete || cond.Type == trainer.TrainJobFailed) && cond.Status == metav1.ConditionTrue {
				status = cond.Type
			}
		}
	} else if running == numNodes {
		status = "Running"
	}
	return status
}

// sees checks what upstream's SDK, the STATE column and the READY column say of the TrainJob.
func sees(sdk, state, ready string) func(c *assert.CollectT, tj *trainer.TrainJob) {
	return func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, sdk, sdkStatus(c, tj, 2), "what the SDK says; conditions %v", tj.Status.Conditions)
		assert.Equal(c, state, tj.Status.State, "status.state")
		assert.Equal(c, ready, tj.Status.Ready, "status.ready")
	}
}

// TestTheSDKSeesTheTrainJobRun runs a TrainJob of two nodes whose pods run on, with the
// operator's default conditions (upstream's): once both pods run, upstream's SDK says Running, as
// do the STATE and READY columns (2/2); suspended, the SDK says Created (it knows no Suspended);
// resumed, Running again (kubeflow/sdk#803: upstream's Suspended=False keeps it at Created).
func TestTheSDKSeesTheTrainJobRun(t *testing.T) {
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	tj := runningTrainJob(t, ns, "steady", "plain")

	waitForTrainJob(t, tj, sees("Running", trainer.TrainJobRunning, "2/2"))
	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }))
	waitForTrainJob(t, tj, sees("Created", trainer.TrainJobSuspended, "0/2"))
	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))
	waitForTrainJob(t, tj, sees("Running", trainer.TrainJobRunning, "2/2"))
}

// TestAFinishedTrainJobHasUpstreamsConditions runs TrainJobs to the end, one of them suspended
// and resumed first: each has exactly the conditions upstream's e2e tests expect of a finished
// TrainJob, [Complete] with JobSet's reason and message, and the SDK says Complete.
func TestAFinishedTrainJobHasUpstreamsConditions(t *testing.T) {
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	straight := createTrainJob(t, ns, "straight", "plain", nil)
	resumed := createTrainJob(t, ns, "resumed", "plain", func(w *utiltesting.TrainJobWrapper) { w.Suspend(true) })
	waitForTrainJob(t, resumed, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, trainer.TrainJobSuspended, tj.Status.State)
	})
	require.NoError(t, update(t, resumed, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))

	want := []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue,
		Reason: jobsetconstants.AllJobsCompletedReason, Message: jobsetconstants.AllJobsCompletedMessage}}
	for _, tj := range []*trainer.TrainJob{straight, resumed} {
		got := waitForComplete(t, tj)
		assert.Empty(t, cmp.Diff(want, got.Status.Conditions, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime", "ObservedGeneration")),
			"conditions of %s", tj.Name)
		assert.Equal(t, trainer.TrainJobComplete, got.Status.State)
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, "Complete", sdkStatus(c, got, 1)) }, timeout, interval)
	}
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
