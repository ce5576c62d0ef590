package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/podfailure"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// jobControllerUIDLabel is the label the Job controller puts on a Job's pods: the Job's UID.
const jobControllerUIDLabel = "batch.kubernetes.io/controller-uid"

// podFailureWorkers is how many Jobs' failed pods are read at once.
const podFailureWorkers = 4

// podFailures reports the pods of TrainJobs that fail while their TrainJob runs: a Warning event
// PodFailed on the TrainJob, a count in trainjob_pod_failures_total, and status.failure when the
// failure is the first of a newer attempt. The operator does not watch pods (there are many, and
// they change often): when a Job's count of failed pods moves, its failed pods are listed past
// the cache, at most once per readEvery for a Job, and those not reported yet are. A pod that
// JobSet's restart deleted before it could be read is not reported. Only the leader reads and
// reports.
type podFailures struct {
	apiReader  client.Reader
	cache      client.Reader
	writer     client.Client
	recorder   events.EventRecorder
	frameworks []framework.Framework
	leading    func() bool
	queue      workqueue.TypedRateLimitingInterface[failedJob]
	now        func() time.Time

	mu sync.Mutex
	// jobs holds what was read of each Job, until the Job is deleted.
	jobs map[types.UID]*jobReads
	// started is when this manager began to read: failures before it were told by another.
	started time.Time
}

// jobReads is what was read of a Job's failed pods.
type jobReads struct {
	// reported are the UIDs of its failed pods already told.
	reported map[types.UID]bool
	// last is when its pods were last listed.
	last time.Time
	// unwritten is a failure told whose status write failed: written with the next read.
	unwritten *trainer.PodFailure
}

// readEvery is how often a Job's failed pods are listed at most: the pods of a Job that fail
// one after another, as a collective breaks, are read a few times, not once per pod.
const readEvery = time.Second

// failedJob is a Job whose count of failed pods moved.
type failedJob struct {
	namespace, name, trainJob string
	uid                       types.UID
	// avoid is the Job's trainer.AvoidNodesLabel: which failures' nodes its restarts keep off.
	avoid trainer.AvoidNodesPolicy
	// jobSet is the UID of the Job's controller, if it is a JobSet.
	jobSet types.UID
}

func newPodFailures(jobs cache.Informer, apiReader, cached client.Reader, writer client.Client, recorder events.EventRecorder,
	frameworks []framework.Framework, leading func() bool) (*podFailures, error) {
	p := &podFailures{
		apiReader: apiReader, cache: cached, writer: writer, recorder: recorder, frameworks: frameworks, leading: leading,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[failedJob](),
			workqueue.TypedRateLimitingQueueConfig[failedJob]{Name: "pod-failures"}),
		now:  time.Now,
		jobs: map[types.UID]*jobReads{},
	}
	_, err := jobs.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		// A Job first seen with failed pods is one the operator did not see fail: a starting
		// manager's listing, whose failures are past, or a Job the watch missed for a while.
		AddFunc: func(obj any, listed bool) {
			if job, ok := obj.(*batchv1.Job); ok && !listed && job.Status.Failed > 0 {
				p.add(job)
			}
		},
		UpdateFunc: func(old, obj any) {
			was, ok1 := old.(*batchv1.Job)
			job, ok2 := obj.(*batchv1.Job)
			if ok1 && ok2 && job.Status.Failed > was.Status.Failed {
				p.add(job)
			}
		},
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if job, ok := obj.(*batchv1.Job); ok {
				p.forget(job.UID)
			}
		},
	})
	return p, err
}

func (p *podFailures) forget(job types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.jobs, job)
}

// jobSetOf is the UID of the JobSet that controls the object, if one does.
func jobSetOf(obj metav1.Object) types.UID {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "JobSet" && strings.HasPrefix(ref.APIVersion, jobsetv1alpha2.GroupVersion.Group+"/") {
		return ref.UID
	}
	return ""
}

// add queues a Job to read, at once unless it was read less than readEvery ago.
func (p *podFailures) add(job *batchv1.Job) {
	name := job.Labels[trainer.TrainJobNameLabel]
	if name == "" || !p.leading() {
		return
	}
	j := failedJob{namespace: job.Namespace, name: job.Name, trainJob: name, uid: job.UID,
		avoid: trainer.AvoidNodesPolicy(job.Labels[trainer.AvoidNodesLabel]), jobSet: jobSetOf(job)}
	p.mu.Lock()
	var wait time.Duration
	if r := p.jobs[job.UID]; r != nil {
		wait = readEvery - p.now().Sub(r.last)
	}
	p.mu.Unlock()
	if wait > 0 {
		p.queue.AddAfter(j, wait)
	} else {
		p.queue.Add(j)
	}
}

