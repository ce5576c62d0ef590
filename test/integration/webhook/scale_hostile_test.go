package webhook

// What a hostile user and a careless neighbour tried against elastic TrainJobs (the review of
// #28): each test failed before its fix.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetfeatures "sigs.k8s.io/jobset/pkg/features"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// runningElastic creates an elastic TrainJob (runtime of 1 to 3 nodes) and waits until its JobSet
// runs at 3 nodes and its status says so.
func runningElastic(t *testing.T, ns, name string, metrics ...autoscalingv2.MetricSpec) (*trainer.TrainJob, client.ObjectKey) {
	t.Helper()
	ctx := context.Background()
	elasticRuntime(t, ns, name+"-rt", metrics...)
	tj := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.TrainingRuntimeKind, name+"-rt").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	key := client.ObjectKeyFromObject(tj)
	utiltesting.WaitFor(t, k8sClient, polling, key, &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{3, 3}, trainerJob(js))
	})
	return utiltesting.WaitFor(t, k8sClient, polling, key, &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(3), tj.Status.Nodes)
		assert.NotNil(c, tj.Status.RuntimeSnapshot)
	}), key
}

// TestADeletedSnapshotKeepsTheBounds: the owner of a running elastic TrainJob deletes its runtime
// snapshot ConfigMap (anyone who may delete ConfigMaps in the namespace can), then scales it far
// past the runtime's maxNodes: refused, against the bounds its status records.
func TestADeletedSnapshotKeepsTheBounds(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj, key := runningElastic(t, ns, "capped")

	require.NoError(t, k8sClient.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tj.Status.RuntimeSnapshot.ConfigMap}}))
	err := scale(tj, 50)
	if assert.Error(t, err, "a scale to 50 nodes of a TrainJob whose runtime caps it at 3 was admitted once its snapshot was deleted") {
		return
	}
	time.Sleep(3 * time.Second)
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, key, js))
	assert.Equal(t, &batchJobSpec{3, 3}, trainerJob(js), "the JobSet was resized past the runtime's maxNodes")
}

// TestAJobSetWithoutItsTrainerJobRecordIsResized: a JobSet made before the
// trainer.kubeflow.org/trainer-job annotation was kept (or whose annotation someone removed) is
// still resized: its trainer job is found in its spec, and the record written back.
func TestAJobSetWithoutItsTrainerJobRecordIsResized(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj, key := runningElastic(t, ns, "upgraded")

	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, key, js))
	delete(js.Annotations, "trainer.kubeflow.org/trainer-job") // As the previous release built it.
	require.NoError(t, k8sClient.Update(ctx, js))

	require.NoError(t, scale(tj, 1), "the scale is admitted")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		js := &jobsetv1alpha2.JobSet{}
		require.NoError(c, k8sClient.Get(ctx, key, js))
		resized := assert.ObjectsAreEqual(&batchJobSpec{1, 1}, trainerJob(js))
		told := false
		for _, r := range utiltesting.EventReasons(c, k8sClient, tj) {
			told = told || r == "Warning/ResizeFailed"
		}
		assert.True(c, resized || told, "the scale was admitted, but the JobSet was neither resized nor was the user told why")
	}, 10*time.Second, polling.Interval)
}

// TestAnAutoscalerStrippedOfItsLabelIsStillTheTrainJobs: a user removes the operator's label from
// the TrainJob's own autoscaler (out of the operator's cache): it is found past the cache, known
// as the TrainJob's (its owner), given its label, bounds and target back, and deleted when the
// TrainJob is suspended; no false ObjectNotOwned.
func TestAnAutoscalerStrippedOfItsLabelIsStillTheTrainJobs(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj, key := runningElastic(t, ns, "unlabelled", cpuTarget)
	hpa := utiltesting.WaitFor(t, k8sClient, polling, key, &autoscalingv2.HorizontalPodAutoscaler{}, func(*assert.CollectT, *autoscalingv2.HorizontalPodAutoscaler) {})
	require.True(t, metav1.IsControlledBy(hpa, tj))

	hpa.Labels = nil
	hpa.Spec.MinReplicas = ptr.To[int32](3) // Pins the TrainJob at 3: what the operator sets right.
	require.NoError(t, k8sClient.Update(ctx, hpa))

	require.NoError(t, k8sClient.Get(ctx, key, tj))
	tj.Spec.Suspend = ptr.To(true)
	require.NoError(t, k8sClient.Update(ctx, tj))
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(k8sClient.Get(ctx, key, &autoscalingv2.HorizontalPodAutoscaler{})),
			"the TrainJob's own autoscaler, its label removed, outlived the suspension")
	}, 10*time.Second, polling.Interval)
	assert.NotContains(t, utiltesting.EventReasons(t, k8sClient, tj), "Warning/ObjectNotOwned",
		"the operator called the TrainJob's own autoscaler someone else's")
}

