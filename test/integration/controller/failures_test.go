package controller

import (
	"cmp"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// failure is how a test's pod fails.
type failure struct {
	// name is the pod's name; empty, the Job's name and the rank.
	name string
	rank int
	// jobSet, when set, labels the pod with the JobSet's UID, as JobSet's pods are.
	jobSet *jobsetv1alpha2.JobSet
	node   string
	// exitCode is the container's; 0 means 1.
	exitCode int32
	// reason is the container's; podReason the pod's (an eviction's, say).
	reason, podReason string
	message           string
	// finished is when the container ended; zero means now.
	finished time.Time
}

// failPod makes a pod of the Job, as the Job controller would (attempt 0), and fails it as a
// kubelet would: its container "node" ended as f says.
func failPod(t *testing.T, job *batchv1.Job, f failure) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: cmp.Or(f.name, job.Name+"-"+strconv.Itoa(f.rank)), Namespace: job.Namespace,
			Labels: map[string]string{
				"batch.kubernetes.io/controller-uid":    string(job.UID),
				"jobset.sigs.k8s.io/replicatedjob-name": "node",
				"jobset.sigs.k8s.io/restart-attempt":    "0",
			},
			Annotations:     map[string]string{"batch.kubernetes.io/job-completion-index": strconv.Itoa(f.rank)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: corev1.PodSpec{
			NodeName:                     f.node,
			AutomountServiceAccountToken: ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			Containers:                   []corev1.Container{{Name: "node", Image: "trainer"}},
		},
	}
	if f.jobSet != nil {
		pod.Labels[jobsetv1alpha2.JobSetUIDKey] = string(f.jobSet.UID)
	}
	require.NoError(t, k8sClient.Create(ctx, pod))
	finished := f.finished
	if finished.IsZero() {
		finished = time.Now()
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: f.podReason, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "node", Image: "trainer", ImageID: "trainer",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: cmp.Or(f.exitCode, 1), Reason: cmp.Or(f.reason, "Error"), Message: f.message, FinishedAt: metav1.NewTime(finished),
		}},
	}}}
	require.NoError(t, k8sClient.Status().Update(ctx, pod))
}

// setFailed writes a Job's count of failed pods, as the Job controller would.
func setFailed(t *testing.T, job *batchv1.Job, failed int32) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), job))
		job.Status.Failed = failed
		require.NoError(c, k8sClient.Status().Update(context.Background(), job))
	}, timeout, interval)
}

// When a Job of the TrainJob's JobSet counts failed pods, the operator reads them: the first to
// fail is in status.failure and in a PodFailed event, with its rank, container, exit code,
// signal, node and last words. A Job that is not of its JobSet, though it bears its name, is not
// heard.
func TestAFailedPodIsTold(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	require.NoError(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}))
	tj := utiltesting.MakeTrainJob("told", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	// Someone else's Job, with the TrainJob's name on it and a failed pod, first.
	foreign := createJob(t, js, "told-foreign")
	failPod(t, foreign, failure{node: "node-x", message: "not the TrainJob's", finished: time.Now().Add(-time.Hour)})
	setFailed(t, foreign, 1)
	assertNever(t, func() bool {
		got := &trainer.TrainJob{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
		return got.Status.Failure != nil || len(podFailedEvents(t, tj)) > 0
	}, "a Job that is not of the TrainJob's JobSet spoke for it")

	job := createJob(t, js, "told-node-0")
	job.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(js, jobsetv1alpha2.SchemeGroupVersion.WithKind("JobSet"))}
	require.NoError(t, k8sClient.Update(ctx, job))
	// Rank 1 failed first; rank 0, whose peer went away, a minute later.
	now := time.Now().Truncate(time.Second).Add(time.Second)
	failPod(t, job, failure{rank: 1, node: "gpu-7", exitCode: 137, reason: "OOMKilled", message: "step 41\nstep 42", finished: now})
	failPod(t, job, failure{rank: 0, node: "gpu-3", message: "a peer went away", finished: now.Add(time.Minute)})
	setFailed(t, job, 2)

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.NotNil(c, tj.Status.Failure, "status.failure")
	})
	assert.Equal(t, &trainer.PodFailure{
		Pod: "told-node-0-1", ReplicatedJob: "node", Rank: ptr.To[int32](1), Container: "node",
		ExitCode: ptr.To[int32](137), Signal: ptr.To[int32](9), Reason: "OOMKilled", Message: "step 41\nstep 42",
		Node: "gpu-7", Time: metav1.NewTime(now),
	}, got.Status.Failure)
	assert.Empty(t, got.Status.AvoidedNodes, "a JobSet that does not restart keeps off no node")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := podFailedEvents(c, tj)
		if assert.Len(c, events, 1, "one event for the pods the Job counted at once") {
			assert.Equal(c, "pod told-node-0-1 (replicated job node, rank 1, attempt 0), container node: OOMKilled, exit code 137 (signal 9), on node gpu-7; message:\nstep 41\nstep 42\n(1 more pods of the attempt failed with it)",
				events[0].Message)
		}
	}, timeout, interval)
}

func podFailedEvents(t require.TestingT, tj *trainer.TrainJob) []corev1.Event {
	list := &corev1.EventList{}
	require.NoError(t, k8sClient.List(context.Background(), list, client.InNamespace(tj.Namespace)))
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Name == tj.Name && e.Reason == trainer.TrainJobPodFailedReason {
			out = append(out, e)
		}
	}
	return out
}
