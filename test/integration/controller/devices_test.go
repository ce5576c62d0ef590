package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// computeDomainRuntime creates a namespaced torch runtime "nvl72" of two nodes whose TrainJobs
// each get an NVIDIA ComputeDomain.
func computeDomainRuntime(t *testing.T, ns string) {
	t.Helper()
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")).NumNodes(2).Obj()
	spec.ComputeDomain = &trainer.ComputeDomainPolicy{AllocationMode: trainer.ComputeDomainAllocationAll}
	require.NoError(t, k8sClient.Create(context.Background(), utiltesting.TrainingRuntime("nvl72", ns, spec)))
}

func computeDomain(ns, name string) *unstructured.Unstructured {
	cd := &unstructured.Unstructured{}
	cd.SetGroupVersionKind(pipeline.ComputeDomainGVK)
	cd.SetNamespace(ns)
	cd.SetName(name)
	return cd
}

// A runtime's computeDomain gives each TrainJob an NVIDIA ComputeDomain of its own, made before
// its JobSet, whose channel every node pod claims beside the TrainJob's own devices; it is deleted
// once the TrainJob finished and none of its pods runs.
func TestAComputeDomainComesAndGoesWithItsTrainJob(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	computeDomainRuntime(t, ns)
	tj := utiltesting.MakeTrainJob("llama", ns).RuntimeRef(trainer.TrainingRuntimeKind, "nvl72").
		Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("gb200-x4")}}}).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	cd := computeDomain(ns, "llama")
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(cd), cd))
	assert.Less(t, creationRevision(t, cd), creationRevision(t, js), "the JobSet was created before the ComputeDomain")
	tj = got(t, tj)
	assert.True(t, metav1.IsControlledBy(cd, tj), "the ComputeDomain is not the TrainJob's")
	assert.Equal(t, map[string]any{
		"numNodes": int64(0), // Written out: NVIDIA's 25.8 CRD requires it.
		"channel":  map[string]any{"allocationMode": "All", "resourceClaimTemplate": map[string]any{"name": "llama-compute-domain-channel"}},
	}, cd.Object["spec"])
	pod := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	assert.Equal(t, []corev1.PodResourceClaim{
		{Name: "gpus", ResourceClaimTemplateName: ptr.To("gb200-x4")},
		{Name: "compute-domain-channel", ResourceClaimTemplateName: ptr.To("llama-compute-domain-channel")},
	}, pod.ResourceClaims)
	assert.Equal(t, []corev1.ResourceClaim{{Name: "gpus"}, {Name: "compute-domain-channel"}}, pod.Containers[0].Resources.Claims)
	require.NotNil(t, tj.Status.RuntimeSnapshot)
	assert.Equal(t, &trainer.ComputeDomainPolicy{AllocationMode: trainer.ComputeDomainAllocationAll}, tj.Status.RuntimeSnapshot.ComputeDomain)

	// A pod of the JobSet still stopping (its grace period, a checkpoint's) keeps the
	// ComputeDomain, whose channel it may still use.
	stopping := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "llama-node-0-0-abcde", Namespace: ns, Labels: map[string]string{jobsetv1alpha2.JobSetNameKey: "llama"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "node", Image: "trainer"}}},
	}
	require.NoError(t, k8sClient.Create(ctx, stopping))
	stopping.Status.Phase = corev1.PodRunning
	require.NoError(t, k8sClient.Status().Update(ctx, stopping))
	finish(t, tj)
	time.Sleep(2 * time.Second)
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(cd), computeDomain(ns, "llama")), "the ComputeDomain went while a pod ran")
	stopping.Status.Phase = corev1.PodSucceeded
	require.NoError(t, k8sClient.Status().Update(ctx, stopping))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cd), computeDomain(ns, "llama"))
		assert.True(c, apierrors.IsNotFound(err), "the finished TrainJob's ComputeDomain is still there: %v", err)
	}, timeout, interval)
	assert.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(js), &jobsetv1alpha2.JobSet{}), "the finished TrainJob's JobSet went with the ComputeDomain")
}

// A ComputeDomain of the TrainJob's name that someone else made is never changed nor deleted: the
// TrainJob waits, saying why, and makes no JobSet whose pods would join someone else's domain.
func TestSomeoneElsesComputeDomainIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	computeDomainRuntime(t, ns)
	theirs := computeDomain(ns, "taken")
	theirs.Object["spec"] = map[string]any{"numNodes": int64(2), "channel": map[string]any{"resourceClaimTemplate": map[string]any{"name": "their-channel"}}}
	require.NoError(t, k8sClient.Create(ctx, theirs))
	tj := utiltesting.MakeTrainJob("taken", ns).RuntimeRef(trainer.TrainingRuntimeKind, "nvl72").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobObjectNotOwnedReason)
		if created := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated); assert.NotNil(c, created) {
			assert.Contains(c, created.Message, `ComputeDomain "taken" exists and is not this TrainJob's`)
		}
	})
	after := computeDomain(ns, "taken")
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(theirs), after))
	assert.Equal(t, theirs.GetUID(), after.GetUID(), "someone else's ComputeDomain was deleted")
	assert.Equal(t, theirs.GetResourceVersion(), after.GetResourceVersion(), "someone else's ComputeDomain was changed")
	assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})),
		"the JobSet was made without the TrainJob's own ComputeDomain")
}

// A ComputeDomain the TrainJob made earlier, whose spec differs from what it builds now (its
// runtime changed before the TrainJob's first JobSet recorded it), is used as it is: its spec
// cannot change, and its channel's template has the TrainJob's name all the same.
func TestAnEarlierComputeDomainOfTheTrainJobsIsUsedAsItIs(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	// The runtime comes later: the TrainJob waits for it.
	tj := utiltesting.MakeTrainJob("earlier", ns).RuntimeRef(trainer.TrainingRuntimeKind, "nvl72").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	earlier := computeDomain(ns, "earlier")
	earlier.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind,
		Name: tj.Name, UID: tj.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
	earlier.Object["spec"] = map[string]any{"numNodes": int64(0), "channel": map[string]any{
		"allocationMode": "Single", "resourceClaimTemplate": map[string]any{"name": "earlier-compute-domain-channel"}}}
	require.NoError(t, k8sClient.Create(ctx, earlier))

	computeDomainRuntime(t, ns) // allocationMode All.
	waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	after := computeDomain(ns, "earlier")
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(after), after))
	assert.Equal(t, earlier.GetUID(), after.GetUID(), "the TrainJob's ComputeDomain was made anew")
	assert.Equal(t, earlier.Object["spec"], after.Object["spec"])
	assert.Equal(t, map[string]string{trainer.TrainJobNameLabel: "earlier"}, after.GetLabels(), "the operator's label")
}
