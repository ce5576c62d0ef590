package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/plain"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// TestReviewRecoveryEnvSetByHandIsRefusedWithItsField (review: held up): the runtime's trainer
// container, and a TrainJob's podSpecOverrides of it, that set an env var the operator sets for
// restarts are refused with the field named.
func TestReviewRecoveryEnvSetByHandIsRefusedWithItsField(t *testing.T) {
	t.Run("the runtime's", func(t *testing.T) {
		spec := utiltesting.MakeRuntimeSpec().Obj()
		spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: CheckpointDirEnv, Value: "/x"}}
		rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: ptr.To(spec)}
		_, err := Build(utiltesting.MakeTrainJob("tj", "ns").Obj(), rt, plain.New())
		require.ErrorContains(t, err, "env[0].name: Forbidden: KUBEFLOW_TRAINER_CHECKPOINT_DIR is set by the operator (for restarts)")
	})
	t.Run("a TrainJob's podSpecOverrides", func(t *testing.T) {
		rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: ptr.To(utiltesting.MakeRuntimeSpec().Obj())}
		tj := utiltesting.MakeTrainJob("tj", "ns").PodSpecOverrides(trainer.PodSpecOverride{
			TargetJobs: []string{"node"},
			PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node",
				Env: []corev1.EnvVar{{Name: RestartAttemptEnv, Value: "7"}}}}}}).Obj()
		_, err := Build(tj, rt, plain.New())
		require.ErrorContains(t, err, "KUBEFLOW_TRAINER_RESTART_ATTEMPT is set by the operator (for restarts)")
		t.Log(err)
	})
}
