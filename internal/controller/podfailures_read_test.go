package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// failureFixture is a TrainJob, its JobSet, and a Job of that JobSet, in a fake API server.
type failureFixture struct {
	tj  *trainer.TrainJob
	js  *jobsetv1alpha2.JobSet
	job failedJob
}

func newFailureFixture() failureFixture {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "tj-uid", ResourceVersion: "1"}}
	isController := true
	js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "js-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: "tj", UID: "tj-uid", Controller: &isController}}}}
	return failureFixture{tj: tj, js: js, job: failedJob{namespace: "ns", name: "tj-node-0", trainJob: "tj", uid: "job-uid",
		avoid: trainer.AvoidNodesOnAllFailures, jobSet: "js-uid"}}
}

// jobObject is the fixture's Job, as the cache keeps it.
func (f failureFixture) jobObject() *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: f.job.name, Namespace: "ns", UID: f.job.uid,
		Labels:          map[string]string{trainer.TrainJobNameLabel: "tj", trainer.AvoidNodesLabel: string(f.job.avoid)},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(f.js, jobsetv1alpha2.SchemeGroupVersion.WithKind("JobSet"))}}}
}

// failedPod is a pod of the fixture's Job that failed at the time, on the node.
func (f failureFixture) failedPod(name, node string, at time.Time) *corev1.Pod {
	isController := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid"),
			Labels:          map[string]string{jobControllerUIDLabel: string(f.job.uid), "jobset.sigs.k8s.io/restart-attempt": "0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: f.job.name, UID: f.job.uid, Controller: &isController}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "node"}}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "node",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: metav1.NewTime(at)}}}}},
	}
}

func (f failureFixture) podFailures(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) (*podFailures, client.Client, *events.FakeRecorder) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	require.NoError(t, jobsetv1alpha2.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(append([]client.Object{f.tj, f.js, f.jobObject()}, objs...)...).
		WithStatusSubresource(&trainer.TrainJob{}).
		WithIndex(&corev1.Pod{}, "status.phase", func(o client.Object) []string { return []string{string(o.(*corev1.Pod).Status.Phase)} }).
		WithInterceptorFuncs(funcs).
		Build()
	recorder := events.NewFakeRecorder(100)
	p := &podFailures{apiReader: c, cache: c, writer: c, recorder: recorder, leading: func() bool { return true },
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[failedJob]()),
		now:   time.Now, jobs: map[types.UID]*jobReads{}, started: time.Now().Add(-10 * time.Minute)}
	return p, c, recorder
}

// TestAFailedStatusWriteIsRetriedWithTheFailure: the pods are marked
// reported before status.failure / status.avoidedNodes are written, so when the write fails
// (a conflict streak, a timeout, the API server refusing it) the rate-limited retry finds no
// fresh pod and returns nil: the failure, and the node the next attempt must keep off, are lost
// for good.
func TestAFailedStatusWriteIsRetriedWithTheFailure(t *testing.T) {
	f := newFailureFixture()
	failWrites := 1
	p, c, _ := f.podFailures(t, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if failWrites > 0 {
				failWrites--
				return apierrors.NewServiceUnavailable("etcd leader changed")
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}, f.failedPod("tj-node-0-0", "bad-node", time.Now()))

	ctx := context.Background()
	require.Error(t, p.read(ctx, f.job), "the first write fails: Start requeues the Job, rate limited")
	require.NoError(t, p.read(ctx, f.job), "the retry")

	got := &trainer.TrainJob{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(f.tj), got))
	if assert.NotNil(t, got.Status.Failure, "status.failure after the retry") {
		assert.Equal(t, "tj-node-0-0", got.Status.Failure.Pod)
	}
	assert.Equal(t, []string{"bad-node"}, got.Status.AvoidedNodes, "the restart must keep off the failed pod's node")
}