// Start reads the queued Jobs' failed pods until ctx ends.
func (p *podFailures) Start(ctx context.Context) error {
	p.mu.Lock()
	p.started = p.now()
	p.mu.Unlock()
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range podFailureWorkers {
		wg.Go(func() {
			for {
				job, shutdown := p.queue.Get()
				if shutdown {
					return
				}
				if err := p.read(ctx, job); err != nil {
					ctrl.LoggerFrom(ctx).Error(err, "Reading the failed pods of a Job", "job", klog.KRef(job.namespace, job.name))
					p.queue.AddRateLimited(job)
				} else {
					p.queue.Forget(job)
				}
				p.queue.Done(job)
			}
		})
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection is true: only the leader reports.
func (p *podFailures) NeedLeaderElection() bool { return true }

// read lists the Job's failed pods, tells those not told yet, and records the first of them in
// the TrainJob's status.
func (p *podFailures) read(ctx context.Context, job failedJob) error {
	tj := &trainer.TrainJob{}
	if err := p.cache.Get(ctx, types.NamespacedName{Namespace: job.namespace, Name: job.trainJob}, tj); err != nil {
		return client.IgnoreNotFound(err)
	}
	// Only the Jobs of the TrainJob's own JobSet speak for it: not a Job someone labelled with
	// its name, nor one of a TrainJob of the same name, deleted since.
	js := &jobsetv1alpha2.JobSet{}
	if err := p.cache.Get(ctx, client.ObjectKeyFromObject(tj), js); err != nil || js.UID != job.jobSet || !metav1.IsControlledBy(js, tj) {
		return client.IgnoreNotFound(err)
	}
	pods := &corev1.PodList{}
	if err := p.apiReader.List(ctx, pods, client.InNamespace(job.namespace),
		client.MatchingLabels{jobControllerUIDLabel: string(job.uid)},
		client.MatchingFields{"status.phase": string(corev1.PodFailed)}); err != nil {
		return fmt.Errorf("listing the failed pods of Job %s: %w", job.name, err)
	}
	// A Job deleted while its pods were read is forgotten once read: its deletion may have come
	// first.
	defer func() {
		if err := p.cache.Get(ctx, types.NamespacedName{Namespace: job.namespace, Name: job.name}, &batchv1.Job{}); apierrors.IsNotFound(err) {
			p.forget(job.uid)
		}
	}()
	failure, told, others, unwritten := p.fresh(job, pods.Items)
	// A finished TrainJob's pods that fail are its winding down (JobSet stops the Jobs left);
	// the failure that ended it is in its Failed condition and its event.
	if told != nil && !tj.Finished() {
		p.recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainer.TrainJobPodFailedReason, "Read", "%s", failureNote(told, others))
		podFailuresTotal.WithLabelValues(frameworkName(ctx, p.cache, p.frameworks, tj), podfailure.MetricReason(told.Reason)).Inc()
	}
	if unwritten != nil && (failure == nil || podfailure.Supersedes(unwritten, failure)) {
		failure = unwritten
	}
	if failure == nil {
		return nil
	}
	// The status is read and written past the cache, so that a node the next attempt must keep
	// off is never lost to a stale read, and is there before JobSet makes that attempt's Jobs.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := p.apiReader.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			return err
		}
		if tj.Finished() || !recordFailure(&tj.Status, failure, job.avoid) {
			return nil
		}
		return p.writer.Status().Update(ctx, tj, client.FieldOwner(trainer.TrainJobControllerName))
	})
	if err = client.IgnoreNotFound(err); err != nil {
		p.setUnwritten(job.uid, failure)
	}
	return err
}

// fresh marks the Job's failed pods read, and returns, of those not read yet, the first and how
// many more failed with it, the first of those that failed since this manager began to read (to
// be told: the others were told by the manager before it), and a failure told whose status write
// failed.
func (p *podFailures) fresh(job failedJob, pods []corev1.Pod) (first, told *trainer.PodFailure, others int, unwritten *trainer.PodFailure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.jobs[job.uid]
	if r == nil {
		r = &jobReads{reported: map[types.UID]bool{}}
		p.jobs[job.uid] = r
	}
	now := p.now()
	r.last, unwritten, r.unwritten = now, r.unwritten, nil
	var fresh, since []corev1.Pod
	for _, pod := range pods {
		if ref := metav1.GetControllerOf(&pod); ref == nil || ref.UID != job.uid || r.reported[pod.UID] {
			continue
		}
		r.reported[pod.UID] = true
		fresh = append(fresh, pod)
		if f := podfailure.Read(&pod, now); f != nil && !f.Time.Time.Before(p.started) {
			since = append(since, pod)
		}
	}
	first, _ = podfailure.First(fresh, now)
	told, others = podfailure.First(since, now)
	return first, told, others, unwritten
}

