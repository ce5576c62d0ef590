package pipeline

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// The names of the JobSet failure policy rules the operator puts first in the JobSet's, for the
// runtime's runPolicy.failurePolicy.
const (
	// DisruptedRuleName restarts the training, without spending a restart, after a pod failure
	// its node or a preemption caused.
	DisruptedRuleName = "trainerDisrupted"
	// FailurePolicyRuleName is the prefix of the rule of each of the failure policy's rules, by
	// index: trainerRule0, trainerRule1, ...
	FailurePolicyRuleName = "trainerRule"
)

// jobFailureReason is the reason a Job fails with when a pod meets a FailJob rule of its pod
// failure policy, and jobFailureMessage the Job controller's message then, which names the rule's
// index: the JobSet tells the operator's rules apart by it.
const (
	jobFailureReason  = batchv1.JobReasonPodFailurePolicy
	jobFailureMessage = "matching FailJob rule at index %d$"
)

// applyFailurePolicy builds the runtime's runPolicy.failurePolicy (KEP-4162) into the JobSet, and
// the TrainJob's spec.failurePolicy.maxRestarts. Each training job (every replicated job but the
// initializers) gets a pod failure policy that fails its Job at once when a pod meets a rule:
// first a rule for pods its node or a preemption failed (DisruptionTarget), then the runtime's
// rules in order. The JobSet's failure policy gets, before the runtime's own rules, one rule for
// each, matched by the Job failure message that names the pod failure policy's rule: restart
// without spending a restart, fail the JobSet, or restart it spending one. A pod failure policy
// needs the pods' restartPolicy to be Never: a failed pod is replaced, not restarted in place.
func applyFailurePolicy(b *framework.Draft) error {
	var maxRestarts *int32
	policy := trainerRunPolicy(b.Runtime.Spec)
	if policy != nil {
		maxRestarts = policy.MaxRestarts
	}
	if own := b.TrainJob.Spec.FailurePolicy; own != nil && own.MaxRestarts != nil {
		maxRestarts = own.MaxRestarts
	}
	if maxRestarts == nil && policy == nil {
		return nil
	}
	js := &b.JobSet.Spec
	if js.FailurePolicy == nil {
		js.FailurePolicy = &jobsetv1alpha2.FailurePolicy{}
	}
	if maxRestarts != nil {
		js.FailurePolicy.MaxRestarts = *maxRestarts
	}
	if policy == nil {
		return nil
	}

	podRules := []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionFailJob,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}
	jobSetRules := []jobsetv1alpha2.FailurePolicyRule{{
		Name: DisruptedRuleName, Action: jobsetv1alpha2.RestartJobSetAndIgnoreMaxRestarts,
		OnJobFailureReasons: []string{jobFailureReason}, OnJobFailureMessagePatterns: []string{fmt.Sprintf(jobFailureMessage, 0)},
	}}
	for i, rule := range policy.Rules {
		podRule := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: rule.OnExitCodes.DeepCopy()}
		for _, c := range rule.OnPodConditions {
			if c.Status == "" {
				c.Status = corev1.ConditionTrue
			}
			podRule.OnPodConditions = append(podRule.OnPodConditions, c)
		}
		podRules = append(podRules, podRule)
		jobSetRules = append(jobSetRules, jobsetv1alpha2.FailurePolicyRule{
			Name: fmt.Sprintf("%s%d", FailurePolicyRuleName, i), Action: jobSetAction(rule.Action),
			OnJobFailureReasons: []string{jobFailureReason}, OnJobFailureMessagePatterns: []string{fmt.Sprintf(jobFailureMessage, i+1)},
		})
	}
	for i := range js.ReplicatedJobs {
		job := &js.ReplicatedJobs[i]
		if trainer.IsInitializer(job) {
			continue
		}
		spec := &job.Template.Spec
		if spec.PodFailurePolicy != nil {
			return b.RuntimeError(field.Forbidden(framework.RuntimeJobsPath.Index(i).Child("template", "spec", "podFailurePolicy"),
				"a runtime with runPolicy.failurePolicy may not set its training jobs' own pod failure policy: the operator builds it from the failure policy's rules"))
		}
		spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: slices.Clone(podRules)}
		spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	js.FailurePolicy.Rules = append(jobSetRules, js.FailurePolicy.Rules...)
	return nil
}

// trainerRunPolicy is a runtime's runPolicy.failurePolicy, or nil.
func trainerRunPolicy(spec *trainer.TrainingRuntimeSpec) *trainer.FailurePolicy {
	if spec.RunPolicy == nil {
		return nil
	}
	return spec.RunPolicy.FailurePolicy
}

// jobSetAction is the JobSet failure policy action of a failure policy rule's action.
func jobSetAction(a trainer.FailurePolicyAction) jobsetv1alpha2.FailurePolicyAction {
	switch a {
	case trainer.FailurePolicyFail:
		return jobsetv1alpha2.FailJobSet
	case trainer.FailurePolicyRestartNotCounted:
		return jobsetv1alpha2.RestartJobSetAndIgnoreMaxRestarts
	}
	return jobsetv1alpha2.RestartJobSet
}
