package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestAnElasticTrainJobIsAutoscaledOnItsCPU: the HPA the operator gives an elastic TrainJob,
// driven by the local cluster's real metrics pipeline (KWOK's resource metrics of the trainer pods,
// metrics-server, kube-controller-manager's HPA controller), scales the TrainJob through its scale
// subresource: idle, from its start at maxNodes down to minNodes; busy, back up to maxNodes. The
// first pod runs throughout: the training is resized, never restarted.
func TestAnElasticTrainJobIsAutoscaledOnItsCPU(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	node := nodeJob("100m")
	pod := &node.Template.Spec.Template
	// New pods start nearly idle: 10% of their request.
	pod.Annotations = map[string]string{testenv.RunForAnnotation: "1h", testenv.UsageCPUAnnotation: "10m", testenv.UsageMemoryAnnotation: "32Mi"}
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("64Mi")
	createRuntime(t, ns, "autoscaled", utiltesting.MakeRuntimeSpec().ReplicatedJobs(node).
		Torch(&trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{
			MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](3), MaxRestarts: ptr.To[int32](5),
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)},
			}}},
		}}).Obj())
	tj := createTrainJob(t, ns, "busy", "autoscaled", nil)
	explainOnFailure(t, tj)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	hpa.Name, hpa.Namespace = tj.Name, ns
	explainHPAOnFailure(t, hpa)
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.Equal(c, "3/3", tj.Status.Ready) })
	first := runningByIndex(t, tj)["0"]
	require.NotEmpty(t, first)

	sizeIs := func(n int32) {
		t.Helper()
		started := time.Now()
		utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: metricsTimeout, Interval: metricsInterval}, client.ObjectKeyFromObject(tj),
			&trainer.TrainJob{}, func(c *assert.CollectT, got *trainer.TrainJob) {
				assert.Equal(c, ptr.To(n), got.Spec.Trainer.NumNodes, "the autoscaler's choice")
				assert.Equal(c, n, got.Status.Nodes)
				running := runningByIndex(c, tj)
				assert.Len(c, running, int(n), "running pods %v", running)
				assert.Equal(c, first, running["0"], "the first pod was replaced")
			})
		t.Logf("the autoscaler made it %d nodes in %.0f s", n, time.Since(started).Seconds())
	}
	sizeIs(1)
	selector := labels.SelectorFromSet(labels.Set{"jobset.sigs.k8s.io/jobset-name": tj.Name})
	n, err := cluster.SetPodUsage(ctx, ns, selector, "400m", "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	sizeIs(3)

	got := current(t, tj)
	assert.Nil(t, got.Status.Failure)
	assert.Zero(t, got.Status.Restarts)
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(hpa), hpa))
	assert.Equal(t, int32(3), hpa.Status.DesiredReplicas, "the autoscaler's wish")
}
