package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainjob/operator/test/testenv"
)

// metricsPolling bounds a wait on the resource-metrics pipeline: metrics-server scrapes every
// 10 s and needs two scrapes of a pod for a CPU rate; the HPA controller looks every 5 s and
// scales down 15 s after it last wanted more (testenv.DefaultLocalOptions).
const (
	metricsTimeout  = 2 * time.Minute
	metricsInterval = time.Second
)

// TestHPAScalesFakePodsOnTheirCPU proves the local cluster's resource-metrics pipeline end to
// end: KWOK's resource metrics of the fake nodes, metrics-server behind the aggregator, and the
// HorizontalPodAutoscaler controller of kube-controller-manager. A Deployment's pods request
// 100m of CPU; an autoscaling/v2 HPA aims at 50% utilisation between 1 and 3 replicas. The pods'
// usage annotation drives it: 400m scales up to 3, 10m back down to 1.
func TestHPAScalesFakePodsOnTheirCPU(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	selector := map[string]string{"app": "busy"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: selector,
					// New pods, the HPA's among them, start nearly idle.
					Annotations: map[string]string{testenv.UsageCPUAnnotation: "10m", testenv.UsageMemoryAnnotation: "32Mi"},
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "work", Image: "busy",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
					}},
				}}},
			},
		},
	}
	require.NoError(t, k8sClient.Create(ctx, deploy))
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: deploy.Name},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    3,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)},
				},
			}},
		},
	}
	require.NoError(t, k8sClient.Create(ctx, hpa))
	explainHPAOnFailure(t, hpa)
	started := time.Now()

	// metrics.k8s.io reports the pod's usage, as its annotations say, and its node's.
	var pod corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1.PodList{}
		require.NoError(c, k8sClient.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(selector)))
		require.Len(c, list.Items, 1)
		pod = list.Items[0]
		m, err := cluster.PodMetrics(ctx, ns, pod.Name)
		require.NoError(c, err)
		usage := m.Usage()
		assert.InDelta(c, 0.010, usage.Cpu().AsApproximateFloat64(), 0.002, "CPU of pod %s: %s", pod.Name, usage.Cpu())
		assert.Equal(c, "32Mi", usage.Memory().String(), "memory of pod %s", pod.Name)
	}, metricsTimeout, metricsInterval)
	t.Logf("metrics.k8s.io reports pod %s after %.0f s", pod.Name, time.Since(started).Seconds())
	nodeUsage, err := cluster.NodeUsage(ctx, pod.Spec.NodeName)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, nodeUsage.Cpu().MilliValue(), int64(9), "CPU of node %s", pod.Spec.NodeName)

	// Busy: 400% of the request, 8 pods' worth at 50%, capped at 3.
	started = time.Now()
	n, err := cluster.SetPodUsage(ctx, ns, labels.SelectorFromSet(selector), "400m", "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	waitForReplicas(t, deploy, 3)
	t.Logf("scaled up to 3 in %.0f s", time.Since(started).Seconds())
	// A window that spans the change reports a rate between the two.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := cluster.PodMetrics(ctx, ns, pod.Name)
		require.NoError(c, err)
		usage := m.Usage()
		assert.InDelta(c, 0.400, usage.Cpu().AsApproximateFloat64(), 0.04, "CPU of pod %s: %s", pod.Name, usage.Cpu())
	}, metricsTimeout, metricsInterval)

	// Idle again: every pod at 10%, one pod's worth.
	started = time.Now()
	n, err = cluster.SetPodUsage(ctx, ns, labels.SelectorFromSet(selector), "10m", "")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	waitForReplicas(t, deploy, 1)
	t.Logf("scaled down to 1 in %.0f s", time.Since(started).Seconds())
}

// waitForReplicas waits until the HPA has set the Deployment to want replicas pods.
func waitForReplicas(t *testing.T, deploy *appsv1.Deployment, replicas int32) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &appsv1.Deployment{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(deploy), got))
		assert.Equal(c, replicas, ptr.Deref(got.Spec.Replicas, 1), "replicas of Deployment %s", deploy.Name)
	}, metricsTimeout, metricsInterval)
}

// explainHPAOnFailure logs the HPA's status when the test fails: its conditions say why it did
// not scale (no metrics, a missing request, stabilization).
func explainHPAOnFailure(t *testing.T, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		got := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(hpa), got); err != nil {
			t.Logf("HPA %s: %v", hpa.Name, err)
			return
		}
		t.Logf("HPA %s: current %d, desired %d, metrics %+v", hpa.Name, got.Status.CurrentReplicas, got.Status.DesiredReplicas, got.Status.CurrentMetrics)
		for _, cond := range got.Status.Conditions {
			t.Logf("  %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	})
}