// TestMetricsAnAutoscalerRefusesAreTold: a runtime's elasticPolicy.metrics that the
// HorizontalPodAutoscaler API refuses (a Resource metric with a Value target) leave the TrainJob
// without an autoscaler, and a Warning event on the TrainJob says why.
func TestMetricsAnAutoscalerRefusesAreTold(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	bad := autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: ptr.To(resource.MustParse("1"))},
	}}
	spec := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
		ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](3), Metrics: []autoscalingv2.MetricSpec{bad}},
	}).Obj()
	err := k8sClient.Create(ctx, utiltesting.TrainingRuntime("rt-x", ns, spec))
	if err != nil {
		t.Logf("refused: %v", err)
		assert.Contains(t, err.Error(), "metrics", "the runtime was refused without naming its metrics")
		return // Refused at admission, with the field: what should happen.
	}
	tj := utiltesting.MakeTrainJob("badhpa", ns).RuntimeRef(trainer.TrainingRuntimeKind, "rt-x").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	key := client.ObjectKeyFromObject(tj)
	utiltesting.WaitFor(t, k8sClient, polling, key, &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(3), tj.Status.Nodes)
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(ctx, key, tj))
		told := false
		for _, cond := range tj.Status.Conditions {
			told = told || mentionsAutoscaler(cond.Message)
		}
		list := &eventsv1.EventList{}
		require.NoError(c, k8sClient.List(ctx, list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.Regarding.UID == tj.UID {
				told = told || mentionsAutoscaler(e.Note)
			}
		}
		assert.True(c, told, "the TrainJob's autoscaler cannot be created from its runtime's metrics, and nothing on the TrainJob says so")
	}, 15*time.Second, polling.Interval)
}

func mentionsAutoscaler(s string) bool {
	s = strings.ToLower(s)
	return strings.Contains(s, "horizontalpodautoscaler") || strings.Contains(s, "autoscaler") || strings.Contains(s, "metrics[")
}

// scaleOf reads a TrainJob's scale subresource.
func scaleOf(t *testing.T, tj *trainer.TrainJob) *autoscalingv1.Scale {
	t.Helper()
	s := &autoscalingv1.Scale{}
	require.NoError(t, k8sClient.SubResource("scale").Get(context.Background(), tj, s))
	return s
}

// TestARefusedResizeIsTriedAgain: JobSet runs without its ElasticJobSet gate and refuses the
// resize (a Warning event says to turn the gate on); once the admin does, the resize is tried
// again and goes through, with nothing else about the TrainJob changing.
func TestARefusedResizeIsTriedAgain(t *testing.T) {
	ns := newNamespace(t)
	tj, key := runningElastic(t, ns, "gateoff")

	require.NoError(t, jobsetfeatures.SetEnable(jobsetfeatures.ElasticJobSet, false))
	t.Cleanup(func() { _ = jobsetfeatures.SetEnable(jobsetfeatures.ElasticJobSet, true) })
	require.NoError(t, scale(tj, 1))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, utiltesting.EventReasons(c, k8sClient, tj), "Warning/ResizeFailed")
	}, polling.Timeout, polling.Interval)

	require.NoError(t, jobsetfeatures.SetEnable(jobsetfeatures.ElasticJobSet, true)) // The admin turns the gate on.
	utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: 30 * time.Second, Interval: 200 * time.Millisecond}, key, &jobsetv1alpha2.JobSet{},
		func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
			assert.Equal(c, &batchJobSpec{1, 1}, trainerJob(js), "the refused resize was never tried again")
		})
}

