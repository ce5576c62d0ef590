package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestADrainOfTheRealNodeLeavesARunningGangWhole runs a gang of two torch nodes (Coscheduling)
// on the real node and drains the node as `kubectl drain` does: cordoned, then each of the gang's
// pods evicted through the eviction API. The API server refuses every eviction, for the gang's
// PodDisruptionBudget, which kube-controller-manager's disruption controller keeps the count of:
// both pods run on. Suspended, the TrainJob has no budget left.
func TestADrainOfTheRealNodeLeavesARunningGangWhole(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	shippedRuntimeCopy(t, ns, "gang", "torch-distributed", func(spec *trainer.TrainingRuntimeSpec) {
		spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
			Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}}
		for i := range spec.Template.Spec.ReplicatedJobs {
			spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec.SchedulerName = testenv.CoschedulingScheduler
		}
	})
	tj := onTheRealNode(utiltesting.MakeTrainJob("drain", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang"), "torch", 2)
	tj.Spec.Trainer.Command = []string{"/probe", "pause"}
	require.NoError(t, k8sClient.Create(ctx, tj))
	explainOnFailure(t, tj)
	utiltesting.WaitFor(t, k8sClient, realPolling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, stateIs(trainer.TrainJobRunning))

	// The budget holds once the disruption controller counted the gang's two pods healthy.
	utiltesting.WaitFor(t, k8sClient, realPolling, client.ObjectKeyFromObject(tj), &policyv1.PodDisruptionBudget{},
		func(c *assert.CollectT, pdb *policyv1.PodDisruptionBudget) {
			assert.Equal(c, 2, pdb.Spec.MinAvailable.IntValue())
			assert.Equal(c, pdb.Generation, pdb.Status.ObservedGeneration)
			assert.Equal(c, int32(2), pdb.Status.CurrentHealthy)
			assert.Equal(c, int32(0), pdb.Status.DisruptionsAllowed)
		})

	node := &corev1.Node{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: testenv.RealNodeName}, node))
	cordon := func(unschedulable bool) error {
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Unschedulable = unschedulable
		return k8sClient.Patch(ctx, node, patch)
	}
	require.NoError(t, cordon(true))
	t.Cleanup(func() { assert.NoError(t, cordon(false), "uncordoning the real node") })

	clientset, err := kubernetes.NewForConfig(cluster.Env.Config)
	require.NoError(t, err)
	running := pods(t, tj)
	require.Len(t, running, 2)
	for _, p := range running {
		require.Equal(t, testenv.RealNodeName, p.Spec.NodeName)
		err := clientset.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns}})
		require.Error(t, err, "pod %s of the running gang was evicted", p.Name)
		assert.True(t, apierrors.IsTooManyRequests(err), "the eviction of %s: %v", p.Name, err)
		assert.ErrorContains(t, err, "disruption budget")
	}
	for _, p := range pods(t, tj) {
		assert.Nil(t, p.DeletionTimestamp, "pod %s is going", p.Name)
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
	}
	assert.Len(t, pods(t, tj), 2)

	require.NoError(t, update(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &policyv1.PodDisruptionBudget{}))
	}, timeout, interval, "the suspended gang keeps its PodDisruptionBudget")
}
