package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestTheFailurePolicy runs a runtime's runPolicy.failurePolicy (KEP-4162) through the real Job
// and JobSet controllers: a trainer that exits 1 (a bug in the code) fails the TrainJob at once,
// with restarts to spare; one that is OOM-killed restarts the training, spending its one restart,
// and then fails; one its node evicts (DisruptionTarget) restarts it again and again without
// spending any.
func TestTheFailurePolicy(t *testing.T) {
	ns := newNamespace(t)
	exits := func(codes ...int32) *batchv1.PodFailurePolicyOnExitCodesRequirement {
		return &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr.To("node"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: codes}
	}
	policy := &trainer.RunPolicy{FailurePolicy: &trainer.FailurePolicy{MaxRestarts: ptr.To[int32](1), Rules: []trainer.FailurePolicyRule{
		{Action: trainer.FailurePolicyFail, OnExitCodes: exits(1)},
		{Action: trainer.FailurePolicyRestart, OnExitCodes: exits(137)},
	}}}
	for _, fail := range []string{"true", "OOMKilled", "Evicted"} {
		job := nodeJob("100m")
		job.Template.Spec.Template.Annotations = map[string]string{testenv.FailAnnotation: fail}
		createRuntime(t, ns, "fails-"+map[string]string{"true": "exit1", "OOMKilled": "oom", "Evicted": "evicted"}[fail],
			utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).RunPolicy(policy).Obj())
	}
	bug := createTrainJob(t, ns, "bug", "fails-exit1", nil)
	oom := createTrainJob(t, ns, "oom", "fails-oom", nil)
	evicted := createTrainJob(t, ns, "evicted", "fails-evicted", nil)

	got := waitForTrainJob(t, bug, isTrue(trainer.TrainJobFailed))
	assert.Equal(t, int32(0), got.Status.Restarts, "the bug was restarted")
	if assert.NotNil(t, got.Status.Failure) {
		assert.Equal(t, ptr.To[int32](1), got.Status.Failure.ExitCode)
	}
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, "exit code 1")

	got = waitForTrainJob(t, oom, isTrue(trainer.TrainJobFailed))
	assert.Equal(t, int32(1), got.Status.Restarts, "the OOM-killed training restarts once, its one restart")
	assert.Equal(t, int32(1), got.Status.RestartsCountTowardsMax)

	got = waitForTrainJob(t, evicted, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.GreaterOrEqual(c, tj.Status.Restarts, int32(3), "restarts after evictions")
	})
	assert.Equal(t, int32(0), got.Status.RestartsCountTowardsMax, "evictions spent restarts")
	assert.False(t, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobFailed), "evictions failed the TrainJob")
	assert.True(t, got.Status.Failure != nil && got.Status.Failure.NodeCaused, "the failure is the node's: %+v", got.Status.Failure)
}
