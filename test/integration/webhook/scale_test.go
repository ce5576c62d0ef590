package webhook

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var polling = utiltesting.Polling{Timeout: 20 * time.Second, Interval: 50 * time.Millisecond}

// cpuTarget is an autoscaling metric: the trainer pods' CPU at 60% of their request.
var cpuTarget = autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
	Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](60)},
}}

// elasticRuntime creates a runtime of 1 to 3 nodes, autoscaled on CPU when metrics are given.
func elasticRuntime(t *testing.T, ns, name string, metrics ...autoscalingv2.MetricSpec) {
	spec := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
		ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](3), Metrics: metrics},
	}).Obj()
	require.NoError(t, k8sClient.Create(context.Background(), utiltesting.TrainingRuntime(name, ns, spec)))
}

// scale sets a TrainJob's size through its scale subresource, as kubectl scale does: a merge
// patch of the Scale's spec.replicas.
func scale(tj *trainer.TrainJob, replicas int32) error {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))
	return k8sClient.SubResource("scale").Patch(context.Background(), tj, patch, client.WithSubResourceBody(&autoscalingv1.Scale{}))
}

func trainerJob(js *jobsetv1alpha2.JobSet) *batchJobSpec {
	spec := js.Spec.ReplicatedJobs[0].Template.Spec
	return &batchJobSpec{parallelism: ptr.Deref(spec.Parallelism, 0), completions: ptr.Deref(spec.Completions, 0)}
}

type batchJobSpec struct{ parallelism, completions int32 }

// TestAnElasticTrainJobScales resizes a running elastic TrainJob through its scale subresource:
// it starts at maxNodes, which admission writes into spec.trainer.numNodes so that the scale
// reads it; a scale within the bounds resizes the trainer job in place (parallelism and
// completions together), and the status and the scale follow; a scale outside them, or of a
// TrainJob that is not elastic, is refused with the reason.
func TestAnElasticTrainJobScales(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	elasticRuntime(t, ns, "elastic")
	tj := utiltesting.MakeTrainJob("grow", ns).RuntimeRef(trainer.TrainingRuntimeKind, "elastic").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	assert.Equal(t, ptr.To[int32](3), tj.Spec.Trainer.NumNodes, "admission did not default numNodes to maxNodes")

	key := client.ObjectKeyFromObject(tj)
	utiltesting.WaitFor(t, k8sClient, polling, key, &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{3, 3}, trainerJob(js))
	})
	utiltesting.WaitFor(t, k8sClient, polling, key, &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(3), tj.Status.Nodes)
		assert.Equal(c, "jobset.sigs.k8s.io/jobset-name=grow,jobset.sigs.k8s.io/replicatedjob-name=node", tj.Status.Selector)
	})

	require.NoError(t, scale(tj, 1))
	js := utiltesting.WaitFor(t, k8sClient, polling, key, &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{1, 1}, trainerJob(js))
	})
	assert.Equal(t, "node=1x1", js.Annotations["trainer.kubeflow.org/training-pods"])
	assert.Equal(t, ptr.To(false), js.Spec.Suspend)
	utiltesting.WaitFor(t, k8sClient, polling, key, &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(1), tj.Status.Nodes)
		assert.Equal(c, "0/1", tj.Status.Ready)
	})
	s := &autoscalingv1.Scale{}
	require.NoError(t, k8sClient.SubResource("scale").Get(ctx, tj, s))
	assert.Equal(t, int32(1), s.Spec.Replicas)
	assert.Equal(t, int32(1), s.Status.Replicas)
	assert.Equal(t, "jobset.sigs.k8s.io/jobset-name=grow,jobset.sigs.k8s.io/replicatedjob-name=node", s.Status.Selector)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, utiltesting.EventReasons(c, k8sClient, tj), "Normal/Resized")
	}, polling.Timeout, polling.Interval)

	// The spec itself may change the size while it runs, as the scale does.
	require.NoError(t, edit(ctx, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer.NumNodes = ptr.To[int32](2) }))
	utiltesting.WaitFor(t, k8sClient, polling, key, &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{2, 2}, trainerJob(js))
	})

	err := scale(tj, 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `spec.trainer.numNodes: Invalid value: 4: TrainingRuntime "elastic" is elastic: numNodes must be between its torch.elasticPolicy's minNodes (1) and maxNodes (3)`)
	err = scale(tj, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.trainer.numNodes: Invalid value: 0")

	fixed := utiltesting.MakeTrainJob("fixed", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	require.NoError(t, k8sClient.Create(ctx, fixed))
	err = scale(fixed, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `spec.trainer.numNodes: Forbidden: the TrainJob is not elastic (ClusterTrainingRuntime "torch-distributed" has no mlPolicy.torch.elasticPolicy), so its size is fixed while it runs: suspend it first`)
}

// TestAQueuedElasticTrainJobKeepsItsAdmittedSize: Kueue stops a running TrainJob whose size
// changes and queues it again, so a queued TrainJob changes size only while suspended, and gets
// no autoscaler.
func TestAQueuedElasticTrainJobKeepsItsAdmittedSize(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	elasticRuntime(t, ns, "elastic", cpuTarget)
	tj := utiltesting.MakeTrainJob("queued", ns).RuntimeRef(trainer.TrainingRuntimeKind, "elastic").Obj()
	tj.Labels = map[string]string{trainer.KueueQueueLabel: "team-a"}
	require.NoError(t, k8sClient.Create(ctx, tj))
	utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(3), tj.Status.Nodes)
	})
	err := scale(tj, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `spec.trainer.numNodes: Forbidden: the TrainJob is admitted by Kueue (queue "team-a") at 3 nodes, and Kueue stops a running TrainJob whose size changes and queues it again: set spec.suspend to true and the new numNodes in one update`)
	assert.True(t, apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &autoscalingv2.HorizontalPodAutoscaler{})), "a queued TrainJob got an autoscaler")

	require.NoError(t, edit(ctx, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }))
	require.NoError(t, scale(tj, 2), "a suspended queued TrainJob may change size: Kueue admits it again at the new one")
	utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{2, 2}, trainerJob(js))
	})
}

