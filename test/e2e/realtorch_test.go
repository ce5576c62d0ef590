//go:build torchrun

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// `make test-torchrun` builds with this tag: the real node loads the PyTorch image (1.2 GB).
func init() { realNodeImages = append(realNodeImages, "torch.tar") }

// TestRealTorchrunAllReducesUnderTheOperatorsWiring runs Debian's torchrun on two pods of the real
// node with the shipped torch-distributed runtime: torchrun reads only the operator's PET_* env
// vars, the two ranks rendezvous at rank 0 by JobSet's host name, and a gloo all-reduce must give
// each the sum of all ranks. (`--redirects 1 --tee 1`: Debian's torch 1.13 on Python 3.11 cannot
// parse the default "0", a Flag enum's zero.)
func TestRealTorchrunAllReducesUnderTheOperatorsWiring(t *testing.T) {
	ns := newNamespace(t)
	tj := onTheRealNode(utiltesting.MakeTrainJob("torchrun", ns).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed"), "torch", 2)
	tj.Spec.Trainer.Image = ptr.To(testenv.TorchImage)
	tj.Spec.Trainer.Command = []string{"python3", "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", "/allreduce.py"}
	tj.Spec.Trainer.Env = nil
	tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi"),
	}}
	_, logs := runOnTheRealNode(t, tj, trainer.TrainJobComplete)
	require.Len(t, logs, 2)
	for name, log := range logs {
		assert.Regexp(t, `rank \d+ of 2: all-reduce gave 3, want 3`, log, "pod %s", name)
	}
}

// TestRealTorchrunGrowsWhileItTrains runs Debian's torchrun elastically on the real node: a
// training of 1 to 2 nodes starts on 1 (c10d rendezvous on the first pod, which hosts the store
// under its fully qualified name), all-reduces at world size 1, is scaled to 2 through its scale
// subresource as kubectl scale does, and goes on: torchrun's agent on the first pod sees the new
// node waiting, restarts its workers (not its pod), and both nodes all-reduce at world size 2;
// the training then completes. /elastic.py trains until its world has GROW_TO processes.
func TestRealTorchrunGrowsWhileItTrains(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	rt := shippedRuntimeCopy(t, ns, "elastic", "torch-distributed", func(spec *trainer.TrainingRuntimeSpec) {
		spec.MLPolicy.NumNodes = nil
		spec.MLPolicy.Torch.ElasticPolicy = &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](2)}
	})
	tj := onTheRealNode(utiltesting.MakeTrainJob("grow", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name), "torch", 1)
	tj.Spec.Trainer.Image = ptr.To(testenv.TorchImage)
	tj.Spec.Trainer.Command = []string{"python3", "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", "/elastic.py"}
	// LOGLEVEL=INFO: torchrun's agent says when it sees a new node and restarts its workers.
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "GROW_TO", Value: "2"}, {Name: "LOGLEVEL", Value: "INFO"}}
	tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi"),
	}}
	require.NoError(t, k8sClient.Create(ctx, tj))
	explainOnFailure(t, tj)

	// torch's import, and a rendezvous that waits 30 s for more nodes once it has minNodes, take
	// a minute or two on a busy machine of 2 cores.
	polling := utiltesting.Polling{Timeout: 5 * time.Minute, Interval: 2 * time.Second}

	// Training at world size 1: the first pod hosts the rendezvous and trains alone.
	var first types.UID
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for name, log := range logsOf(c, tj) {
			if strings.Contains(log, "rank 0 of 1: step 1: all-reduce gave 1, want 1") {
				first = podUID(c, ns, name)
				return
			}
		}
		assert.Fail(c, "no step at world size 1 yet")
	}, polling.Timeout, polling.Interval)

	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))
	require.NoError(t, k8sClient.SubResource("scale").Patch(ctx, tj, patch, client.WithSubResourceBody(&autoscalingv1.Scale{})))

	// Both nodes train at world size 2 (read while they run: the Job removes the second pod once
	// the first succeeded, as its success policy says for a run of minNodes 1).
	var logs map[string]string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		logs = logsOf(c, tj)
		assert.Len(c, logs, 2, "pods")
		for name, log := range logs {
			assert.Regexp(c, `rank \d of 2: step 1: all-reduce gave 3, want 3`, log, "pod %s", name)
			if podUID(c, ns, name) == first {
				assert.Contains(c, log, "rank 0 of 1: step 1: all-reduce gave 1, want 1", "pod %s", name)
				assert.Contains(c, log, "new nodes from group_rank=0; will restart worker group", "pod %s", name)
			}
		}
	}, polling.Timeout, polling.Interval)
	for name, log := range logs {
		for line := range strings.SplitSeq(log, "\n") {
			if strings.Contains(line, "of 2: step ") || strings.Contains(line, "of 1: step 1:") || strings.Contains(line, "new nodes") {
				t.Logf("%s: %s", name, line)
			}
		}
	}
	got := utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, isTrue(trainer.TrainJobComplete))
	assert.Equal(t, int32(2), got.Status.Nodes)
	for _, p := range pods(t, tj) {
		if p.UID == first {
			for _, s := range p.Status.ContainerStatuses {
				assert.Zero(t, s.RestartCount, "the first pod's container restarted: torchrun should restart its workers only")
			}
		}
	}
}

// podUID is the UID of a pod of the namespace.
func podUID(t require.TestingT, ns, name string) types.UID {
	p := &corev1.Pod{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p))
	return p.UID
}
