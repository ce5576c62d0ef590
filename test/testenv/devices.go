package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The local cluster's devices, for Dynamic Resource Allocation (resource.k8s.io/v1): each fake
// node publishes its GPUs (as many as its nvidia.com/gpu capacity) in a ResourceSlice of the
// driver FakeGPUDriver, as a DRA driver's kubelet plugin publishes a node's devices, and the
// DeviceClass FakeGPUClass selects them. kube-scheduler allocates them to the claims of pods, and
// kube-controller-manager makes a pod's claims from their templates; KWOK runs the pods, whose
// devices nothing prepares.
const (
	// FakeGPUDriver is the driver of the fake nodes' GPUs.
	FakeGPUDriver = "gpu.localcluster.trainer.kubeflow.org"
	// FakeGPUClass is the DeviceClass of those GPUs, which a ResourceClaimTemplate requests.
	FakeGPUClass = FakeGPUDriver
	// GPUModelAttribute is a fake GPU's "model" attribute, FakeGPUModel, which a claim's CEL
	// selector may match; each GPU also has an "index" (0, 1, ...).
	GPUModelAttribute = "model"
	FakeGPUModel      = "kwok-h100"
)

// addDeviceClass creates the DeviceClass of the fake nodes' GPUs.
func (c *Cluster) addDeviceClass(ctx context.Context) error {
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: FakeGPUClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", FakeGPUDriver),
		}}}},
	}
	if err := c.Client.Create(ctx, class); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating DeviceClass %s: %w", class.Name, err)
	}
	return nil
}

// publishGPUs publishes a fake node's GPUs in a ResourceSlice of its own, owned by the node so that
// it goes with it. A node without GPUs publishes none.
func (c *Cluster) publishGPUs(ctx context.Context, node *corev1.Node) error {
	gpus := node.Status.Capacity.Name("nvidia.com/gpu", "").Value()
	if gpus <= 0 {
		return nil
	}
	devices := make([]resourcev1.Device, 0, gpus)
	for i := range min(gpus, resourcev1.ResourceSliceMaxDevices) {
		devices = append(devices, resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"index":           {IntValue: ptr.To(i)},
				GPUModelAttribute: {StringValue: ptr.To(FakeGPUModel)},
			},
		})
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            node.Name + "-gpus",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
		},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   FakeGPUDriver,
			Pool:     resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node.Name),
			Devices:  devices,
		},
	}
	if err := c.Client.Create(ctx, slice); err != nil {
		return fmt.Errorf("publishing the GPUs of node %s: %w", node.Name, err)
	}
	return nil
}
