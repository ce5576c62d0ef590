package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// eventsOf lists the TrainJob's events of a reason, oldest first.
func eventsOf(t require.TestingT, tj *trainer.TrainJob, reason string) []corev1.Event {
	list := &corev1.EventList{}
	require.NoError(t, k8sClient.List(context.Background(), list, client.InNamespace(tj.Namespace)))
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == trainer.TrainJobKind && e.InvolvedObject.Name == tj.Name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// failingRuntime creates a runtime whose node pods fail as fail says (testenv.FailAnnotation)
// once they ran, and whose JobSet restarts them maxRestarts times.
func failingRuntime(t *testing.T, ns, name, fail string, maxRestarts int32) {
	job := nodeJob("100m")
	job.Template.Spec.Template.Annotations = map[string]string{testenv.FailAnnotation: fail}
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).Obj()
	if maxRestarts > 0 {
		spec.Template.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{MaxRestarts: maxRestarts}
	}
	createRuntime(t, ns, name, spec)
}

// TestAFailedTrainJobSaysWhy fails the pods of a TrainJob each way the local cluster's nodes can
// (an exit code, the kernel's OOM killer, the kubelet's eviction), and reads why in its status:
// the first failed pod, its role and rank, container, exit code and signal, reason, node and
// message; the Failed condition's message says it too, and an event PodFailed.
func TestAFailedTrainJobSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		fail, reason string
		exitCode     int32
		signal       *int32
		nodeCaused   bool
		message      string
	}{
		{fail: "true", reason: "Error", exitCode: 1, message: "kwok: pod-fail after its run time"},
		{fail: "OOMKilled", reason: "OOMKilled", exitCode: 137, signal: ptr.To[int32](9), message: "kwok: pod-oom after its run time"},
		{fail: "Evicted", reason: "Evicted", exitCode: 137, signal: ptr.To[int32](9), nodeCaused: true, message: "The node was low on resource: memory."},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			failingRuntime(t, ns, "failing", tc.fail, 0)
			tj := createTrainJob(t, ns, "fails", "failing", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(2) })

			got := waitForTrainJob(t, tj, isTrue(trainer.TrainJobFailed))
			f := got.Status.Failure
			require.NotNil(t, f, "status.failure of a Failed TrainJob")
			podNodes := map[string]string{}
			for _, p := range pods(t, tj) {
				podNodes[p.Name] = p.Spec.NodeName
			}
			require.Contains(t, podNodes, f.Pod, "status.failure names a pod of the TrainJob")
			assert.Equal(t, podNodes[f.Pod], f.Node)
			assert.Equal(t, "node", f.ReplicatedJob)
			assert.Equal(t, ptr.To[int32](0), f.Rank, "both ranks failed at once: the lowest is named")
			assert.Equal(t, "node", f.Container)
			assert.Equal(t, ptr.To(tc.exitCode), f.ExitCode)
			assert.Equal(t, tc.signal, f.Signal)
			assert.Equal(t, tc.reason, f.Reason)
			assert.Equal(t, tc.nodeCaused, f.NodeCaused)
			assert.Equal(t, tc.message, f.Message)
			assert.Zero(t, f.Attempt)

			failed := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
			assert.Contains(t, failed.Message, fmt.Sprintf("first failure: pod %s (replicated job node, rank 0, attempt 0), container node: %s, exit code %d",
				f.Pod, tc.reason, tc.exitCode))
			assert.Contains(t, failed.Message, "on node "+f.Node)
			assert.Contains(t, failed.Message, tc.message)

			require.EventuallyWithT(t, func(c *assert.CollectT) {
				events := eventsOf(c, tj, failed.Reason)
				if assert.NotEmpty(c, events, "no %s event", failed.Reason) {
					assert.Equal(c, corev1.EventTypeWarning, events[0].Type)
					assert.Contains(c, events[0].Message, "first failure: pod "+f.Pod)
					assert.Contains(c, events[0].Message, "on node "+f.Node)
				}
			}, timeout, interval)
		})
	}
}

