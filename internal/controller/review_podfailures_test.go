package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// reviewFixture is a TrainJob, its JobSet, and a Job of that JobSet, in a fake API server.
type reviewFixture struct {
	tj  *trainer.TrainJob
	js  *jobsetv1alpha2.JobSet
	job failedJob
}

func newReviewFixture() reviewFixture {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "tj-uid", ResourceVersion: "1"}}
	isController := true
	js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "js-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: "tj", UID: "tj-uid", Controller: &isController}}}}
	return reviewFixture{tj: tj, js: js, job: failedJob{namespace: "ns", name: "tj-node-0", trainJob: "tj", uid: "job-uid",
		avoid: trainer.AvoidNodesOnAllFailures, jobSet: "js-uid"}}
}

// failedPod is a pod of the fixture's Job that failed at the time, on the node.
func (f reviewFixture) failedPod(name, node string, at time.Time) *corev1.Pod {
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

func (f reviewFixture) podFailures(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) (*podFailures, client.Client, *events.FakeRecorder) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	require.NoError(t, jobsetv1alpha2.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(append([]client.Object{f.tj, f.js}, objs...)...).
		WithStatusSubresource(&trainer.TrainJob{}).
		WithIndex(&corev1.Pod{}, "status.phase", func(o client.Object) []string { return []string{string(o.(*corev1.Pod).Status.Phase)} }).
		WithInterceptorFuncs(funcs).
		Build()
	recorder := events.NewFakeRecorder(100)
	p := &podFailures{apiReader: c, cache: c, writer: c, recorder: recorder, leading: func() bool { return true },
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[failedJob]()),
		reported: map[types.UID]map[types.UID]bool{}}
	return p, c, recorder
}

// TestReviewAFailedStatusWriteIsRetriedWithTheFailure (review finding): the pods are marked
// reported before status.failure / status.avoidedNodes are written, so when the write fails
// (a conflict streak, a timeout, the API server refusing it) the rate-limited retry finds no
// fresh pod and returns nil: the failure, and the node the next attempt must keep off, are lost
// for good.
func TestReviewAFailedStatusWriteIsRetriedWithTheFailure(t *testing.T) {
	f := newReviewFixture()
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

// TestReviewAfterAManagerRestartTheNewFailureIsTheOneTold (review finding): a new manager (or a
// new leader) starts with an empty reported set; the next time a Job's failed count moves, every
// failed pod of the Job is fresh, and the earliest, which the previous manager told already, is
// told again as the new failure: the PodFailed event names the old pod, not the one that just
// failed.
func TestReviewAfterAManagerRestartTheNewFailureIsTheOneTold(t *testing.T) {
	f := newReviewFixture()
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

// TestReviewAJobDeletedWhileItsPodsAreReadIsNotRememberedForever (review finding): JobSet
// deletes a failed attempt's Jobs moments after they fail, while their pods are being read. When
// the informer's delete comes before read takes the lock, read adds the deleted Job's entry to
// p.reported after DeleteFunc removed it, and nothing removes it again: one leaked entry (with
// its pods' UIDs) per such restart, for the life of the manager.
func TestReviewAJobDeletedWhileItsPodsAreReadIsNotRememberedForever(t *testing.T) {
	f := newReviewFixture()
	p, _, _ := f.podFailures(t, interceptor.Funcs{}, f.failedPod("tj-node-0-0", "n1", time.Now()))
	// The Job's delete event arrived (DeleteFunc: delete(p.reported, job.uid)) before read locked.
	p.mu.Lock()
	delete(p.reported, f.job.uid)
	p.mu.Unlock()
	require.NoError(t, p.read(context.Background(), f.job))
	assert.NotContains(t, p.reported, f.job.uid, "a Job that is gone, remembered until the manager stops")
}

var _ = errors.New
var _ = strings.Contains

// TestReviewAJobOfManyFailingPodsIsReadInLinearCost (review finding, cost): each move of a Job's
// failed count lists all of the Job's failed pods, whole (their specs, env and termination
// messages of up to 4 KiB a container), past the cache, to report the few new ones. A Job of
// 1,000 pods (numNodes 1,000, or backoffLimit/backoffLimitPerIndex that let pods fail on) whose
// pods fail ten at a time, as the Job controller counts them, costs 100 lists of 505 pods on
// average: 50,500 pods read to report 1,000.
func TestReviewAJobOfManyFailingPodsIsReadInLinearCost(t *testing.T) {
	const pods, step = 1000, 10
	f := newReviewFixture()
	var objs []client.Object
	at := time.Now().Add(-time.Hour)
	for i := range pods {
		pod := f.failedPod(fmt.Sprintf("tj-node-0-%d", i), "n1", at.Add(time.Duration(i)*time.Second))
		pod.Status.Phase = corev1.PodRunning // fails below, step by step
		objs = append(objs, pod)
	}
	listed := 0
	p, c, _ := f.podFailures(t, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if l, ok := list.(*corev1.PodList); ok {
				listed += len(l.Items)
			}
			return err
		},
	}, objs...)
	ctx := context.Background()
	for failed := 0; failed < pods; failed += step {
		for i := failed; i < failed+step; i++ {
			pod := objs[i].(*corev1.Pod)
			pod.Status.Phase = corev1.PodFailed
			require.NoError(t, c.Status().Update(ctx, pod))
		}
		require.NoError(t, p.read(ctx, f.job)) // the Job's failed count moved by step
	}
	t.Logf("%d pods listed to report %d failures", listed, pods)
	assert.LessOrEqual(t, listed, 2*pods, "pods read past the cache grow with the square of the Job's failures")
}

// TestReviewOneAttemptAvoidsOneNode (review finding): status.avoidedNodes is documented as "the
// nodes of the first failed pods of its earlier attempts", but each failure that supersedes the
// recorded one within the same attempt adds its node as well. The Job controller counts failed
// pods as it sees them, not in the order they failed: rank 1 on node-b, which failed only
// because rank 0 on node-a (the faulty GPU) broke the collective, is counted first and avoided;
// then rank 0 is counted, its earlier failure supersedes, and node-a is avoided too. An innocent
// node is kept off for the TrainJob's life, and a pool runs out of nodes twice as fast.
func TestReviewOneAttemptAvoidsOneNode(t *testing.T) {
	f := newReviewFixture()
	failedAt := time.Now().Add(-time.Minute)
	rank0 := f.failedPod("tj-node-0-0", "node-a", failedAt)
	rank1 := f.failedPod("tj-node-0-1", "node-b", failedAt.Add(500*time.Millisecond))
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
