package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// nodeJob is a replicated job "node" whose pods run the trainer container "node", asking for cpu,
// and fail rather than restart: a failed pod fails its Job, and so the JobSet.
func nodeJob(cpu string) jobsetv1alpha2.ReplicatedJob {
	rj := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	rj.Template.Spec.BackoffLimit = ptr.To[int32](0)
	pod := &rj.Template.Spec.Template
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	return rj
}

// createRuntime creates a TrainingRuntime in ns.
func createRuntime(t *testing.T, ns, name string, spec trainer.TrainingRuntimeSpec) *trainer.TrainingRuntime {
	t.Helper()
	rt := utiltesting.TrainingRuntime(name, ns, spec)
	require.NoError(t, k8sClient.Create(context.Background(), rt))
	return rt
}

// createTrainJob creates a TrainJob of a TrainingRuntime in ns.
func createTrainJob(t *testing.T, ns, name, runtime string, change func(*utiltesting.TrainJobWrapper)) *trainer.TrainJob {
	t.Helper()
	w := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime)
	if change != nil {
		change(w)
	}
	tj := w.Obj()
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	return tj
}

// names lists the names of objects, with their UIDs: a recreated object shows as a change.
func names[T any, P interface {
	*T
	client.Object
}](items []T) []string {
	var out []string
	for i := range items {
		o := P(&items[i])
		out = append(out, o.GetName()+"/"+string(o.GetUID()))
	}
	return out
}

func jobsOf(t require.TestingT, tj *trainer.TrainJob) []batchv1.Job {
	list := &batchv1.JobList{}
	require.NoError(t, k8sClient.List(context.Background(), list, client.InNamespace(tj.Namespace),
		client.MatchingLabels{jobsetv1alpha2.JobSetNameKey: tj.Name}))
	return list.Items
}

// TestFailedTrainerPodFailsTheTrainJob fails the trainer's pod and watches the TrainJob fail with
// the JobSet's reason and message, and nothing start again.
func TestFailedTrainerPodFailsTheTrainJob(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	job := nodeJob("100m")
	job.Template.Spec.Template.Annotations = map[string]string{testenv.FailAnnotation: "true"}
	createRuntime(t, ns, "failing", utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).Obj())
	tj := createTrainJob(t, ns, "fails", "failing", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(2) })

	got := waitForTrainJob(t, tj, isTrue(trainer.TrainJobFailed))
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
	jsFailed := apimeta.FindStatusCondition(js.Status.Conditions, string(jobsetv1alpha2.JobSetFailed))
	require.NotNil(t, jsFailed, "the JobSet has no Failed condition")
	failed := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
	assert.Equal(t, jsFailed.Reason, failed.Reason)
	assert.True(t, strings.HasPrefix(failed.Message, jsFailed.Message+"; first failure: pod fails-node-0-"), "JobSet's message, then the cause: %q", failed.Message)
	assert.False(t, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobComplete))

	// Once failed, final: the same JobSet, Jobs and pods stay, and nothing new runs.
	jobs, ps := names(jobsOf(t, tj)), names(pods(t, tj))
	time.Sleep(3 * podRunTime)
	again := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), again))
	assert.Equal(t, js.UID, again.UID, "the JobSet was recreated")
	assert.ElementsMatch(t, jobs, names(jobsOf(t, tj)), "Jobs were recreated")
	assert.ElementsMatch(t, ps, names(pods(t, tj)), "pods were recreated")
	assert.Equal(t, got.Status.Conditions, waitForTrainJob(t, tj, isTrue(trainer.TrainJobFailed)).Status.Conditions)
}

// addNode adds a fake node of cpu CPUs, labelled pool=<pool>, so that a test's pods can be kept
// to capacity of its own with a node selector.
func addNode(t *testing.T, name, pool, cpu string) {
	t.Helper()
	require.NoError(t, cluster.AddNode(context.Background(), name, testenv.NodeCapacity(cpu, "16Gi", "0"), map[string]string{"pool": pool}))
}