// TestAnElasticTrainJobIsAutoscaled: a runtime with metrics gives each running TrainJob an
// autoscaler of its name, owned by it, aimed at its scale subresource with the runtime's bounds
// and metrics; set right when someone changes them (its behavior is the user's), deleted while
// the TrainJob is suspended and made again when it resumes. Someone else's autoscaler of the
// name is never touched.
func TestAnElasticTrainJobIsAutoscaled(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	elasticRuntime(t, ns, "elastic", cpuTarget)
	tj := utiltesting.MakeTrainJob("auto", ns).RuntimeRef(trainer.TrainingRuntimeKind, "elastic").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	key := client.ObjectKeyFromObject(tj)
	hpa := utiltesting.WaitFor(t, k8sClient, polling, key, &autoscalingv2.HorizontalPodAutoscaler{}, func(*assert.CollectT, *autoscalingv2.HorizontalPodAutoscaler) {})
	assert.True(t, metav1.IsControlledBy(hpa, tj), "the autoscaler is not the TrainJob's")
	assert.Equal(t, autoscalingv2.CrossVersionObjectReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "auto"}, hpa.Spec.ScaleTargetRef)
	assert.Equal(t, ptr.To[int32](1), hpa.Spec.MinReplicas)
	assert.Equal(t, int32(3), hpa.Spec.MaxReplicas)
	assert.Equal(t, []autoscalingv2.MetricSpec{cpuTarget}, hpa.Spec.Metrics)

	// Someone raises its maximum and tunes its behavior: the maximum is set back, the behavior kept.
	hpa.Spec.MaxReplicas = 10
	hpa.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](30)}}
	require.NoError(t, k8sClient.Update(ctx, hpa))
	utiltesting.WaitFor(t, k8sClient, polling, key, &autoscalingv2.HorizontalPodAutoscaler{}, func(c *assert.CollectT, hpa *autoscalingv2.HorizontalPodAutoscaler) {
		assert.Equal(c, int32(3), hpa.Spec.MaxReplicas)
		assert.Equal(c, ptr.To[int32](30), hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds)
	})

	require.NoError(t, edit(ctx, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(k8sClient.Get(ctx, key, &autoscalingv2.HorizontalPodAutoscaler{})), "the autoscaler outlived the suspension")
	}, polling.Timeout, polling.Interval)
	require.NoError(t, edit(ctx, tj, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))
	utiltesting.WaitFor(t, k8sClient, polling, key, &autoscalingv2.HorizontalPodAutoscaler{}, func(*assert.CollectT, *autoscalingv2.HorizontalPodAutoscaler) {})

	// A neighbour's autoscaler of the name of a new TrainJob.
	theirs := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To[int32](2), MaxReplicas: 5, Metrics: []autoscalingv2.MetricSpec{cpuTarget},
		},
	}
	require.NoError(t, k8sClient.Create(ctx, theirs))
	taken := utiltesting.MakeTrainJob("taken", ns).RuntimeRef(trainer.TrainingRuntimeKind, "elastic").Obj()
	require.NoError(t, k8sClient.Create(ctx, taken))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, utiltesting.EventReasons(c, k8sClient, taken), "Warning/ObjectNotOwned")
	}, polling.Timeout, polling.Interval)
	after := &autoscalingv2.HorizontalPodAutoscaler{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(theirs), after))
	assert.Equal(t, theirs.Spec, after.Spec, "a neighbour's autoscaler was changed")
	assert.Empty(t, after.OwnerReferences, "a neighbour's autoscaler was taken")
}