// TestAnElasticTrainJobWithoutNumNodesGetsOne: an elastic TrainJob created a moment before its
// runtime (admission cannot default its size), or whose spec.trainer.numNodes a user removes,
// gets its size written back, so that its scale subresource reads and kubectl scale works.
func TestAnElasticTrainJobWithoutNumNodesGetsOne(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)

	early := utiltesting.MakeTrainJob("early", ns).RuntimeRef(trainer.TrainingRuntimeKind, "late-rt").Obj()
	require.NoError(t, k8sClient.Create(ctx, early))
	elasticRuntime(t, ns, "late-rt", cpuTarget)
	key := client.ObjectKeyFromObject(early)
	utiltesting.WaitFor(t, k8sClient, polling, key, &autoscalingv2.HorizontalPodAutoscaler{}, func(*assert.CollectT, *autoscalingv2.HorizontalPodAutoscaler) {})
	utiltesting.WaitFor(t, k8sClient, polling, key, &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(3), tj.Status.Nodes)
		if assert.NotNil(c, tj.Spec.Trainer) {
			assert.Equal(c, ptr.To[int32](3), tj.Spec.Trainer.NumNodes, "the size is not written down")
		}
	})
	s := &autoscalingv1.Scale{}
	if assert.NoError(t, k8sClient.SubResource("scale").Get(ctx, early, s), "the scale of an elastic TrainJob created before its runtime cannot be read (its autoscaler's FailedGetScale)") {
		assert.Equal(t, int32(3), s.Spec.Replicas)
	}
	assert.NoError(t, scale(early, 2), "kubectl scale of an elastic TrainJob created before its runtime")

	tj, key := runningElastic(t, ns, "cleared", cpuTarget)
	require.NoError(t, k8sClient.Get(ctx, key, tj))
	tj.Spec.Trainer.NumNodes = nil
	require.NoError(t, k8sClient.Update(ctx, tj), "numNodes removed from a running elastic TrainJob: admitted")
	assert.NoError(t, k8sClient.SubResource("scale").Get(ctx, tj, &autoscalingv1.Scale{}), "the scale of an elastic TrainJob whose numNodes was removed cannot be read")
	assert.NoError(t, scale(tj, 2), "kubectl scale of an elastic TrainJob whose numNodes was removed")
}

// TestFinishedAndNonElasticTrainJobsRefuseTheScale: a finished elastic TrainJob, and an MPI
// TrainJob, refuse a scale with the reason; the finished one's autoscaler is deleted.
func TestFinishedAndNonElasticTrainJobsRefuseTheScale(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj, key := runningElastic(t, ns, "done", cpuTarget)
	utiltesting.WaitFor(t, k8sClient, polling, key, &autoscalingv2.HorizontalPodAutoscaler{}, func(*assert.CollectT, *autoscalingv2.HorizontalPodAutoscaler) {})
	js := &jobsetv1alpha2.JobSet{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(ctx, key, js))
		js.Status = jobsetv1alpha2.JobSetStatus{TerminalState: string(jobsetv1alpha2.JobSetCompleted)}
		require.NoError(c, k8sClient.Status().Update(ctx, js))
	}, polling.Timeout, polling.Interval)
	utiltesting.WaitFor(t, k8sClient, polling, key, &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, trainer.TrainJobComplete, string(tj.Status.State))
	})
	err := scale(tj, 2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.trainer.numNodes: Forbidden: the TrainJob is finished")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(k8sClient.Get(ctx, key, &autoscalingv2.HorizontalPodAutoscaler{})))
	}, polling.Timeout, polling.Interval)

	mpi := utiltesting.MakeTrainJob("mpi", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "mpi-distributed").Obj()
	if err := k8sClient.Create(ctx, mpi); err == nil {
		err = scale(mpi, 2)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the TrainJob is not elastic")
	}
}

