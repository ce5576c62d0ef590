package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

func scrape(t require.TestingT) testenv.Metrics {
	m, err := cluster.ScrapeMetrics()
	require.NoError(t, err)
	return m
}

// TestMetricsTellWhatHappened runs TrainJobs to each state, and a coscheduling gang, and reads
// on the metrics endpoint what happened: TrainJobs by state and runtime, transitions, the time to
// the JobSet and to running, a creation failure and the gang's wait.
func TestMetricsTellWhatHappened(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	createRuntime(t, ns, "metrics", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	gangJob := nodeJob("100m")
	gangJob.Template.Spec.Template.Spec.SchedulerName = testenv.CoschedulingScheduler
	createRuntime(t, ns, "metrics-gang", utiltesting.MakeRuntimeSpec().ReplicatedJobs(gangJob).
		PodGroupPolicy(trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}).Obj())
	// A JobSet that someone else made has the name of the TrainJob "taken": it cannot be created.
	squatter := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns},
		Spec:       jobsetv1alpha2.JobSetSpec{Suspend: ptr.To(true), ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{nodeJob("100m")}},
	}
	require.NoError(t, k8sClient.Create(ctx, squatter))
	failingRuntime(t, ns, "metrics-oom", "OOMKilled", 1)
	before := scrape(t)

	oom := createTrainJob(t, ns, "oom", "metrics-oom", nil)
	done := createTrainJob(t, ns, "done", "metrics", nil)
	gang := createTrainJob(t, ns, "gang", "metrics-gang", nil)
	running := runningTrainJob(t, ns, "running", "metrics")
	taken := createTrainJob(t, ns, "taken", "metrics", nil)
	waitForTrainJob(t, oom, isTrue(trainer.TrainJobFailed))
	waitForComplete(t, done)
	waitForComplete(t, gang)
	waitForTrainJob(t, running, stateIs(trainer.TrainJobRunning))
	waitForTrainJob(t, taken, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Len(c, tj.Status.Conditions, 1)
		assert.Equal(c, trainer.TrainJobObjectNotOwnedReason, tj.Status.Conditions[0].Reason)
	})

	plain := map[string]string{"framework": "plain"}
	with := func(k, v string) map[string]string { return map[string]string{"framework": "plain", k: v} }
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		after := scrape(c)
		delta := func(name string, labels map[string]string) float64 {
			return after.Value(name, labels) - before.Value(name, labels)
		}
		assert.Equal(c, 3.0, after.Value("trainjob_runtime_trainjobs", map[string]string{"kind": trainer.TrainingRuntimeKind, "namespace": ns, "name": "metrics"}))
		assert.Equal(c, 1.0, after.Value("trainjob_runtime_trainjobs", map[string]string{"kind": trainer.TrainingRuntimeKind, "namespace": ns, "name": "metrics-gang"}))
		assert.GreaterOrEqual(c, delta("trainjob_trainjobs", with("state", trainer.TrainJobComplete)), 2.0, "Complete TrainJobs")
		assert.GreaterOrEqual(c, after.Value("trainjob_trainjobs", with("state", trainer.TrainJobRunning)), 1.0, "Running TrainJobs")
		assert.GreaterOrEqual(c, after.Value("trainjob_trainjobs", with("state", "Pending")), 1.0, "Pending TrainJobs")
		assert.GreaterOrEqual(c, delta("trainjob_transitions_total", with("to", trainer.TrainJobComplete)), 2.0, "transitions to Complete")
		assert.GreaterOrEqual(c, delta("trainjob_transitions_total", map[string]string{"from": "Pending", "to": trainer.TrainJobCreated, "reason": trainer.TrainJobJobsCreatedReason}), 3.0)
		assert.GreaterOrEqual(c, delta("trainjob_time_to_jobset_seconds", plain), 3.0, "JobSets created")
		assert.GreaterOrEqual(c, delta("trainjob_time_to_running_seconds", plain), 1.0, "TrainJobs running")
		assert.GreaterOrEqual(c, delta("trainjob_time_to_first_pod_running_seconds", plain), 3.0, "TrainJobs whose first pod ran")
		assert.GreaterOrEqual(c, delta("trainjob_creation_failures_total", with("reason", trainer.TrainJobObjectNotOwnedReason)), 1.0)
		assert.GreaterOrEqual(c, delta("trainjob_gang_wait_seconds", map[string]string{"scheduler": "coscheduling"}), 1.0, "gangs scheduled")
		assert.GreaterOrEqual(c, delta("trainjob_failures_total", with("reason", "OOMKilled")), 1.0, "TrainJobs that ran out of memory")
		assert.GreaterOrEqual(c, delta("trainjob_pod_failures_total", with("reason", "OOMKilled")), 2.0, "pods that ran out of memory, one per attempt")
		assert.GreaterOrEqual(c, delta("trainjob_restarts_total", with("cause", "failure")), 1.0, "restarts after a failure")
	}, timeout, interval)
}