// TestAfterAManagerRestartTheNewFailureIsTheOneTold: a new manager (or a
// new leader) starts with an empty reported set; the next time a Job's failed count moves, every
// failed pod of the Job is fresh, and the earliest, which the previous manager told already, is
// told again as the new failure: the PodFailed event names the old pod, not the one that just
// failed.
func TestAfterAManagerRestartTheNewFailureIsTheOneTold(t *testing.T) {
	f := newFailureFixture()
	old := time.Now().Add(-time.Hour)
	p, _, recorder := f.podFailures(t, interceptor.Funcs{},
		f.failedPod("tj-node-0-old", "n1", old), // told by the manager before the restart
		f.failedPod("tj-node-0-new", "n2", time.Now()))

	require.NoError(t, p.read(context.Background(), f.job))
	select {
	case e := <-recorder.Events:
		assert.Contains(t, e, "tj-node-0-new", "the event of the failure that just happened")
		assert.NotContains(t, e, "tj-node-0-old", "a failure told an hour ago, told again as new")
	default:
		t.Fatal("no event")
	}
}

// TestAJobDeletedWhileItsPodsAreReadIsNotRememberedForever: JobSet
// deletes a failed attempt's Jobs moments after they fail, while their pods are being read. When
// the informer's delete comes before read takes the lock, read adds the deleted Job's entry to
// p.reported after DeleteFunc removed it, and nothing removes it again: one leaked entry (with
// its pods' UIDs) per such restart, for the life of the manager.
func TestAJobDeletedWhileItsPodsAreReadIsNotRememberedForever(t *testing.T) {
	f := newFailureFixture()
	p, c, _ := f.podFailures(t, interceptor.Funcs{}, f.failedPod("tj-node-0-0", "n1", time.Now()))
	// The Job is deleted, and its delete event arrived (DeleteFunc forgets it) before read locked.
	require.NoError(t, c.Delete(context.Background(), f.jobObject()))
	p.forget(f.job.uid)
	require.NoError(t, p.read(context.Background(), f.job))
	assert.NotContains(t, p.jobs, f.job.uid, "a Job that is gone, remembered until the manager stops")
}

// A Job whose pods fail one after another, as a collective breaks, is read at most once per
// readEvery: each read lists all of its failed pods.
func TestAJobIsReadAtMostOncePerInterval(t *testing.T) {
	f := newFailureFixture()
	p, _, _ := f.podFailures(t, interceptor.Funcs{}, f.failedPod("tj-node-0-0", "n1", time.Now()))
	now := time.Now()
	p.now = func() time.Time { return now }
	job := f.jobObject()

	p.add(job)
	assert.Equal(t, 1, p.queue.Len(), "a Job not read yet is read at once")
	got, _ := p.queue.Get()
	require.NoError(t, p.read(context.Background(), got))
	p.queue.Done(got)
	for range 100 {
		p.add(job) // its failed count moves again and again
	}
	assert.Zero(t, p.queue.Len(), "a Job read a moment ago is read again only after readEvery")
	now = now.Add(readEvery)
	p.add(job)
	assert.Equal(t, 1, p.queue.Len(), "once readEvery passed, at once")
}

// TestOneAttemptAvoidsOneNode: status.avoidedNodes is documented as "the
// nodes of the first failed pods of its earlier attempts", but each failure that supersedes the
// recorded one within the same attempt adds its node as well. The Job controller counts failed
// pods as it sees them, not in the order they failed: rank 1 on node-b, which failed only
// because rank 0 on node-a (the faulty GPU) broke the collective, is counted first and avoided;
// then rank 0 is counted, its earlier failure supersedes, and node-a is avoided too. An innocent
// node is kept off for the TrainJob's life, and a pool runs out of nodes twice as fast.
func TestOneAttemptAvoidsOneNode(t *testing.T) {
	f := newFailureFixture()
	failedAt := time.Now().Add(-time.Minute)
	rank0 := f.failedPod("tj-node-0-0", "node-a", failedAt)
	rank1 := f.failedPod("tj-node-0-1", "node-b", failedAt.Add(2*time.Second))
	rank0.Status.Phase = corev1.PodRunning // not counted yet
	p, c, _ := f.podFailures(t, interceptor.Funcs{}, rank0, rank1)
	ctx := context.Background()

	require.NoError(t, p.read(ctx, f.job)) // the Job counted rank 1
	rank0.Status.Phase = corev1.PodFailed
	require.NoError(t, c.Status().Update(ctx, rank0))
	require.NoError(t, p.read(ctx, f.job)) // then rank 0

	got := &trainer.TrainJob{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(f.tj), got))
	assert.Equal(t, "tj-node-0-0", got.Status.Failure.Pod, "the first failure of the attempt")
	assert.Equal(t, []string{"node-a"}, got.Status.AvoidedNodes, "attempt 0's first failed pod's node, and only it")
}