// TestAQueuedElasticTrainJobKeepsItsNumNodes: Kueue counts a TrainJob's trainer pods from
// spec.trainer.numNodes (upstream Trainer's code ignores torch.elasticPolicy), so removing it from
// a queued elastic TrainJob would make Kueue count 1 pod while maxNodes run: an update without it
// keeps the size it had.
func TestAQueuedElasticTrainJobKeepsItsNumNodes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	elasticRuntime(t, ns, "elastic")
	tj := utiltesting.MakeTrainJob("quota", ns).RuntimeRef(trainer.TrainingRuntimeKind, "elastic").Suspend(true).Obj()
	tj.Labels = map[string]string{trainer.KueueQueueLabel: "team-a"}
	require.NoError(t, k8sClient.Create(ctx, tj))
	require.Equal(t, ptr.To[int32](3), tj.Spec.Trainer.NumNodes, "admission sets numNodes: what Kueue counts")
	key := client.ObjectKeyFromObject(tj)
	utiltesting.WaitFor(t, k8sClient, polling, key, &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{3, 3}, trainerJob(js))
	})

	require.NoError(t, k8sClient.Get(ctx, key, tj))
	tj.Spec.Trainer.NumNodes = nil
	err := k8sClient.Update(ctx, tj)
	if err != nil {
		return // Refused: what should happen (or numNodes defaulted again, below).
	}
	assert.NotNil(t, tj.Spec.Trainer.NumNodes,
		"a queued elastic TrainJob lost spec.trainer.numNodes: Kueue will count 1 trainer pod, and the operator runs maxNodes (3)")
}

// TestScalesThatChangeNothingOrWaitForAResume: a neighbour's autoscaler that carries the
// operator's label is left alone, with a Warning; a scale to the size the TrainJob has changes
// nothing; a scale of a suspended elastic TrainJob resizes its JobSet, which resumes at it.
func TestScalesThatChangeNothingOrWaitForAResume(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	theirs := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "labelled", Namespace: ns, Labels: map[string]string{trainer.TrainJobNameLabel: "labelled"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr.To[int32](2), MaxReplicas: 5, Metrics: []autoscalingv2.MetricSpec{cpuTarget},
		},
	}
	require.NoError(t, k8sClient.Create(ctx, theirs))
	tj, key := runningElastic(t, ns, "labelled", cpuTarget)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, utiltesting.EventReasons(c, k8sClient, tj), "Warning/ObjectNotOwned")
	}, polling.Timeout, polling.Interval)
	after := &autoscalingv2.HorizontalPodAutoscaler{}
	require.NoError(t, k8sClient.Get(ctx, key, after))
	assert.Equal(t, theirs.Spec, after.Spec)

	require.NoError(t, scale(tj, 3))
	require.NoError(t, k8sClient.Get(ctx, key, tj))
	tj.Spec.Suspend = ptr.To(true)
	require.NoError(t, k8sClient.Update(ctx, tj))
	require.NoError(t, scale(tj, 2))
	require.NoError(t, k8sClient.Get(ctx, key, tj))
	tj.Spec.Suspend = ptr.To(false)
	require.NoError(t, k8sClient.Update(ctx, tj))
	utiltesting.WaitFor(t, k8sClient, polling, key, &jobsetv1alpha2.JobSet{}, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, &batchJobSpec{2, 2}, trainerJob(js))
		assert.False(c, ptr.Deref(js.Spec.Suspend, true))
	})
	utiltesting.WaitFor(t, k8sClient, polling, key, &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(2), tj.Status.Nodes)
	})
}

// TestASuspendedFixedTrainJobScales: kubectl scale of a suspended TrainJob that is not elastic is
// an edit of its numNodes, as the same change through the spec is.
func TestASuspendedFixedTrainJobScales(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fixed := utiltesting.MakeTrainJob("fixed", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Suspend(true).Obj()
	require.NoError(t, k8sClient.Create(ctx, fixed))
	err := scale(fixed, 2)
	if err != nil {
		assert.NotContains(t, err.Error(), "suspend it", "a suspended TrainJob's scale is refused with the advice to suspend it")
	}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(fixed), fixed))
	fixed.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2)}
	require.NoError(t, k8sClient.Update(ctx, fixed), "the same change through the spec is admitted")
}

