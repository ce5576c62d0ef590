package controller

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// jobOf creates a Job in the namespace, controlled by owner when it is set, labelled with the
// TrainJob's name and the avoid-nodes policy when given, as the build labels its JobSet's Jobs.
func jobOf(t *testing.T, ns, name string, owner *metav1.OwnerReference, labels ...string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	if owner != nil {
		job.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	for i := 0; i+1 < len(labels); i += 2 {
		job.Labels[labels[i]] = labels[i+1]
	}
	require.NoError(t, k8sClient.Create(context.Background(), job))
	return job
}

func failJobSet(t *testing.T, js *jobsetv1alpha2.JobSet) {
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{
		TerminalState: string(jobsetv1alpha2.JobSetFailed),
		Conditions: []metav1.Condition{{Type: string(jobsetv1alpha2.JobSetFailed), Status: metav1.ConditionTrue, Reason: "FailedJobs",
			Message: "jobset failed", LastTransitionTime: metav1.Now()}},
	})
}

// A pod of a neighbour's Job that bears the JobSet's UID label and fails first is not the
// TrainJob's failure: the reconcile's read of a Failed JobSet's pods counts the pods of the
// JobSet's own Jobs alone.
func TestAForeignPodLabelledWithTheJobSetUIDIsNotTheTrainJobsFailure(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("victim", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	neighbour := jobOf(t, ns, "neighbour", nil)
	failPod(t, neighbour, failure{name: "neighbour-pod", jobSet: js, node: "good-node", message: "FORGED: the learning rate is too high, lower it to 0"})
	failJobSet(t, js)

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs")
	})
	if f := got.Status.Failure; f != nil {
		assert.NotEqual(t, "neighbour-pod", f.Pod, "status.failure is a pod of a Job that is not the JobSet's: %+v", *f)
	}
	assert.NotContains(t, apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed).Message, "FORGED")
}

// A pod's reason longer than status.failure.reason allows (the kubelet's "OutOf" and an extended
// resource's name; anything a writer of pod status puts there) is cut to fit: the status write
// that fails the TrainJob is never refused for it.
func TestAPodReasonLongerThanTheStatusAllowsDoesNotKeepTheTrainJobFromFailing(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("long", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	job := jobOf(t, ns, "long-node-0", &metav1.OwnerReference{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: "JobSet",
		Name: js.Name, UID: js.UID, Controller: ptr.To(true)}, trainer.TrainJobNameLabel, tj.Name)
	reason := "OutOfaccelerators.example.com/" + strings.Repeat("a", 60) + "-" + strings.Repeat("b", 60)
	failPod(t, job, failure{name: "long-node-0-0", jobSet: js, node: "n1", podReason: reason, message: "the node has no such device left"})
	failJobSet(t, js)

	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs")
	})
}

// A termination message that is not UTF-8 (bytes a trainer printed, which FallbackToLogsOnError
// copies as they are) is still told: the status write (JSON) makes each invalid byte U+FFFD,
// within the field's length, and the event is written too.
func TestANonUTF8TerminationMessageIsStillTold(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("latin1", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "latin1-node-0", Namespace: ns, Labels: map[string]string{trainer.TrainJobNameLabel: tj.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: "JobSet",
				Name: js.Name, UID: js.UID, Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "node", Image: "busybox"}}}}},
	}
	require.NoError(t, k8sClient.Create(ctx, job))
	time.Sleep(time.Second) // the manager's Job informer has it, with no failed pod

	// 2 KiB of Latin-1 ("é" is 0xE9): not UTF-8; the manager reads pods as protobuf, which keeps
	// the bytes.
	failPod(t, job, failure{node: "n1", message: strings.Repeat("d\xe9j\xe0 vu, \xe9chec ", 150)})

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(job), job))
		job.Status.Failed = 1
		job.Status.StartTime = ptr.To(metav1.Now())
		require.NoError(c, k8sClient.Status().Update(ctx, job))
	}, timeout, interval)

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.NotNil(c, tj.Status.Failure, "status.failure")
	})
	t.Logf("status.failure.message: %d bytes, %d runes", len(got.Status.Failure.Message), utf8.RuneCountInString(got.Status.Failure.Message))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(t, got), "Warning/PodFailed")
	}, 10*time.Second, interval)
}

// When JobSet restarts a TrainJob's pods and the pod failure reports did not record the failure
// (a manager restarted or a leader changed meanwhile), the reconcile reads the previous attempt's
// pods and keeps the restart off the failed pod's node, under the policy its Jobs bear.
func TestARestartReadByTheReconcileKeepsOffTheFailedNode(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	spec := utiltesting.MakeRuntimeSpec().NumNodes(1).Obj()
	spec.Template.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{MaxRestarts: 3}
	spec.RecoveryPolicy = &trainer.RecoveryPolicy{AvoidNodes: trainer.AvoidNodesOnAllFailures}
	require.NoError(t, k8sClient.Create(ctx, utiltesting.ClusterTrainingRuntime(ns, spec)))
	tj := utiltesting.MakeTrainJob("restarts", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, ns).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	js := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	require.Equal(t, "AllFailures", js.Spec.ReplicatedJobs[0].Template.Labels[trainer.AvoidNodesLabel])

	// The JobSet's own Job of attempt 0, whose pod failed on bad-node.
	job := jobOf(t, ns, "restarts-node-0", &metav1.OwnerReference{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: "JobSet",
		Name: js.Name, UID: js.UID, Controller: ptr.To(true)}, trainer.TrainJobNameLabel, tj.Name, trainer.AvoidNodesLabel, "AllFailures")
	failPod(t, job, failure{name: "restarts-node-0-0", jobSet: js, node: "bad-node", message: "CUDA error: uncorrectable ECC error encountered"})
	setJobSetStatus(t, js, jobsetv1alpha2.JobSetStatus{Restarts: 1})

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, int32(1), tj.Status.Restarts)
	})
	require.NotNil(t, got.Status.Failure, "the reconcile read the failure of attempt 0")
	assert.Equal(t, "bad-node", got.Status.Failure.Node)
	assert.Equal(t, []string{"bad-node"}, got.Status.AvoidedNodes, "the restart must keep off the node (recoveryPolicy.avoidNodes: AllFailures)")
}