// setUnwritten keeps a failure whose status write failed for the Job's next read, unless the
// Job is gone.
func (p *podFailures) setUnwritten(job types.UID, f *trainer.PodFailure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.jobs[job]; r != nil {
		r.unwritten = f
	}
}

// recordFailure makes f the status's failure when it supersedes the one recorded, and keeps the
// TrainJob's restarts off its node as the policy says: one node per attempt, the node of the
// attempt's first failure, which replaces the node of a failure of the same attempt read before
// it. It tells whether the status changed.
func recordFailure(status *trainer.TrainJobStatus, f *trainer.PodFailure, policy trainer.AvoidNodesPolicy) bool {
	was := status.Failure
	if !podfailure.Supersedes(f, was) {
		return false
	}
	nodes := status.AvoidedNodes
	if was != nil && was.Attempt == f.Attempt && len(nodes) > 0 && nodes[len(nodes)-1] == was.Node && avoids(was, policy) {
		nodes = nodes[:len(nodes)-1]
	}
	status.Failure = f
	status.AvoidedNodes = avoidNode(nodes, f, policy)
	return true
}

// maxAvoidedNodes is how many nodes a TrainJob keeps off at most: the latest.
const maxAvoidedNodes = 16

// avoidNode adds the node of a failure to the nodes a TrainJob's restarts keep off, when the
// policy says so: the latest last, at most maxAvoidedNodes.
func avoidNode(nodes []string, f *trainer.PodFailure, policy trainer.AvoidNodesPolicy) []string {
	if !avoids(f, policy) {
		return nodes
	}
	nodes = append(slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == f.Node }), f.Node)
	return nodes[max(len(nodes)-maxAvoidedNodes, 0):]
}

// avoids tells whether the policy keeps restarts off the node of the failure: any failure's under
// AllFailures, a failure the node caused under NodeFailures.
func avoids(f *trainer.PodFailure, policy trainer.AvoidNodesPolicy) bool {
	switch policy {
	case trainer.AvoidNodesOnAllFailures:
		return f.Node != ""
	case trainer.AvoidNodesOnNodeFailures:
		return f.Node != "" && f.NodeCaused
	}
	return false
}

// failureNote words a failure, and how many more pods failed with it, for an event.
func failureNote(failure *trainer.PodFailure, others int) string {
	more := ""
	if others > 0 {
		more = fmt.Sprintf("\n(%d more pods of the attempt failed with it)", others)
	}
	return podfailure.SummaryWithin(failure, maxEventNote-len(more)) + more
}

// readFailure records in status.failure how the first failed pod of an attempt of the TrainJob's
// JobSet failed (or, when none did, why one cannot start), reading the attempt's pods once,
// unless a failure of that attempt or a later one is recorded; and keeps the TrainJob's restarts
// off its node as the Jobs' policy says. Only the pods of the JobSet's own Jobs count. A pod
// gone already is not read; a failed read is logged and the status goes on without it.
func (r *TrainJobReconciler) readFailure(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, attempt int32) {
	if f := tj.Status.Failure; f != nil && f.Attempt >= attempt {
		return
	}
	jobs := &batchv1.JobList{}
	pods := &corev1.PodList{}
	err := r.client.List(ctx, jobs, client.InNamespace(js.Namespace), client.MatchingLabels{trainer.TrainJobNameLabel: tj.Name})
	if err == nil {
		err = r.apiReader.List(ctx, pods, client.InNamespace(js.Namespace), client.MatchingLabels{
			jobsetv1alpha2.JobSetUIDKey:    string(js.UID),
			podfailure.RestartAttemptLabel: strconv.Itoa(int(attempt)),
		})
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Reading why the TrainJob's pods failed", "jobSet", klog.KObj(js))
		return
	}
	own := map[types.UID]bool{}
	var policy trainer.AvoidNodesPolicy
	for _, job := range jobs.Items {
		if jobSetOf(&job) == js.UID {
			own[job.UID] = true
			policy = trainer.AvoidNodesPolicy(job.Labels[trainer.AvoidNodesLabel])
		}
	}
	pods.Items = slices.DeleteFunc(pods.Items, func(pod corev1.Pod) bool {
		ref := metav1.GetControllerOf(&pod)
		return ref == nil || !own[ref.UID]
	})
	if first, _ := podfailure.First(pods.Items, time.Now()); first != nil {
		recordFailure(&tj.Status, first, policy)
	}
}

// withFailure adds to a condition's message the TrainJob's recorded failure, when it is of the
// attempt the message is about.
func withFailure(message string, tj *trainer.TrainJob, attempt int32) string {
	if f := tj.Status.Failure; f != nil && f.Attempt == attempt {
		return message + "; first failure: " + podfailure.Summary(f)
	}
	return message
}