// TestARestartSaysWhyAndTheLastAttemptsFailureStays restarts a TrainJob whose pods always fail:
// each attempt's failure is told as it happens (PodFailed), the restart is (Restarted, with the
// cause), status.restarts counts it, and the Failed TrainJob's status.failure is the last
// attempt's.
func TestARestartSaysWhyAndTheLastAttemptsFailureStays(t *testing.T) {
	ns := newNamespace(t)
	failingRuntime(t, ns, "failing", "OOMKilled", 1)
	tj := createTrainJob(t, ns, "restarts", "failing", nil)

	got := waitForTrainJob(t, tj, isTrue(trainer.TrainJobFailed))
	assert.Equal(t, int32(1), got.Status.Restarts)
	require.NotNil(t, got.Status.Failure)
	assert.Equal(t, int32(1), got.Status.Failure.Attempt, "the failure that ended it is of the last attempt")
	assert.Equal(t, "OOMKilled", got.Status.Failure.Reason)
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, "attempt 1), container node: OOMKilled")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		restarted := eventsOf(c, tj, trainer.TrainJobRestartedReason)
		if assert.Len(c, restarted, 1) {
			assert.Contains(c, restarted[0].Message, "this is attempt 1")
			assert.Contains(c, restarted[0].Message, "Attempt 0 failed first at pod restarts-node-0-0-")
			assert.Contains(c, restarted[0].Message, "OOMKilled, exit code 137 (signal 9)")
		}
		podFailed := eventsOf(c, tj, trainer.TrainJobPodFailedReason)
		if assert.NotEmpty(c, podFailed, "the failure of the attempt that was restarted is told as it happened") {
			assert.Contains(c, podFailed[0].Message, "attempt 0), container node: OOMKilled")
		}
	}, timeout, interval)
}

// TestARealProcessThatRunsOutOfMemorySaysSo runs, on the real node, a trainer that prints a few
// lines and then takes memory until the kernel kills it: the TrainJob's status says OOMKilled,
// exit code 137, and carries the last lines the trainer printed, which the kubelet kept.
func TestARealProcessThatRunsOutOfMemorySaysSo(t *testing.T) {
	ns := newNamespace(t)
	shippedRuntimeCopy(t, ns, "torch", "torch-distributed", failOnce)
	tj := onTheRealNode(utiltesting.MakeTrainJob("oom", ns).RuntimeRef(trainer.TrainingRuntimeKind, "torch"), "torch", 1)
	tj.Spec.Trainer.Command = []string{"sh", "-c", "for i in 1 2 3 4 5; do echo loading shard $i; done; echo step 42: loss 0.31; exec tail /dev/zero"}
	tj.Spec.Trainer.ResourcesPerNode.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}

	got, _ := runOnTheRealNode(t, tj, trainer.TrainJobFailed)
	f := got.Status.Failure
	require.NotNil(t, f, "status.failure of a Failed TrainJob")
	assert.Equal(t, "OOMKilled", f.Reason)
	assert.Equal(t, ptr.To[int32](137), f.ExitCode)
	assert.Equal(t, testenv.RealNodeName, f.Node)
	assert.Equal(t, "node", f.Container)
	assert.True(t, strings.HasSuffix(f.Message, "loading shard 5\nstep 42: loss 0.31"), "the last lines of the log: %q", f.Message)
	assert.Contains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, "OOMKilled, exit code 137 (signal 9), on node "+testenv.RealNodeName)
}

// failOnce makes a runtime's first job fail at its pod's first failure: no restart of its
// container or pod.
func failOnce(spec *trainer.TrainingRuntimeSpec) {
	job := &spec.Template.Spec.ReplicatedJobs[0].Template.Spec
	job.BackoffLimit = ptr.To[int32](0)
	job.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
}

