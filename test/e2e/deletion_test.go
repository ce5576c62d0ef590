package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

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
	"github.com/trainjob/operator/test/testenv"
)

// runningTrainJob creates a TrainJob of two pods that run for a long time, and waits until they run.
func runningTrainJob(t *testing.T, ns, name, runtime string) *trainer.TrainJob {
	t.Helper()
	tj := createTrainJob(t, ns, name, runtime, func(w *utiltesting.TrainJobWrapper) {
		w.NumNodes(2)
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, bound(pods(c, tj))) }, timeout, interval)
	return tj
}

// TestRuntimeChangesLeaveRunningTrainJobsAlone edits, then deletes, the runtime of a running
// TrainJob: runtimes are blueprints, so the TrainJob's JobSet is neither rewritten nor recreated,
// and the TrainJob can still be suspended and resumed.
func TestRuntimeChangesLeaveRunningTrainJobsAlone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	rt := createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	tj := runningTrainJob(t, ns, "steady", rt.Name)
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))

	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(rt), rt))
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "busybox:edited"
	require.NoError(t, k8sClient.Update(ctx, rt))
	time.Sleep(time.Second)
	require.NoError(t, k8sClient.Delete(ctx, rt))
	time.Sleep(time.Second)

	again := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), again))
	assert.Equal(t, js.UID, again.UID, "the JobSet was recreated")
	assert.Equal(t, js.Generation, again.Generation, "the JobSet was rewritten")
	assert.Equal(t, 2, bound(pods(t, tj)))
	got := waitForTrainJob(t, tj, stateIs(trainer.TrainJobRunning))
	assert.False(t, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobFailed), "a TrainJob failed as its runtime went")

	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, names(pods(c, tj))) }, timeout, interval)
	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, bound(pods(c, tj))) }, timeout, interval,
		"a TrainJob whose runtime is gone resumes")
}

// TestDeleteRunningTrainJob deletes running TrainJobs with background and foreground cascading:
// everything they own goes away, and nothing comes back. A finalizer of the test's holds each
// TrainJob for a while after its deletion, as another controller's might: the operator must not
// build anything for a TrainJob that is going, even once its JobSet is gone (foreground).
func TestDeleteRunningTrainJob(t *testing.T) {
	const hold = "e2e.trainer.kubeflow.org/hold"
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			ns := newNamespace(t)
			createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
			tj := runningTrainJob(t, ns, "doomed", "plain")
			require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Finalizers = append(tj.Finalizers, hold) }))
			js := &jobsetv1alpha2.JobSet{}
			require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
			require.NoError(t, k8sClient.Delete(ctx, tj, client.PropagationPolicy(policy)))

			jobSetGone := func(c require.TestingT) {
				assert.True(c, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})), "the JobSet")
			}
			if policy == metav1.DeletePropagationForeground {
				require.EventuallyWithT(t, func(c *assert.CollectT) { jobSetGone(c) }, timeout, interval, "the JobSet goes first")
			}
			time.Sleep(2 * time.Second)
			again := &jobsetv1alpha2.JobSet{}
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), again); err == nil {
				assert.Equal(t, js.UID, again.UID, "a JobSet was created for a TrainJob being deleted")
			} else {
				jobSetGone(t)
			}

			require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) {
				tj.Finalizers = slices.DeleteFunc(tj.Finalizers, func(f string) bool { return f == hold })
			}))
			gone := func(c require.TestingT) {
				assert.True(c, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &trainer.TrainJob{})), "the TrainJob")
				jobSetGone(c)
				assert.Empty(c, names(jobsOf(c, tj)))
				assert.Empty(c, names(pods(c, tj)))
			}
			require.EventuallyWithT(t, func(c *assert.CollectT) { gone(c) }, timeout, interval, "everything the TrainJob owned is deleted")
			time.Sleep(2 * time.Second)
			gone(t) // Nothing came back.
		})
	}
}
