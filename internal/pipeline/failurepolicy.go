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
	policy := runtimeFailurePolicy(b.Runtime.Spec)
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

	if err := checkFailurePolicyRules(b, policy.Rules); err != nil {
		return err
	}
	// An elastic training replaces a pod its node or a preemption took and goes on at the size
	// it has (torchrun's rendezvous lets it back in): Ignore, which does not count it. Any other
	// restarts as a whole, without spending a restart.
	disrupted := batchv1.PodFailurePolicyActionFailJob
	if framework.ElasticPolicy(b.MLPolicy()) != nil {
		disrupted = batchv1.PodFailurePolicyActionIgnore
	}
	podRules := []batchv1.PodFailurePolicyRule{{
		Action:          disrupted,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}
	for _, rule := range policy.Rules {
		podRule := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: rule.OnExitCodes.DeepCopy()}
		for _, c := range rule.OnPodConditions {
			if c.Status == "" {
				c.Status = corev1.ConditionTrue
			}
			podRule.OnPodConditions = append(podRule.OnPodConditions, c)
		}
		podRules = append(podRules, podRule)
	}
	var training []string
	for _, i := range trainingJobs(b) {
		job := &js.ReplicatedJobs[i]
		spec := &job.Template.Spec
		if spec.PodFailurePolicy != nil {
			return b.RuntimeError(field.Forbidden(framework.RuntimeJobsPath.Index(i).Child("template", "spec", "podFailurePolicy"),
				"a runtime with runPolicy.failurePolicy may not set its training jobs' own pod failure policy: the operator builds it from the failure policy's rules"))
		}
		spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: forJob(b, i, podRules)}
		spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		training = append(training, job.Name)
	}
	// The rules apply to the training jobs' failures alone: an initializer's own pod failure
	// policy is the runtime's, and its failure the template's rules say.
	jobSetRules := []jobsetv1alpha2.FailurePolicyRule{{
		Name: DisruptedRuleName, Action: jobsetv1alpha2.RestartJobSetAndIgnoreMaxRestarts, TargetReplicatedJobs: training,
		OnJobFailureReasons: []string{jobFailureReason}, OnJobFailureMessagePatterns: []string{fmt.Sprintf(jobFailureMessage, 0)},
	}}
	for i, rule := range policy.Rules {
		jobSetRules = append(jobSetRules, jobsetv1alpha2.FailurePolicyRule{
			Name: fmt.Sprintf("%s%d", FailurePolicyRuleName, i), Action: jobSetAction(rule.Action), TargetReplicatedJobs: slices.Clone(training),
			OnJobFailureReasons: []string{jobFailureReason}, OnJobFailureMessagePatterns: []string{fmt.Sprintf(jobFailureMessage, i+1)},
		})
	}
	js.FailurePolicy.Rules = append(jobSetRules, js.FailurePolicy.Rules...)
	return nil
}

// checkFailurePolicyRules refuses the rules Kubernetes would refuse in a Job's pod failure policy
// (which the schema, on Kubernetes' own types, does not check): the Jobs could never be created.
// Each is the runtime's error, naming the rule.
func checkFailurePolicyRules(b *framework.Draft, rules []trainer.FailurePolicyRule) error {
	path := field.NewPath("spec", "runPolicy", "failurePolicy", "rules")
	for r, rule := range rules {
		if codes := rule.OnExitCodes; codes != nil {
			p := path.Index(r).Child("onExitCodes")
			switch {
			case codes.Operator != batchv1.PodFailurePolicyOnExitCodesOpIn && codes.Operator != batchv1.PodFailurePolicyOnExitCodesOpNotIn:
				return b.RuntimeError(field.NotSupported(p.Child("operator"), codes.Operator, []batchv1.PodFailurePolicyOnExitCodesOperator{
					batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn}))
			case len(codes.Values) == 0 || len(codes.Values) > 255:
				return b.RuntimeError(field.Invalid(p.Child("values"), codes.Values, "must name between 1 and 255 exit codes"))
			case !slices.IsSorted(codes.Values) || len(slices.Compact(slices.Clone(codes.Values))) != len(codes.Values):
				return b.RuntimeError(field.Invalid(p.Child("values"), codes.Values, "must be in increasing order, each once, as a Job's pod failure policy needs"))
			case codes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && slices.Contains(codes.Values, 0):
				return b.RuntimeError(field.Invalid(p.Child("values"), codes.Values, "0 is a success: it may not fail a pod with operator In"))
			}
			if codes.ContainerName != nil && !slices.ContainsFunc(trainingJobs(b), func(j int) bool {
				_, ok := b.ContainerNamed(j, *codes.ContainerName)
				return ok
			}) {
				return b.RuntimeError(field.Invalid(p.Child("containerName"), *codes.ContainerName, "no training job has a container of that name"))
			}
		}
		for c, cond := range rule.OnPodConditions {
			p := path.Index(r).Child("onPodConditions").Index(c)
			switch {
			case cond.Type == "":
				return b.RuntimeError(field.Required(p.Child("type"), "the condition's type"))
			case cond.Status != "" && cond.Status != corev1.ConditionTrue && cond.Status != corev1.ConditionFalse && cond.Status != corev1.ConditionUnknown:
				return b.RuntimeError(field.NotSupported(p.Child("status"), cond.Status, []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}))
			}
		}
		if rule.OnExitCodes == nil && len(rule.OnPodConditions) == 0 {
			return b.RuntimeError(field.Required(path.Index(r), "onExitCodes, or at least one of onPodConditions"))
		}
	}
	return nil
}

// neverMet is a pod condition no one sets: the requirement of a pod failure policy rule that
// stands, in a job whose pods lack the container a rule names, for that rule, so that each rule
// has the same index in every training job's policy (the JobSet's rules match by it).
const neverMet = "trainer.kubeflow.org/NotThisJobsContainer"

// forJob is the pod failure policy rules for the replicated job of index job: each rule that
// names a container its pods lack never met.
func forJob(b *framework.Draft, job int, rules []batchv1.PodFailurePolicyRule) []batchv1.PodFailurePolicyRule {
	out := make([]batchv1.PodFailurePolicyRule, len(rules))
	for i, r := range rules {
		out[i] = *r.DeepCopy()
		if c := r.OnExitCodes; c != nil && c.ContainerName != nil {
			if _, ok := b.ContainerNamed(job, *c.ContainerName); !ok {
				out[i].OnExitCodes = nil
				out[i].OnPodConditions = []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: neverMet, Status: corev1.ConditionTrue}}
			}
		}
	}
	return out
}

// trainingJobs are the indexes of the JobSet's training jobs: every replicated job but the
// initializers.
func trainingJobs(b *framework.Draft) []int {
	var jobs []int
	for i := range b.JobSet.Spec.ReplicatedJobs {
		if !trainer.IsInitializer(&b.JobSet.Spec.ReplicatedJobs[i]) {
			jobs = append(jobs, i)
		}
	}
	return jobs
}

// runtimeFailurePolicy is a runtime's runPolicy.failurePolicy, or nil.
func runtimeFailurePolicy(spec *trainer.TrainingRuntimeSpec) *trainer.FailurePolicy {
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