// inPool keeps a TrainJob's pods on the nodes of a pool, and keeps them running for an hour.
func inPool(pool string) func(*utiltesting.TrainJobWrapper) {
	return func(w *utiltesting.TrainJobWrapper) {
		w.NumNodes(3).PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}}})
		w.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	}
}

// TestGangBindsAllOrNothing runs three 4-CPU pods on a pool of two 4-CPU nodes: without a gang,
// two pods bind and one waits; as a coscheduling gang, none binds until a third node joins the
// pool, and then all do.
func TestGangBindsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	pool := ns
	addNode(t, pool+"-a", pool, "4")
	addNode(t, pool+"-b", pool, "4")

	plain := createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("4")).Obj())
	gangJob := nodeJob("4")
	gangJob.Template.Spec.Template.Spec.SchedulerName = testenv.CoschedulingScheduler
	createRuntime(t, ns, "gang", utiltesting.MakeRuntimeSpec().ReplicatedJobs(gangJob).
		PodGroupPolicy(trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}).Obj())

	// Without a gang, the pods that fit bind.
	tj := createTrainJob(t, ns, "no-gang", plain.Name, inPool(pool))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ps := pods(c, tj)
		assert.Len(c, ps, 3)
		assert.Equal(c, 2, bound(ps))
	}, timeout, interval, "two of three pods bind without a gang")
	require.NoError(t, k8sClient.Delete(ctx, tj, client.PropagationPolicy("Foreground")))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, names(pods(c, tj))) }, timeout, interval)

	bindsWhole(t, ns, pool, "gang")
}

// TestKubernetesOwnGangBindsAllOrNothing does the same with Kubernetes' own gang scheduling
// (podGroupPolicy.workload): the default scheduler, kube-scheduler with its GangScheduling plugin,
// binds none of the three pods until all fit, and then all of them.
func TestKubernetesOwnGangBindsAllOrNothing(t *testing.T) {
	ns := newNamespace(t)
	pool := ns
	addNode(t, pool+"-a", pool, "4")
	addNode(t, pool+"-b", pool, "4")
	createRuntime(t, ns, "gang", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("4")).
		PodGroupPolicy(trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}).Obj())
	tj := bindsWhole(t, ns, pool, "gang")
	for _, p := range pods(t, tj) {
		assert.Equal(t, &corev1.PodSchedulingGroup{PodGroupName: ptr.To(tj.Name)}, p.Spec.SchedulingGroup, "pod %s", p.Name)
	}
}

// bindsWhole runs a TrainJob of three 4-CPU pods of the gang runtime on the pool's two 4-CPU
// nodes: none binds while the gang cannot fit; once a third node joins, all do.
func bindsWhole(t *testing.T, ns, pool, runtime string) *trainer.TrainJob {
	t.Helper()
	tj := createTrainJob(t, ns, "gang", runtime, inPool(pool))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Len(c, pods(c, tj), 3) }, timeout, interval)
	time.Sleep(5 * time.Second) // The scheduler has tried them all by now.
	assert.Zero(t, bound(pods(t, tj)), "a pod of a gang that cannot fit was bound")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, utiltesting.EventReasons(c, k8sClient, tj), "Normal/GangWaiting")
	}, timeout, interval, "kubectl describe tells why the gang waits")

	// kube-scheduler may lose track of a pod that waited at the gang's Permit ("The same pod is
	// tracked in multiple places in the scheduler, and just discard it", seen once in CI); it
	// tries such a pod again when it has been unschedulable for 5 minutes.
	addNode(t, pool+"-c", pool, "4")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 3, bound(pods(c, tj))) }, 6*time.Minute, interval,
		"the gang binds once it fits")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, utiltesting.EventReasons(c, k8sClient, tj), "Normal/GangScheduled")
	}, timeout, interval, "kubectl describe tells when the gang was placed")
	return tj
}