// edit changes a TrainJob as a user's update does, again on a conflict: the operator writes
// its status meanwhile.
func edit(ctx context.Context, tj *trainer.TrainJob, change func(*trainer.TrainJob)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			return err
		}
		change(tj)
		return k8sClient.Update(ctx, tj)
	})
}

// TestATrainJobNarrowsItsRuntimesElasticBounds: a TrainJob's own trainer.elasticPolicy (KEP-2903)
// narrows its runtime's bounds, and everything follows it: the size it starts at, torchrun's
// PET_NNODES, the autoscaler's range and the scale subresource (and the gang: internal/gang). Bounds beyond the
// runtime's, crossed, or for a runtime that is not elastic, are refused at admission, and they
// change only while the TrainJob is suspended.
func TestATrainJobNarrowsItsRuntimesElasticBounds(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	spec := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
		ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](2), MaxNodes: ptr.To[int32](5), Metrics: []autoscalingv2.MetricSpec{cpuTarget}},
	}).Obj()
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("wide", ns, spec)))
	bounded := func(name string, minNodes, maxNodes *int32) *trainer.TrainJob {
		return utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.TrainingRuntimeKind, "wide").
			Trainer(&trainer.Trainer{ElasticPolicy: &trainer.TrainerElasticPolicy{MinNodes: minNodes, MaxNodes: maxNodes}}).Obj()
	}

	tj := bounded("narrow", ptr.To[int32](3), ptr.To[int32](4))
	require.NoError(t, k8sClient.Create(ctx, tj))
	assert.Equal(t, ptr.To[int32](4), tj.Spec.Trainer.NumNodes, "admission did not default numNodes to the TrainJob's maxNodes")
	key := client.ObjectKeyFromObject(tj)
	utiltesting.WaitFor(t, k8sClient, polling, key, &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{4, 4}, trainerJob(js))
		assert.Contains(c, js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "PET_NNODES", Value: "3:4"})
	})
	hpa := utiltesting.WaitFor(t, k8sClient, polling, key, &autoscalingv2.HorizontalPodAutoscaler{}, func(*assert.CollectT, *autoscalingv2.HorizontalPodAutoscaler) {})
	assert.Equal(t, ptr.To[int32](3), hpa.Spec.MinReplicas)
	assert.Equal(t, int32(4), hpa.Spec.MaxReplicas)

	require.NoError(t, scale(tj, 3))
	err := scale(tj, 5)
	require.Error(t, err, "a scale within the runtime's bounds but beyond the TrainJob's")
	assert.Contains(t, err.Error(), `spec.trainer.numNodes: Invalid value: 5: TrainingRuntime "wide" is elastic: numNodes must be between minNodes (3) and maxNodes (4), its torch.elasticPolicy's as spec.trainer.elasticPolicy narrows them`)
	err = edit(ctx, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer.ElasticPolicy.MaxNodes = ptr.To[int32](5) })
	require.Error(t, err, "the bounds of a running TrainJob changed")
	assert.Contains(t, err.Error(), "may change while the TrainJob runs: suspend it first")

	// Kueue's updates would drop the bounds: a queued TrainJob is warned.
	warned, collected, err := testenv.ClientWithWarnings(restCfg)
	require.NoError(t, err)
	queued := bounded("queued", nil, ptr.To[int32](3))
	queued.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
	require.NoError(t, warned.Create(ctx, queued))
	assert.Contains(t, collected.Texts(), "spec.trainer.elasticPolicy: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer v2.2 has no such field), and the runtime's bounds hold again: set them in a runtime of its own")

	for _, c := range []struct {
		tj   *trainer.TrainJob
		want string
	}{
		{bounded("low", ptr.To[int32](1), nil), `spec.trainer.elasticPolicy.minNodes: Invalid value: 1: below the minNodes (2) of TrainingRuntime "wide"'s torch.elasticPolicy`},
		{bounded("high", nil, ptr.To[int32](6)), `spec.trainer.elasticPolicy.maxNodes: Invalid value: 6: above the maxNodes (5) of TrainingRuntime "wide"'s torch.elasticPolicy`},
		{bounded("crossed", ptr.To[int32](4), ptr.To[int32](3)), "spec.trainer.elasticPolicy: Invalid value: minNodes must not be greater than maxNodes"},
		{func() *trainer.TrainJob {
			tj := bounded("outside", nil, ptr.To[int32](3))
			tj.Spec.Trainer.NumNodes = ptr.To[int32](4)
			return tj
		}(), "spec.trainer.numNodes: Invalid value: 4"},
		{func() *trainer.TrainJob {
			tj := bounded("fixed", nil, ptr.To[int32](3))
			tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed"}
			return tj
		}(), `spec.trainer.elasticPolicy: Forbidden: ClusterTrainingRuntime "torch-distributed" is not elastic`},
	} {
		err := k8sClient.Create(ctx, c.tj)
		require.Error(t, err, "TrainJob %s was accepted", c.tj.Name)
		assert.Contains(t, err.Error(), c.want)
	}
}