// TestARestartKeepsOffTheNodeThatFailed runs a one-node TrainJob on a pool of three nodes whose
// kubelets evict its pod each time (a node's doing), under a JobSet that restarts twice: each
// attempt runs on a node no earlier attempt failed on, which status.avoidedNodes lists, and the
// trainer is told its attempt.
func TestARestartKeepsOffTheNodeThatFailed(t *testing.T) {
	ns := newNamespace(t)
	pool := ns
	for _, n := range []string{"a", "b", "c"} {
		addNode(t, pool+"-"+n, pool, "4")
	}
	failingRuntime(t, ns, "evicted", "Evicted", 2)
	tj := createTrainJob(t, ns, "evicted", "evicted", func(w *utiltesting.TrainJobWrapper) {
		w.PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}}})
	})

	got := waitForTrainJob(t, tj, isTrue(trainer.TrainJobFailed))
	assert.Equal(t, int32(2), got.Status.Restarts)
	require.NotNil(t, got.Status.Failure)
	assert.Equal(t, int32(2), got.Status.Failure.Attempt)

	// Each attempt's failure was told with its node (the last one's in the status): three
	// attempts, three nodes.
	nodes := map[string]string{"attempt 2": got.Status.Failure.Node}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, e := range eventsOf(c, tj, trainer.TrainJobPodFailedReason) {
			for _, a := range []string{"attempt 0", "attempt 1"} {
				if strings.Contains(e.Message, a+")") {
					_, node, _ := strings.Cut(e.Message, "on node ")
					node, _, _ = strings.Cut(node, " ")
					nodes[a] = strings.TrimSuffix(node, ";")
				}
			}
		}
		assert.Len(c, nodes, 3, "a PodFailed event for each restarted attempt: %v", nodes)
	}, timeout, interval)
	assert.ElementsMatch(t, []string{pool + "-a", pool + "-b", pool + "-c"}, []string{nodes["attempt 0"], nodes["attempt 1"], nodes["attempt 2"]},
		"each attempt ran on a node no earlier one failed on")
	assert.Equal(t, []string{nodes["attempt 0"], nodes["attempt 1"], nodes["attempt 2"]}, got.Status.AvoidedNodes)

	// The last attempt's Job preferred the nodes other than the first two; its pod knows its
	// attempt.
	jobs := jobsOf(t, tj)
	require.Len(t, jobs, 1)
	assert.Equal(t, []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{nodes["attempt 0"]}},
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{nodes["attempt 1"]}},
	}}}}, jobs[0].Spec.Template.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	ps := pods(t, tj)
	require.Len(t, ps, 1)
	assert.Equal(t, "2", ps[0].Labels["jobset.sigs.k8s.io/restart-attempt"])
	assert.Contains(t, ps[0].Spec.Containers[0].Env, corev1.EnvVar{Name: "KUBEFLOW_TRAINER_RESTART_ATTEMPT", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}}})
}

// TestATrainJobThatCouldNotStartSaysWhy gives a TrainJob on the real node an image that cannot be
// pulled and a deadline: when the deadline fails it, its status says why it never ran.
func TestATrainJobThatCouldNotStartSaysWhy(t *testing.T) {
	ns := newNamespace(t)
	shippedRuntimeCopy(t, ns, "torch", "torch-distributed", failOnce)
	tj := onTheRealNode(utiltesting.MakeTrainJob("nopull", ns).RuntimeRef(trainer.TrainingRuntimeKind, "torch"), "torch", 1)
	tj.Spec.Trainer.Image = ptr.To("localcluster.local/no-such-image:v1")
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](10)

	require.NoError(t, k8sClient.Create(context.Background(), tj))
	explainOnFailure(t, tj)
	got := utiltesting.WaitFor(t, k8sClient, realPolling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, isTrue(trainer.TrainJobFailed))
	failed := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
	assert.Equal(t, trainer.TrainJobDeadlineExceededReason, failed.Reason)
	f := got.Status.Failure
	require.NotNil(t, f, "status.failure")
	assert.Contains(t, []string{"ErrImagePull", "ImagePullBackOff"}, f.Reason)
	assert.Contains(t, f.Message, "no-such-image")
	assert.Nil(t, f.ExitCode, "it never ran")
	assert.Contains(t, failed.Message, "first failure: pod nopull-node-0-0-")
	assert.Contains(t, failed.Message, "container node: "+f.Reason)
}
