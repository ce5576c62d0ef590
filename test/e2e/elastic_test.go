package e2e

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// kubectl runs the local cluster's kubectl as a user would, and returns what it printed.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return cluster.Kubectl(args...)
}

// runningByIndex are the TrainJob's pods that run (not deleted, not finished), by completion index,
// with their UIDs.
func runningByIndex(c require.TestingT, tj *trainer.TrainJob) map[string]types.UID {
	running := map[string]types.UID{}
	for _, p := range pods(c, tj) {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running[p.Annotations[batchv1.JobCompletionIndexAnnotation]] = p.UID
		}
	}
	return running
}

// TestAnElasticTrainJobScalesInPlace scales a running elastic TrainJob of 1 to 3 nodes, a
// Coscheduling gang, with kubectl scale: down to 1 and up to 2, with JobSet's and the Job
// controller's own rules. The first pod (the rendezvous) and every pod that stays keep running,
// the same pods: the Job removes the highest indexes and adds the missing ones; the added pod is
// not held by the gang; the pods removed are no failure, and nothing restarts. A size outside
// the runtime's bounds is refused, naming them; kubectl get shows the size and the desired size.
func TestAnElasticTrainJobScalesInPlace(t *testing.T) {
	ns := newNamespace(t)
	node := nodeJob("1")
	node.Template.Spec.Template.Spec.SchedulerName = testenv.CoschedulingScheduler
	createRuntime(t, ns, "elastic", utiltesting.MakeRuntimeSpec().ReplicatedJobs(node).
		Torch(&trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](3)}}).
		PodGroupPolicy(trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}).Obj())
	tj := createTrainJob(t, ns, "grow", "elastic", func(w *utiltesting.TrainJobWrapper) {
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	})
	explainOnFailure(t, tj)
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Equal(c, "3/3", tj.Status.Ready) })
	first := runningByIndex(t, tj)["0"]
	require.NotEmpty(t, first)

	scaleTo := func(n int) {
		t.Helper()
		out, err := kubectl(t, "scale", "trainjob/grow", "-n", ns, "--replicas", strconv.Itoa(n))
		require.NoError(t, err, out)
		waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
			assert.Equal(c, int32(n), got.Status.Nodes)
			assert.Equal(c, strconv.Itoa(n)+"/"+strconv.Itoa(n), got.Status.Ready)
			running := runningByIndex(c, tj)
			assert.Len(c, running, n, "running pods %v", running)
			assert.Equal(c, first, running["0"], "the first pod was replaced")
		})
	}
	scaleTo(1)
	scaleTo(2)

	out, err := kubectl(t, "scale", "trainjob/grow", "-n", ns, "--replicas", "4")
	require.Error(t, err)
	assert.Contains(t, out, `spec.trainer.numNodes: Invalid value: 4: TrainingRuntime "elastic" is elastic: numNodes must be between its torch.elasticPolicy's minNodes (1) and maxNodes (3)`)

	out, err = kubectl(t, "get", "trainjob", "grow", "-n", ns)
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	nodes, desired := slices.Index(header, "NODES"), slices.Index(header, "DESIRED")
	require.True(t, nodes >= 0 && desired >= 0, "columns: %s", lines[0])
	assert.Equal(t, []string{"2", "2"}, []string{row[nodes], row[desired]}, out)

	got := current(t, tj)
	assert.Nil(t, got.Status.Failure, "a pod the scale-down removed was told as a failure")
	assert.Zero(t, got.Status.Restarts)
	assert.NotContains(t, utiltesting.EventReasons(t, k8sClient, got), "Warning/PodFailed")
	assert.Contains(t, utiltesting.EventReasons(t, k8sClient, got), "Normal/Resized")
}

// TestAnAutoscalerNeverOutlivesItsTrainJob: an elastic TrainJob whose runtime names metrics gets
// an autoscaler aimed at it, which the cluster's garbage collector deletes with it.
func TestAnAutoscalerNeverOutlivesItsTrainJob(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	createRuntime(t, ns, "elastic", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("1")).
		Torch(&trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{
			MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](2),
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)},
			}}},
		}}).Obj())
	tj := createTrainJob(t, ns, "scaled", "elastic", func(w *utiltesting.TrainJobWrapper) {
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	})
	key := client.ObjectKeyFromObject(tj)
	hpa := utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval}, key,
		&autoscalingv2.HorizontalPodAutoscaler{}, func(*assert.CollectT, *autoscalingv2.HorizontalPodAutoscaler) {})
	assert.Equal(t, "TrainJob", hpa.Spec.ScaleTargetRef.Kind)

	require.NoError(t, k8sClient.Delete(ctx, tj))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(ctx, key, &autoscalingv2.HorizontalPodAutoscaler{})
		assert.True(c, apierrors.IsNotFound(err), "the autoscaler outlived its TrainJob: %v", err)
	}, timeout, interval)
}

