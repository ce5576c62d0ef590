package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/gang"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// Kubernetes' own gang scheduling (KEP-4671, upstream's KEP-3015): a runtime's
// podGroupPolicy.workload gives each TrainJob a scheduling.k8s.io/v1alpha2 Workload and PodGroup,
// made before its JobSet, and the gang's pods name the PodGroup. Their specs cannot change: a
// TrainJob resized while suspended gets both anew.
func TestKubernetesOwnGangHasAWorkloadAndAPodGroup(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}})
	tj := utiltesting.MakeTrainJob("native", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	pg := &schedulingv1alpha2.PodGroup{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), pg))
	workload := &schedulingv1alpha2.Workload{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), workload))
	assert.Less(t, creationRevision(t, workload), creationRevision(t, pg), "the PodGroup was created before its Workload")
	assert.Less(t, creationRevision(t, pg), creationRevision(t, js), "the JobSet was created before its PodGroup")
	tj = got(t, tj)
	for _, obj := range []client.Object{pg, workload} {
		assert.True(t, metav1.IsControlledBy(obj, tj), "%T is not the TrainJob's", obj)
	}
	gangOf := func(n int32) schedulingv1alpha2.PodGroupSchedulingPolicy {
		return schedulingv1alpha2.PodGroupSchedulingPolicy{Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: n}}
	}
	assert.Equal(t, &schedulingv1alpha2.PodGroupTemplateReference{Workload: &schedulingv1alpha2.WorkloadPodGroupTemplateReference{
		WorkloadName: "native", PodGroupTemplateName: gang.WorkloadTemplate}}, pg.Spec.PodGroupTemplateRef)
	assert.Equal(t, gangOf(2), pg.Spec.SchedulingPolicy)
	assert.Equal(t, &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: trainer.GroupVersion.Group, Kind: trainer.TrainJobKind, Name: "native"},
		workload.Spec.ControllerRef)
	assert.Equal(t, []schedulingv1alpha2.PodGroupTemplate{{Name: gang.WorkloadTemplate, SchedulingPolicy: gangOf(2)}}, workload.Spec.PodGroupTemplates)
	assert.Equal(t, &corev1.PodSchedulingGroup{PodGroupName: ptr.To("native")}, js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.SchedulingGroup)

	// Resized while suspended: the PodGroup and Workload cannot change, so both are made anew, and
	// the JobSet follows once the PodGroup is the new size's.
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) })
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, ptr.To(true), js.Spec.Suspend) })
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) {
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](3)}
		tj.Spec.Suspend = ptr.To(false)
	})
	waitForJobSet(t, tj, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
		assert.Equal(c, ptr.To[int32](3), js.Spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	})
	again, workloadAgain := &schedulingv1alpha2.PodGroup{}, &schedulingv1alpha2.Workload{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), again))
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), workloadAgain))
	assert.NotEqual(t, pg.UID, again.UID, "the PodGroup was not made anew")
	assert.Equal(t, gangOf(3), again.Spec.SchedulingPolicy)
	assert.NotEqual(t, workload.UID, workloadAgain.UID, "the Workload was not made anew")
	assert.Equal(t, gangOf(3), workloadAgain.Spec.PodGroupTemplates[0].SchedulingPolicy)
}

// A PodGroup of the TrainJob's name that someone else made is never changed nor deleted: the
// TrainJob waits for it to go, and says why.
func TestSomeoneElsesKubernetesPodGroupIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	gangRuntime(t, ns, trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}})
	theirs := &schedulingv1alpha2.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns},
		Spec: schedulingv1alpha2.PodGroupSpec{SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{
			Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 7}}},
	}
	require.NoError(t, k8sClient.Create(ctx, theirs))
	tj := utiltesting.MakeTrainJob("taken", ns).RuntimeRef(trainer.TrainingRuntimeKind, "gang").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobObjectNotOwnedReason)
	})
	after := &schedulingv1alpha2.PodGroup{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(theirs), after))
	assert.Equal(t, theirs.UID, after.UID, "someone else's PodGroup was deleted")
	assert.Equal(t, theirs.ResourceVersion, after.ResourceVersion, "someone else's PodGroup was changed")
	assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})),
		"the JobSet was made without the gang's PodGroup")
}
