package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// update changes a TrainJob as a user or Kueue does: read, change, write, again on a conflict.
func update(t *testing.T, tj *trainer.TrainJob, change func(*trainer.TrainJob)) error {
	t.Helper()
	var err error
	for range 10 {
		got := &trainer.TrainJob{}
		require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got))
		change(got)
		if err = k8sClient.Update(context.Background(), got); err == nil || !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// TestEditsWhileSuspendedReachThePods creates a suspended TrainJob, makes the edits a user or
// Kueue makes while it waits (nodes, env, labels, node selector, tolerations), and resumes it:
// its pods run with every edit, and it completes.
func TestEditsWhileSuspendedReachThePods(t *testing.T) {
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	tj := createTrainJob(t, ns, "edited", "plain", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(1).Suspend(true) })
	waitForTrainJob(t, tj, isTrue(trainer.TrainJobSuspended))
	assert.Empty(t, names(pods(t, tj)), "a suspended TrainJob has pods")

	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.Trainer.NumNodes = ptr.To[int32](2)
		tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}}
		tj.Spec.Labels = map[string]string{"team": "vision"}
		tj.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{testenv.NodeLabel: "kwok"}, Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}}}}
	}))
	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ps := pods(c, tj)
		require.Len(c, ps, 2)
		for _, p := range ps {
			assert.Equal(c, "vision", p.Labels["team"])
			assert.Equal(c, "kwok", p.Spec.NodeSelector[testenv.NodeLabel])
			assert.Contains(c, p.Spec.Tolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists})
			assert.Contains(c, p.Spec.Containers[0].Env, corev1.EnvVar{Name: "EPOCHS", Value: "3"})
		}
	}, timeout, interval, "the resumed TrainJob's pods carry the edits")
	got := waitForComplete(t, tj)
	// Created suspended, it has a start time only once it was resumed.
	assert.NotNil(t, got.Status.StartTime, "the resumed TrainJob has no start time")
}

// TestSuspendRunningTrainJob suspends a running TrainJob: its pods go away; resumed, they come
// back and it completes.
func TestSuspendRunningTrainJob(t *testing.T) {
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	tj := createTrainJob(t, ns, "paused", "plain", func(w *utiltesting.TrainJobWrapper) {
		w.NumNodes(2)
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "10s"}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ps := pods(c, tj)
		require.Len(c, ps, 2)
		for _, p := range ps {
			assert.Equal(c, corev1.PodRunning, p.Status.Phase)
		}
	}, timeout, interval, "the TrainJob runs")

	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }))
	waitForTrainJob(t, tj, isTrue(trainer.TrainJobSuspended))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, names(pods(c, tj))) }, timeout, interval,
		"the suspended TrainJob's pods go away")
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), js))
	assert.True(t, ptr.Deref(js.Spec.Suspend, false))

	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.Suspend = ptr.To(false)
		tj.Spec.Annotations = nil // Run as long as the cluster's pods do.
	}))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, pods(c, tj), 2) }, timeout, interval,
		"the resumed TrainJob's pods come back")
	waitForComplete(t, tj)
}

// TestARuntimeEditNeverReachesAQueuedTrainJob does as a user and Kueue would: a TrainJob waits
// suspended, its runtime's image is edited, a runtime patch is added to it (Kueue's placement),
// and it is resumed: its pods run the image of the runtime as it was when the TrainJob was built,
// with the patch, and it completes.
func TestARuntimeEditNeverReachesAQueuedTrainJob(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	rt := createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	tj := createTrainJob(t, ns, "queued", "plain", func(w *utiltesting.TrainJobWrapper) { w.Suspend(true) })
	waitForTrainJob(t, tj, stateIs(trainer.TrainJobSuspended))
	built := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), built))
	image := built.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image

	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(rt), rt))
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "registry.invalid/edited:1"
	require.NoError(t, k8sClient.Update(ctx, rt))
	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{utiltesting.JobPatch("kueue.x-k8s.io/manager",
			utiltesting.PodPatch("node", nil, &trainer.PodSpecPatch{NodeSelector: map[string]string{testenv.NodeLabel: "kwok"}}))}
	}))
	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ps := pods(c, tj)
		require.NotEmpty(c, ps)
		for _, p := range ps {
			assert.Equal(c, image, p.Spec.Containers[0].Image, "the runtime's edit reached the queued TrainJob")
			assert.Equal(c, "kwok", p.Spec.NodeSelector[testenv.NodeLabel], "Kueue's patch")
		}
	}, timeout, interval)
	waitForComplete(t, tj)
}
