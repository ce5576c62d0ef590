//go:build torchrun

package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

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