// TestNamesAtTheLimit creates the TrainJob with the longest name that admission accepts for the
// largest number of nodes the schema allows: JobSet accepts its JobSet, whose pods would have
// names of 63 characters. One character more is refused at admission, with the numbers. At 16
// nodes, the longest name runs to Complete: the Job controller names its pods for real.
func TestNamesAtTheLimit(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("10m")).Obj())
	name := func(n int) string { return "x" + strings.Repeat("a", n-1) }

	// <name>-node-0-4999-<5 random characters>: 45 characters of name are left.
	err := k8sClient.Create(ctx, utiltesting.MakeTrainJob(name(46), ns).RuntimeRef(trainer.TrainingRuntimeKind, "plain").
		NumNodes(5000).Suspend(true).Obj())
	require.True(t, apierrors.IsInvalid(err), "a name too long for its pods was accepted: %v", err)
	assert.ErrorContains(t, err, `would get names of 64 characters`)
	assert.ErrorContains(t, err, `the name can have at most 45 characters`)

	tj := createTrainJob(t, ns, name(45), "plain", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(5000).Suspend(true) })
	waitForTrainJob(t, tj, stateIs(trainer.TrainJobSuspended))
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
	assert.Equal(t, ptr.To[int32](5000), js.Spec.ReplicatedJobs[0].Template.Spec.Completions)

	tj = createTrainJob(t, ns, name(47), "plain", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(16) })
	waitForComplete(t, tj)
	ps := pods(t, tj)
	require.Len(t, ps, 16)
	for _, p := range ps {
		assert.LessOrEqual(t, len(p.Name), 63, p.Name)
	}

	err = k8sClient.Create(ctx, utiltesting.MakeTrainJob("huge", ns).RuntimeRef(trainer.TrainingRuntimeKind, "plain").NumNodes(5001).Obj())
	require.True(t, apierrors.IsInvalid(err), "5001 nodes were accepted: %v", err)
	assert.ErrorContains(t, err, "spec.trainer.numNodes")
}

// TestActiveDeadline runs TrainJobs whose pods would run for an hour under a deadline of a few
// seconds: each is Failed with reason DeadlineExceeded and its pods stop. A TrainJob suspended
// and resumed counts from its resume.
func TestActiveDeadline(t *testing.T) {
	ns := newNamespace(t)
	job := nodeJob("100m")
	job.Template.Spec.Template.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	createRuntime(t, ns, "endless", utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).Obj())
	deadline := func(seconds int64, suspend bool) func(*utiltesting.TrainJobWrapper) {
		return func(w *utiltesting.TrainJobWrapper) {
			w.NumNodes(2).Suspend(suspend)
			w.Spec.ActiveDeadlineSeconds = ptr.To(seconds)
		}
	}

	running := createTrainJob(t, ns, "running", "endless", deadline(3, false))
	resumed := createTrainJob(t, ns, "resumed", "endless", deadline(6, true))
	time.Sleep(5 * time.Second) // Longer than its deadline, suspended: the clock does not run.
	require.NoError(t, update(t, resumed, func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) }))
	resumedAt := time.Now()

	for _, tj := range []*trainer.TrainJob{running, resumed} {
		got := waitForTrainJob(t, tj, isTrue(trainer.TrainJobFailed))
		failed := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
		assert.Equal(t, trainer.TrainJobDeadlineExceededReason, failed.Reason)
		assert.Contains(t, failed.Message, "spec.activeDeadlineSeconds")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, p := range pods(c, tj) {
				assert.NotEqual(c, corev1.PodRunning, p.Status.Phase, "pod %s still runs", p.Name)
			}
		}, timeout, interval, "the pods of %s stop", tj.Name)
	}
	failed := apimeta.FindStatusCondition(current(t, resumed).Status.Conditions, trainer.TrainJobFailed)
	assert.GreaterOrEqual(t, failed.LastTransitionTime.Sub(resumedAt), 5*time.Second,
		"the resumed TrainJob's deadline counted from its creation, not its resume")
}

