package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// claimTemplate creates a ResourceClaimTemplate in ns for count devices of a DeviceClass.
func claimTemplate(t *testing.T, ns, name, class string, count int64) {
	t.Helper()
	require.NoError(t, k8sClient.Create(context.Background(), &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "devices", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
			}}},
		}}},
	}))
}

// allocated checks that each running pod's claim of that name is allocated count devices of
// driver on the pod's own node and reserved for the pod, and returns the devices, as node/device.
func allocated(c *assert.CollectT, pods []corev1.Pod, claim, driver string, count int) []string {
	var devices []string
	for _, pod := range pods {
		var name string
		for _, s := range pod.Status.ResourceClaimStatuses {
			if s.Name == claim && s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
			}
		}
		if !assert.NotEmpty(c, name, "pod %s has no ResourceClaim %q", pod.Name, claim) {
			continue
		}
		rc := &resourcev1.ResourceClaim{}
		if !assert.NoError(c, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: pod.Namespace, Name: name}, rc)) {
			continue
		}
		if !assert.NotNil(c, rc.Status.Allocation, "ResourceClaim %s of pod %s is not allocated", name, pod.Name) {
			continue
		}
		results := rc.Status.Allocation.Devices.Results
		assert.Len(c, results, count, "devices of pod %s", pod.Name)
		for _, r := range results {
			assert.Equal(c, driver, r.Driver)
			assert.Equal(c, pod.Spec.NodeName, r.Pool, "pod %s got a device of another node's", pod.Name)
			devices = append(devices, r.Pool+"/"+r.Device)
		}
		assert.Contains(c, rc.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	}
	return devices
}

// running are the TrainJob's pods that run, want of them.
func running(c *assert.CollectT, tj *trainer.TrainJob, want int) []corev1.Pod {
	var list []corev1.Pod
	for _, p := range pods(c, tj) {
		if p.Status.Phase == corev1.PodRunning {
			list = append(list, p)
		}
	}
	assert.Len(c, list, want, "running pods of %s", tj.Name)
	return list
}

// A TrainJob's resourceClaimsPerNode (KEP-2782) reach every node pod; the scheduler allocates each
// pod GPUs of its own node from the local cluster's fake DRA devices, and the pods run with them.
// A claim no node can satisfy keeps the pods from being placed at all.
func TestDeviceClaimsAreAllocatedToEachNodePod(t *testing.T) {
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	claimTemplate(t, ns, "two-gpus", testenv.FakeGPUClass, 2)
	claimTemplate(t, ns, "five-gpus", testenv.FakeGPUClass, 5) // Each node has 4.
	withGPUs := func(template string) func(w *utiltesting.TrainJobWrapper) {
		return func(w *utiltesting.TrainJobWrapper) {
			w.NumNodes(3).Trainer(&trainer.Trainer{NumNodes: ptr.To[int32](3), ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "gpus", ResourceClaimTemplateName: ptr.To(template)},
			}})
			w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
		}
	}

	tj := createTrainJob(t, ns, "dra", "plain", withGPUs("two-gpus"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		devices := allocated(c, running(c, tj, 3), "gpus", testenv.FakeGPUDriver, 2)
		assert.Len(c, devices, 6)
		seen := map[string]bool{}
		for _, d := range devices {
			assert.False(c, seen[d], "device %s allocated twice", d)
			seen[d] = true
		}
	}, timeout, interval)
	for _, p := range pods(t, tj) {
		assert.Equal(t, []corev1.ResourceClaim{{Name: "gpus"}}, p.Spec.Containers[0].Resources.Claims, "pod %s", p.Name)
	}

	tooMany := createTrainJob(t, ns, "too-many", "plain", withGPUs("five-gpus"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := pods(c, tooMany)
		assert.Len(c, list, 3)
		for _, p := range list {
			assert.Empty(c, p.Spec.NodeName, "pod %s was placed without its devices", p.Name)
			assert.True(c, unschedulable(p), "pod %s is not unschedulable: %v", p.Name, p.Status.Conditions)
		}
	}, timeout, interval)
}

// unschedulable says whether the scheduler tried the pod and found no node for it.
func unschedulable(p corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// The test plays NVIDIA's DRA driver for ComputeDomains, which the local cluster lacks: IMEX
// channels published as devices of each fake node, and the channel's ResourceClaimTemplate made
// for a ComputeDomain.
const (
	channelDriver = "compute-domain.nvidia.com"
	channelClass  = "compute-domain-default-channel.nvidia.com"
)

// publishChannels publishes two IMEX channels on each fake node, and their DeviceClass, until
// the test ends.
func publishChannels(t *testing.T) {
	ctx := context.Background()
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: channelClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", channelDriver),
		}}}},
	}
	require.NoError(t, k8sClient.Create(ctx, class))
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, class) })
	nodes := &corev1.NodeList{}
	require.NoError(t, k8sClient.List(ctx, nodes, client.MatchingLabels{testenv.NodeLabel: "kwok"}))
	for _, node := range nodes.Items {
		slice := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name + "-imex-channels"},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   channelDriver,
				Pool:     resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1},
				NodeName: ptr.To(node.Name),
				Devices:  []resourcev1.Device{{Name: "channel-0"}, {Name: "channel-1"}},
			},
		}
		require.NoError(t, k8sClient.Create(ctx, slice))
		t.Cleanup(func() { _ = k8sClient.Delete(ctx, slice) })
	}
}

// A runtime's computeDomain gives the TrainJob an NVIDIA ComputeDomain before its JobSet, and every
// node pod claims its channel: the pods wait, unplaced, until NVIDIA's driver (played by the test)
// makes the channel's ResourceClaimTemplate, then run with a channel each. The ComputeDomain is
// deleted once the TrainJob completes.
func TestAComputeDomainsChannelReachesEveryNodePod(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj()
	spec.ComputeDomain = &trainer.ComputeDomainPolicy{}
	createRuntime(t, ns, "nvl72", spec)
	tj := createTrainJob(t, ns, "nvl", "nvl72", func(w *utiltesting.TrainJobWrapper) {
		w.NumNodes(2)
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "20s"}
	})

	cd := &unstructured.Unstructured{}
	cd.SetGroupVersionKind(pipeline.ComputeDomainGVK)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), cd))
	}, timeout, interval)
	template, _, _ := unstructured.NestedString(cd.Object, "spec", "channel", "resourceClaimTemplate", "name")
	require.Equal(t, "nvl-compute-domain-channel", template)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, pods(c, tj), 2) }, timeout, interval)
	time.Sleep(2 * time.Second)
	assert.Zero(t, bound(pods(t, tj)), "pods were placed without their channel")

	// NVIDIA's driver: the channels, and the template it makes for the ComputeDomain.
	publishChannels(t)
	claimTemplate(t, ns, template, channelClass, 1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		allocated(c, running(c, tj, 2), trainer.ComputeDomainChannelClaim, channelDriver, 1)
	}, timeout, interval)

	waitForComplete(t, tj)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), cd)
		assert.True(c, apierrors.IsNotFound(err), "the completed TrainJob's ComputeDomain is still there: %v", err)
	}, timeout, interval)
}
