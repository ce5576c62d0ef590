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
// they change often): when a Job's count of failed pods moves, its failed pods are listed once,
// past the cache, and those not reported yet are. A pod that JobSet's restart deleted before it
// could be read is not reported. Only the leader reads and reports.
type podFailures struct {
	apiReader  client.Reader
	cache      client.Reader
	writer     client.Client
	recorder   events.EventRecorder
	frameworks []framework.Framework
	leading    func() bool
	queue      workqueue.TypedRateLimitingInterface[failedJob]

	mu sync.Mutex
	// reported holds, per Job, the UIDs of its pods already reported, until the Job is deleted.
	reported map[types.UID]map[types.UID]bool
}

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
		reported: map[types.UID]map[types.UID]bool{},
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
				p.mu.Lock()
				delete(p.reported, job.UID)
				p.mu.Unlock()
			}
		},
	})
	return p, err
}

// jobSetOf is the UID of the JobSet that controls the object, if one does.
func jobSetOf(obj metav1.Object) types.UID {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "JobSet" && strings.HasPrefix(ref.APIVersion, jobsetv1alpha2.GroupVersion.Group+"/") {
		return ref.UID
	}
	return ""
}

func (p *podFailures) add(job *batchv1.Job) {
	if name := job.Labels[trainer.TrainJobNameLabel]; name != "" && p.leading() {
		p.queue.Add(failedJob{namespace: job.Namespace, name: job.Name, trainJob: name, uid: job.UID,
			avoid: trainer.AvoidNodesPolicy(job.Labels[trainer.AvoidNodesLabel]), jobSet: jobSetOf(job)})
	}
}

// Start reads the queued Jobs' failed pods until ctx ends.
func (p *podFailures) Start(ctx context.Context) error {
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

// read lists the Job's failed pods and reports those not reported yet.
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
	p.mu.Lock()
	reported := p.reported[job.uid]
	if reported == nil {
		reported = map[types.UID]bool{}
		p.reported[job.uid] = reported
	}
	fresh := pods.Items[:0]
	for _, pod := range pods.Items {
		if ref := metav1.GetControllerOf(&pod); ref != nil && ref.UID == job.uid && !reported[pod.UID] {
			reported[pod.UID] = true
			fresh = append(fresh, pod)
		}
	}
	p.mu.Unlock()

	// A finished TrainJob's pods that fail are its winding down (JobSet stops the Jobs left);
	// the failure that ended it is in its Failed condition and its event.
	failure, others := podfailure.First(fresh, time.Now())
	if failure == nil || finished(tj) {
		return nil
	}
	p.recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainer.TrainJobPodFailedReason, "Read", "%s", failureNote(failure, others))
	podFailuresTotal.WithLabelValues(frameworkName(ctx, p.cache, p.frameworks, tj), podfailure.MetricReason(failure.Reason)).Inc()
	// The status is read and written past the cache, so that a node the next attempt must keep
	// off is never lost to a stale read, and is there before JobSet makes that attempt's Jobs.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := p.apiReader.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			return err
		}
		if finished(tj) || !podfailure.Supersedes(failure, tj.Status.Failure) {
			return nil
		}
		tj.Status.Failure = failure
		tj.Status.AvoidedNodes = avoidNode(tj.Status.AvoidedNodes, failure, job.avoid)
		return p.writer.Status().Update(ctx, tj, client.FieldOwner(trainer.TrainJobControllerName))
	})
	return client.IgnoreNotFound(err)
}

// maxAvoidedNodes is how many nodes a TrainJob keeps off at most: the latest.
const maxAvoidedNodes = 16

// avoidNode adds the node of a failure to the nodes a TrainJob's restarts keep off, when the
// policy says the failure is the node's: the latest last, at most maxAvoidedNodes.
func avoidNode(nodes []string, f *trainer.PodFailure, policy trainer.AvoidNodesPolicy) []string {
	switch {
	case f.Node == "",
		policy == trainer.AvoidNodesOnNodeFailures && !f.NodeCaused,
		policy != trainer.AvoidNodesOnNodeFailures && policy != trainer.AvoidNodesOnAllFailures:
		return nodes
	}
	nodes = append(slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == f.Node }), f.Node)
	return nodes[max(len(nodes)-maxAvoidedNodes, 0):]
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
// unless a failure of that attempt or a later one is recorded. A pod gone already is not read;
// a failed read is logged and the status goes on without it.
func (r *TrainJobReconciler) readFailure(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, attempt int32) {
	if f := tj.Status.Failure; f != nil && f.Attempt >= attempt {
		return
	}
	pods := &corev1.PodList{}
	if err := r.apiReader.List(ctx, pods, client.InNamespace(js.Namespace), client.MatchingLabels{
		jobsetv1alpha2.JobSetUIDKey:    string(js.UID),
		podfailure.RestartAttemptLabel: strconv.Itoa(int(attempt)),
	}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Reading why the TrainJob's pods failed", "jobSet", klog.KObj(js))
		return
	}
	// A pod a Job did not make is no pod of the TrainJob, whatever its labels say.
	pods.Items = slices.DeleteFunc(pods.Items, func(pod corev1.Pod) bool {
		ref := metav1.GetControllerOf(&pod)
		return ref == nil || ref.Kind != "Job"
	})
	if first, _ := podfailure.First(pods.Items, time.Now()); podfailure.Supersedes(first, tj.Status.Failure) {
		tj.Status.Failure = first
		tj.Status.AvoidedNodes = avoidNode(tj.Status.AvoidedNodes, first, avoidPolicy(js))
	}
}

// avoidPolicy is the recoveryPolicy.avoidNodes the build labelled the JobSet's Jobs with.
func avoidPolicy(js *jobsetv1alpha2.JobSet) trainer.AvoidNodesPolicy {
	for _, job := range js.Spec.ReplicatedJobs {
		if policy := job.Template.Labels[trainer.AvoidNodesLabel]; policy != "" {
			return trainer.AvoidNodesPolicy(policy)
		}
	}
	return ""
}

// withFailure adds to a condition's message the TrainJob's recorded failure, when it is of the
// attempt the message is about.
func withFailure(message string, tj *trainer.TrainJob, attempt int32) string {
	if f := tj.Status.Failure; f != nil && f.Attempt == attempt {
		return message + "; first failure: " + podfailure.Summary(f)
	}
	return message
}
