package pipeline

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/plain"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

func TestRecovery(t *testing.T) {
	attempt := corev1.EnvVar{Name: RestartAttemptEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}}}
	checkpoints := corev1.EnvVar{Name: CheckpointDirEnv, Value: "/ckpt"}
	cases := map[string]struct {
		maxRestarts int32
		policy      *trainer.RecoveryPolicy
		wantEnv     []corev1.EnvVar
		wantLabel   string
	}{
		"a JobSet that never restarts: nothing": {},
		"a JobSet that restarts: the attempt, and its restarts keep off nodes that failed them": {
			maxRestarts: 2, wantEnv: []corev1.EnvVar{attempt}, wantLabel: "NodeFailures",
		},
		"a checkpoint directory, with or without restarts (a resume after preemption needs it too)": {
			policy: &trainer.RecoveryPolicy{CheckpointDir: "/ckpt"}, wantEnv: []corev1.EnvVar{checkpoints},
		},
		"every failure's node avoided": {
			maxRestarts: 1, policy: &trainer.RecoveryPolicy{AvoidNodes: trainer.AvoidNodesOnAllFailures, CheckpointDir: "/ckpt"},
			wantEnv: []corev1.EnvVar{checkpoints, attempt}, wantLabel: "AllFailures",
		},
		"no node avoided": {
			maxRestarts: 1, policy: &trainer.RecoveryPolicy{AvoidNodes: trainer.AvoidNodesNever}, wantEnv: []corev1.EnvVar{attempt},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := utiltesting.MakeRuntimeSpec().Obj()
			if tc.maxRestarts > 0 {
				spec.Template.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{MaxRestarts: tc.maxRestarts}
			}
			spec.RecoveryPolicy = tc.policy
			rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: ptr.To(spec)}
			children, err := Build(utiltesting.MakeTrainJob("tj", "ns").Obj(), rt, plain.New())
			require.NoError(t, err)
			js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
			job := js.Spec.ReplicatedJobs[0].Template
			var env []corev1.EnvVar
			for _, e := range job.Spec.Template.Spec.Containers[0].Env {
				if e.Name == RestartAttemptEnv || e.Name == CheckpointDirEnv {
					env = append(env, e)
				}
			}
			assert.Equal(t, tc.wantEnv, env)
			assert.Equal(t, tc.wantLabel, job.Labels[trainer.AvoidNodesLabel])
		})
	}
}

func TestRecoveryEnvIsTheOperators(t *testing.T) {
	rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: ptr.To(utiltesting.MakeRuntimeSpec().Obj())}
	tj := utiltesting.MakeTrainJob("tj", "ns").Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: RestartAttemptEnv, Value: "0"}}}).Obj()
	_, err := Build(tj, rt, plain.New())
	require.ErrorContains(t, err, "spec.trainer.env[0].name: Forbidden: KUBEFLOW_TRAINER_RESTART_ATTEMPT is set by the operator (for restarts)")
}

// TestRecoveryEnvSetByHandIsRefusedWithItsField: the runtime's trainer
// container, and a TrainJob's podSpecOverrides of it, that set an env var the operator sets for
// restarts are refused with the field named.
func TestRecoveryEnvSetByHandIsRefusedWithItsField(t *testing.T) {
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

	})
}

// JobSet restarts all of a JobSet's Jobs under a failurePolicy rule RestartJobSetAndIgnoreMaxRestarts
// whatever maxRestarts is: how a runtime restarts after host maintenance, preemption or a node's
// loss without spending its budget for the training's own failures, the very restarts the
// node avoidance is for. With maxRestarts 0 and such a rule, the trainer is told its attempt and
// a restart keeps off the failed node.
func TestARestartThatIgnoresMaxRestartsIsARestart(t *testing.T) {
	spec := utiltesting.MakeRuntimeSpec().Obj()
	spec.Template.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{Rules: []jobsetv1alpha2.FailurePolicyRule{{
		Name: "node-maintenance", Action: jobsetv1alpha2.RestartJobSetAndIgnoreMaxRestarts,
		OnJobFailureReasons: []string{batchv1.JobReasonPodFailurePolicy}}}}
	rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: ptr.To(spec)}
	children, err := Build(utiltesting.MakeTrainJob("tj", "ns").Obj(), rt, plain.New())
	require.NoError(t, err)
	js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
	job := js.Spec.ReplicatedJobs[0].Template
	assert.Equal(t, "NodeFailures", job.Labels[trainer.AvoidNodesLabel], "the restart's Jobs go through the webhook")
	assert.True(t, slices.ContainsFunc(job.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == RestartAttemptEnv }),
		"the trainer is told its attempt")
}