// queuedElasticRuntime creates the elastic torch runtime "elastic" of 1 to maxNodes 1-CPU nodes,
// shaped as Kueue counts pods (the ancestor label on the Job template), whose pods run for an
// hour.
func queuedElasticRuntime(t *testing.T, ns string, maxNodes int32) {
	t.Helper()
	job := nodeJob("1")
	job.Template.Labels = job.Template.Spec.Template.Labels // where Kueue's pod counting looks
	job.Template.Spec.Template.Labels = nil
	job.Template.Spec.Template.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	createRuntime(t, ns, "elastic", utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).
		Torch(&trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To(maxNodes)}}).Obj())
}

// TestKueueAdmitsAnElasticTrainJobAtItsSize: under the real Kueue, an elastic TrainJob of 1 to 3
// nodes is admitted at its size (admission writes maxNodes into numNodes, which Kueue counts);
// while admitted, kubectl scale is refused with the reason (Kueue would stop it and queue it
// again); suspended and resized in one update, as the refusal says, it is admitted again by Kueue
// at the new size, on which it runs.
func TestKueueAdmitsAnElasticTrainJobAtItsSize(t *testing.T) {
	ns := newNamespace(t)
	kueueQueue(t, ns, 3, "1", "3")
	queuedElasticRuntime(t, ns, 3)
	tj := createTrainJob(t, ns, "queued", "elastic", func(w *utiltesting.TrainJobWrapper) {
		w.Labels = map[string]string{queueLabel: "queue"}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]int64{"node": 3}, workloadPodCounts(c, tj))
	}, timeout, interval, "Kueue counts the elastic TrainJob's size")
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Equal(c, "3/3", tj.Status.Ready) })

	out, err := kubectl(t, "scale", "trainjob/queued", "-n", ns, "--replicas", "2")
	require.Error(t, err)
	assert.Contains(t, out, `the TrainJob is admitted by Kueue (queue "queue") at 3 nodes, and Kueue stops a running TrainJob whose size changes and queues it again`)

	out, err = kubectl(t, "patch", "trainjob/queued", "-n", ns, "--type=merge", "-p", `{"spec":{"suspend":true,"trainer":{"numNodes":2}}}`)
	require.NoError(t, err, out)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]int64{"node": 2}, workloadPodCounts(c, tj))
	}, timeout, interval, "Kueue admits it again at its new size")
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, "2/2", tj.Status.Ready)
		assert.Equal(c, int32(2), tj.Status.Nodes)
	})
}

// TestKueueRunsAnUnlabelledTrainJobOnlyOnceQueued encodes what lets the operator tell a TrainJob
// queued by Kueue by its queue label alone (no autoscaler, no resize while it runs), even where
// Kueue manages TrainJobs without one (manageJobsWithoutQueueName): Kueue v0.17 reads a job's
// queue from that label only, never admits a Workload without one (a TrainJob resumed without
// it is stopped again), and refuses to change it while the TrainJob runs.
func TestKueueRunsAnUnlabelledTrainJobOnlyOnceQueued(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	namespace := &corev1.Namespace{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: ns}, namespace))
	namespace.Labels[testenv.KueueManagesUnlabelledLabel] = "true"
	require.NoError(t, k8sClient.Update(ctx, namespace))
	kueueQueue(t, ns, 2, "1", "2")
	queuedElasticRuntime(t, ns, 2)
	// Suspended, as Kueue's webhook makes it where it sees TrainJobs without a queue; resumed by
	// its user, it is stopped again: Kueue holds its Workload, which names no queue, unadmitted.
	tj := createTrainJob(t, ns, "unlabelled", "elastic", func(w *utiltesting.TrainJobWrapper) { w.Suspend(true) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]int64{"node": 2}, workloadPodCounts(c, tj))
	}, timeout, interval, "Kueue made no Workload for the TrainJob without a queue")
	out, err := kubectl(t, "patch", "trainjob/unlabelled", "-n", ns, "--type=merge", "-p", `{"spec":{"suspend":false}}`)
	require.NoError(t, err, out)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, suspended(c, tj)) }, timeout, interval,
		"Kueue let a TrainJob without a queue run")
	for range 10 {
		time.Sleep(interval * 3)
		assert.True(t, suspended(t, tj), "Kueue resumed a TrainJob without a queue")
	}

	// Queued, it is admitted and runs; while it runs, Kueue refuses to take its queue away.
	out, err = kubectl(t, "label", "trainjob/unlabelled", "-n", ns, queueLabel+"=queue")
	require.NoError(t, err, out)
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Equal(c, "2/2", tj.Status.Ready) })
	out, err = kubectl(t, "label", "trainjob/unlabelled", "-n", ns, queueLabel+"-")
	require.Error(t, err, "Kueue let a running TrainJob leave its queue")
	assert.Contains(t, out, queueLabel)
	assert.Contains(t, out, "field is immutable")
	out, err = kubectl(t, "scale", "trainjob/unlabelled", "-n", ns, "--replicas", "1")
	require.Error(t, err)
	assert.Contains(t, out, `the TrainJob is admitted by Kueue (queue "queue") at 2 nodes`)
}