// TestTheRuntimesRunPolicy: a runtime's runPolicy is the deadline and TTL of the TrainJobs that
// set none (KEP-2899), from the runtime as the TrainJob first ran with it; a TrainJob's own fields
// override it.
func TestTheRuntimesRunPolicy(t *testing.T) {
	ns := newNamespace(t)
	job := nodeJob("100m")
	job.Template.Spec.Template.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	createRuntime(t, ns, "bounded", utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).
		RunPolicy(&trainer.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](3), TTLSecondsAfterFinished: ptr.To[int32](5)}).Obj())

	defaulted := createTrainJob(t, ns, "defaulted", "bounded", nil)
	own := createTrainJob(t, ns, "own", "bounded", func(w *utiltesting.TrainJobWrapper) {
		w.Spec.ActiveDeadlineSeconds = ptr.To[int64](8)
		w.Spec.TTLSecondsAfterFinished = ptr.To[int32](3600)
	})

	got := waitForTrainJob(t, defaulted, isTrue(trainer.TrainJobFailed))
	failed := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
	assert.Equal(t, trainer.TrainJobDeadlineExceededReason, failed.Reason)
	assert.Contains(t, failed.Message, "runtime's runPolicy.activeDeadlineSeconds (3s)")
	require.NotNil(t, got.Status.RuntimeSnapshot)
	assert.Equal(t, &trainer.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](3), TTLSecondsAfterFinished: ptr.To[int32](5)},
		got.Status.RuntimeSnapshot.RunPolicy, "the runtime's run policy, recorded when the TrainJob first ran")
	assert.Nil(t, got.Status.CompletionTime, "a failed TrainJob never completed")
	assert.False(t, apimeta.IsStatusConditionTrue(current(t, own).Status.Conditions, trainer.TrainJobFailed),
		"the TrainJob with its own deadline of 8 s failed at the runtime's 3 s")

	// The runtime's TTL deletes the first, about 5 s after it failed; the second fails at its own
	// deadline and is kept for its own hour.
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(defaulted), &trainer.TrainJob{}))
	}, timeout, interval, "the runtime's ttlSecondsAfterFinished did not delete the TrainJob")
	got = waitForTrainJob(t, own, isTrue(trainer.TrainJobFailed))
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, "spec.activeDeadlineSeconds (8s)")
	time.Sleep(7 * time.Second) // past the runtime's TTL
	assert.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(own), &trainer.TrainJob{}),
		"the TrainJob with its own TTL of an hour was deleted at the runtime's")
}

// TestAnElasticRunThatNeverGrowsCompletes: an elastic torch gang of 2 to 3 nodes on a pool where
// only 2 of its 4-CPU pods fit. The gang is placed with 2, the third pod waits for room that never
// comes, and the run of 2 completes: the Job succeeds once minNodes of its pods did, as torchrun,
// the gang and the Job agree.
func TestAnElasticRunThatNeverGrowsCompletes(t *testing.T) {
	ns := newNamespace(t)
	addNode(t, ns+"-a", ns, "4")
	addNode(t, ns+"-b", ns, "4")
	node := nodeJob("4")
	node.Template.Spec.Template.Spec.SchedulerName = testenv.CoschedulingScheduler
	node.Template.Spec.Template.Spec.NodeSelector = map[string]string{"pool": ns}
	createRuntime(t, ns, "elastic", utiltesting.MakeRuntimeSpec().ReplicatedJobs(node).
		Torch(&trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](2), MaxNodes: ptr.To[int32](3)}}).
		PodGroupPolicy(trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}).Obj())
	tj := createTrainJob(t, ns, "elastic", "elastic", nil)

	waitForComplete(t, tj)
	var ran int
	for _, p := range pods(t, tj) {
		if p.Spec.NodeName != "" {
			ran++
		}
	}
	assert.Equal(t, 2, ran, "pods placed: the run was not of minNodes")
}