// TestARefusedResizeIsToldOnce: with JobSet's ElasticJobSet gate off, the JobSet's status changes
// (pods getting ready or not) neither send the refused resize again nor add Warning events: one
// is told.
func TestARefusedResizeIsToldOnce(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj, key := runningElastic(t, ns, "spam")
	require.NoError(t, jobsetfeatures.SetEnable(jobsetfeatures.ElasticJobSet, false))
	t.Cleanup(func() { _ = jobsetfeatures.SetEnable(jobsetfeatures.ElasticJobSet, true) })
	require.NoError(t, scale(tj, 1))
	for i := range 20 {
		js := &jobsetv1alpha2.JobSet{}
		require.NoError(t, k8sClient.Get(ctx, key, js))
		js.Status.ReplicatedJobsStatus = []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Active: int32(i % 2), Ready: int32(i % 2)}}
		require.NoError(t, k8sClient.Status().Update(ctx, js))
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	objects := 0
	for _, r := range utiltesting.EventReasons(t, k8sClient, tj) {
		if r == "Warning/ResizeFailed" {
			objects++
		}
	}
	assert.LessOrEqual(t, objects, 2, "one refused resize became %d Warning events (and as many refused patches)", objects)
}

// TestAQueuedElasticTrainJobWithoutNumNodesGetsOne: a TrainJob queued by Kueue and created a
// moment before its elastic runtime runs at maxNodes, which Kueue (counting numNodes, else 1)
// would under-count: the operator writes its size down, which admission allows although a queued
// TrainJob may not be resized while it runs: it is the size it runs at.
func TestAQueuedElasticTrainJobWithoutNumNodesGetsOne(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	early := utiltesting.MakeTrainJob("early", ns).RuntimeRef(trainer.TrainingRuntimeKind, "late-rt").Obj()
	early.Labels = map[string]string{trainer.KueueQueueLabel: "team-a"}
	require.NoError(t, k8sClient.Create(ctx, early))
	elasticRuntime(t, ns, "late-rt")
	utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(early), &trainer.TrainJob{}, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(3), tj.Status.Nodes)
		if assert.NotNil(c, tj.Spec.Trainer) {
			assert.Equal(c, ptr.To[int32](3), tj.Spec.Trainer.NumNodes, "the size is not written down")
		}
	})
	err := scale(early, 2)
	require.Error(t, err, "a queued TrainJob was resized while it runs")
	assert.Contains(t, err.Error(), "admitted by Kueue")
}

// TestSomeoneElsesAutoscalerIsNotAskedForAtEachReconcile: an unlabelled autoscaler of the
// TrainJob's name, someone else's, is told once (ObjectNotOwned) and never touched; the TrainJob's
// reconciles that follow (its labels edited) do not try to create its own again: the API server
// sees no more creates of it until the TrainJob changes.
func TestSomeoneElsesAutoscalerIsNotAskedForAtEachReconcile(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	theirs := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "crowded", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 2, ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{
			APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}},
	}
	require.NoError(t, k8sClient.Create(ctx, theirs))
	tj, key := runningElastic(t, ns, "crowded", cpuTarget)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, utiltesting.EventReasons(c, k8sClient, tj), "Warning/ObjectNotOwned")
	}, polling.Timeout, polling.Interval)

	before := hpaCreatesRefused(t)
	for i := range 5 { // Each change of its JobSet reconciles the TrainJob.
		js := &jobsetv1alpha2.JobSet{}
		require.NoError(t, k8sClient.Get(ctx, key, js))
		metav1.SetMetaDataLabel(&js.ObjectMeta, "touched", fmt.Sprint(i))
		require.NoError(t, k8sClient.Update(ctx, js))
		time.Sleep(200 * time.Millisecond)
	}
	assert.Equal(t, before, hpaCreatesRefused(t), "the TrainJob's autoscaler was asked for again at each reconcile")
	got := &autoscalingv2.HorizontalPodAutoscaler{}
	require.NoError(t, k8sClient.Get(ctx, key, got))
	assert.Equal(t, theirs.Spec, got.Spec, "someone else's autoscaler was changed")
}

// hpaCreatesRefused is how many creates of a HorizontalPodAutoscaler the API server answered
// with a conflict (the name taken), from its metrics.
func hpaCreatesRefused(t *testing.T) int {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restCfg)
	require.NoError(t, err)
	data, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	total := 0
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="horizontalpodautoscalers"`) &&
			strings.Contains(line, `verb="POST"`) && strings.Contains(line, `code="409"`) {
			fields := strings.Fields(line)
			n, err := strconv.Atoi(fields[len(fields)-1])
			require.NoError(t, err)
			total += n
		}
	}
	return total
}
