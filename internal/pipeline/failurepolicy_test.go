package pipeline

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// A runtime's failure policy becomes each training job's pod failure policy and rules at the
// head of the JobSet's failure policy, which tell the rules apart by the Job failure message: a
// pod its node or a preemption failed restarts the training without spending a restart, exit
// code 1 fails the TrainJob at once, SIGABRT restarts it. The initializers are left alone; the
// TrainJob's maxRestarts wins over the runtime's.
func TestTheFailurePolicyIsBuiltIntoTheJobSet(t *testing.T) {
	spec := fullRuntime().RunPolicy(&trainer.RunPolicy{FailurePolicy: &trainer.FailurePolicy{
		MaxRestarts: ptr.To[int32](3),
		Rules: []trainer.FailurePolicyRule{
			{Action: trainer.FailurePolicyFail, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To("node"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1}}},
			{Action: trainer.FailurePolicyRestart, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{134}}},
			{Action: trainer.FailurePolicyRestartNotCounted, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: "ConfigIssue"}}},
		},
	}}).Obj()
	spec.Template.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{MaxRestarts: 10, Rules: []jobsetv1alpha2.FailurePolicyRule{{Name: "runtimes", Action: jobsetv1alpha2.FailJobSet}}}
	rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}

	tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
	js := built(t, tj, rt)
	fp := js.Spec.FailurePolicy
	require.NotNil(t, fp)
	assert.Equal(t, int32(3), fp.MaxRestarts, "the runtime's failure policy's maxRestarts wins over its template's")
	byName := func(r jobsetv1alpha2.FailurePolicyRule) string { return r.Name }
	assert.Equal(t, []string{"trainerDisrupted", "trainerRule0", "trainerRule1", "trainerRule2", "runtimes"}, mapped(fp.Rules, byName))
	assert.Equal(t, jobsetv1alpha2.FailurePolicyRule{Name: "trainerDisrupted", Action: jobsetv1alpha2.RestartJobSetAndIgnoreMaxRestarts, TargetReplicatedJobs: []string{"node"},
		OnJobFailureReasons: []string{"PodFailurePolicy"}, OnJobFailureMessagePatterns: []string{"matching FailJob rule at index 0$"}}, fp.Rules[0])
	for _, r := range fp.Rules[:4] {
		assert.Equal(t, []string{"node"}, r.TargetReplicatedJobs, "the operator's rules are the training jobs': an initializer's failure is the template's to judge")
	}
	assert.Equal(t, jobsetv1alpha2.FailJobSet, fp.Rules[1].Action)
	assert.Equal(t, []string{"matching FailJob rule at index 1$"}, fp.Rules[1].OnJobFailureMessagePatterns)
	assert.Equal(t, jobsetv1alpha2.RestartJobSet, fp.Rules[2].Action)
	assert.Equal(t, jobsetv1alpha2.RestartJobSetAndIgnoreMaxRestarts, fp.Rules[3].Action)

	for _, job := range js.Spec.ReplicatedJobs {
		pfp, restart := job.Template.Spec.PodFailurePolicy, job.Template.Spec.Template.Spec.RestartPolicy
		if trainer.IsInitializer(&job) {
			assert.Nil(t, pfp, "initializer %s", job.Name)
			continue
		}
		require.NotNil(t, pfp, "training job %s", job.Name)
		assert.Equal(t, corev1.RestartPolicyNever, restart, "a pod failure policy needs restartPolicy Never: %s", job.Name)
		require.Len(t, pfp.Rules, 4)
		assert.Equal(t, []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}, pfp.Rules[0].OnPodConditions)
		assert.Equal(t, []int32{1}, pfp.Rules[1].OnExitCodes.Values)
		assert.Equal(t, []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: "ConfigIssue", Status: corev1.ConditionTrue}}, pfp.Rules[3].OnPodConditions)
		for _, r := range pfp.Rules {
			assert.Equal(t, batchv1.PodFailurePolicyActionFailJob, r.Action)
		}
	}

	tj.Spec.FailurePolicy = &trainer.TrainJobFailurePolicy{MaxRestarts: ptr.To[int32](0)}
	assert.Equal(t, int32(0), built(t, tj, rt).Spec.FailurePolicy.MaxRestarts, "the TrainJob's maxRestarts wins")

	spec.Template.Spec.ReplicatedJobs[2].Template.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{}
	_, err := Build(tj, rt, stubFramework{})
	assert.ErrorContains(t, err, `TrainingRuntime "rt": spec.template.spec.replicatedJobs[2].template.spec.podFailurePolicy: Forbidden: a runtime with runPolicy.failurePolicy may not set its training jobs' own pod failure policy`)
}

