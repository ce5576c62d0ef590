package pipeline

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/podfailure"
)

// The env vars that tell the trainer how to resume (docs/frameworks.md, "Restarts and
// checkpoints").
const (
	// RestartAttemptEnv is JobSet's restart attempt of the pod: 0 for the first run, then one
	// more for each restart of all of the TrainJob's pods. Set when the JobSet restarts.
	RestartAttemptEnv = "KUBEFLOW_TRAINER_RESTART_ATTEMPT"
	// CheckpointDirEnv is the runtime's recoveryPolicy.checkpointDir.
	CheckpointDirEnv = "KUBEFLOW_TRAINER_CHECKPOINT_DIR"
)

// RecoveryEnv are the env vars of the trainer container the operator sets for recovery.
var RecoveryEnv = []string{RestartAttemptEnv, CheckpointDirEnv}

// applyRecovery tells the trainer where its checkpoints are, and, when the JobSet restarts its
// pods, which attempt it runs; and labels the Jobs of a JobSet that restarts with the runtime's
// policy of the nodes a restart keeps off, for the Job webhook.
func applyRecovery(b *framework.Draft) error {
	policy := b.Runtime.Spec.RecoveryPolicy
	if policy == nil {
		policy = &trainer.RecoveryPolicy{}
	}
	if policy.CheckpointDir != "" {
		b.SetEnv(corev1.EnvVar{Name: CheckpointDirEnv, Value: policy.CheckpointDir})
	}
	if !restarts(b.JobSet.Spec.FailurePolicy) {
		return nil
	}
	b.SetEnv(corev1.EnvVar{Name: RestartAttemptEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + podfailure.RestartAttemptLabel + "']"},
	}})
	avoid := policy.AvoidNodes
	if avoid == "" {
		avoid = trainer.AvoidNodesOnNodeFailures
	}
	if avoid == trainer.AvoidNodesNever {
		return nil
	}
	for i := range b.JobSet.Spec.ReplicatedJobs {
		job := &b.JobSet.Spec.ReplicatedJobs[i].Template
		if job.Labels == nil {
			job.Labels = map[string]string{}
		}
		job.Labels[trainer.AvoidNodesLabel] = string(avoid)
	}
	return nil
}

// restarts tells whether a JobSet may restart its Jobs: it has restarts to spend, or a rule
// that restarts without spending them (after a node's maintenance or loss, say).
func restarts(fp *jobsetv1alpha2.FailurePolicy) bool {
	return fp != nil && (fp.MaxRestarts > 0 || slices.ContainsFunc(fp.Rules, func(r jobsetv1alpha2.FailurePolicyRule) bool {
		return r.Action == jobsetv1alpha2.RestartJobSetAndIgnoreMaxRestarts
	}))
}