// A TrainJob's maxRestarts alone, under a runtime without a failure policy, sets the JobSet's.
func TestATrainJobsMaxRestartsAlone(t *testing.T) {
	spec := fullRuntime().Obj()
	rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}
	tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
	assert.Nil(t, built(t, tj, rt).Spec.FailurePolicy, "no failure policy anywhere: none")
	tj.Spec.FailurePolicy = &trainer.TrainJobFailurePolicy{MaxRestarts: ptr.To[int32](2)}
	js := built(t, tj, rt)
	assert.Equal(t, &jobsetv1alpha2.FailurePolicy{MaxRestarts: 2}, js.Spec.FailurePolicy)
	for _, job := range js.Spec.ReplicatedJobs {
		assert.Nil(t, job.Template.Spec.PodFailurePolicy, "no rules: the pods are left as they are")
	}
}

func built(t *testing.T, tj *trainer.TrainJob, rt *trainingruntime.Runtime) *jobsetv1alpha2.JobSet {
	t.Helper()
	children, err := Build(tj, rt, stubFramework{})
	require.NoError(t, err)
	return utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
}

func mapped[T, U any](items []T, f func(T) U) []U {
	var out []U
	for _, item := range items {
		out = append(out, f(item))
	}
	return out
}

// Rules that Kubernetes would refuse in a Job's pod failure policy are the runtime's error, named
// at admission: the Jobs could never be created. A rule naming a container applies to the
// training jobs that have it, and stands as a requirement never met in the others, so that the
// JobSet's rules, which match by index, mean the same in every job.
func TestFailurePolicyRulesKubernetesRefuses(t *testing.T) {
	build := func(rules ...trainer.FailurePolicyRule) (*jobsetv1alpha2.JobSet, error) {
		node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
		workers := utiltesting.ReplicatedJob("workers", "", "worker")
		spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(node, workers).
			RunPolicy(&trainer.RunPolicy{FailurePolicy: &trainer.FailurePolicy{Rules: rules}}).Obj()
		children, err := Build(utiltesting.MakeTrainJob("tj", "ns").Obj(), &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}, stubFramework{})
		if err != nil {
			return nil, err
		}
		return utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet), nil
	}
	codes := func(op batchv1.PodFailurePolicyOnExitCodesOperator, container *string, values ...int32) trainer.FailurePolicyRule {
		return trainer.FailurePolicyRule{Action: trainer.FailurePolicyFail, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: container, Operator: op, Values: values}}
	}
	in := batchv1.PodFailurePolicyOnExitCodesOpIn
	for want, rule := range map[string]trainer.FailurePolicyRule{
		"rules[0].onExitCodes.operator: Unsupported value":           codes("Maybe", nil, 1),
		"rules[0].onExitCodes.values: Invalid value":                 codes(in, nil),
		"must be in increasing order, each once":                     codes(in, nil, 3, 1),
		"0 is a success: it may not fail a pod with operator In":     codes(in, nil, 0, 1),
		"rules[0].onExitCodes.containerName: Invalid value: \"gpu\"": codes(in, ptr.To("gpu"), 1),
		"rules[0].onPodConditions[0].status: Unsupported value": {Action: trainer.FailurePolicyFail,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: "ConfigIssue", Status: "Maybe"}}},
	} {
		_, err := build(rule)
		assert.ErrorContains(t, err, want)
	}

	js, err := build(codes(in, ptr.To("node"), 1))
	require.NoError(t, err)
	for _, job := range js.Spec.ReplicatedJobs {
		rule := job.Template.Spec.PodFailurePolicy.Rules[1]
		if job.Name == "node" {
			assert.Equal(t, ptr.To("node"), rule.OnExitCodes.ContainerName)
			continue
		}
		assert.Nil(t, rule.OnExitCodes, "the workers have no container node")
		assert.Equal(t, []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: neverMet, Status: corev1.ConditionTrue}}, rule.OnPodConditions)
	}
}
