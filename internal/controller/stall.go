package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// Stalls: a training whose trainer stops reporting progress while every pod of it runs (an NCCL
// hang, a deadlock) gets the Stalled condition, and is failed, restarted as a whole, or only
// reported, as its runtime's stallPolicy says. docs/progress.md tells the rule.

// stallRestartsAnnotation on a TrainJob's JobSet numbers the restart for a stall the operator
// began on it: a JobSet suspended with a number above the TrainJob's status.stallRestarts is
// being restarted, not suspended, and one resumed with it is a restart the status has yet to
// record. The apply that suspends the JobSet writes it, so that each step of a restart is known
// whatever the operator saw of the others.
const stallRestartsAnnotation = "trainer.kubeflow.org/stall-restarts"

// progressDeadline is the stall policy that applies to a TrainJob.
type progressDeadline struct {
	seconds int32
	// field names where the deadline comes from, for messages.
	field  string
	action trainer.StallAction
	// maxRestarts is how many restarts Restart makes at most; Fail after them.
	maxRestarts int32
	// counted is how long the progress may stay the same: the deadline, and at least twice the
	// progress endpoint's write interval, the longest a trainer's report may wait to be written
	// (minStallWindow), so that a training reporting all along is never called stalled.
	counted time.Duration
}

// progressDeadlineOf is the stall policy of a TrainJob whose runtime is rt (as ForTrainJob gives
// it: its snapshot's, once it was built; nil when it cannot be read): the runtime's, with the
// TrainJob's spec.progressDeadlineSeconds over its deadline, and Fail when the runtime has none.
// ok is false when no deadline applies.
func progressDeadlineOf(tj *trainer.TrainJob, rt *trainingruntime.Runtime, minWindow time.Duration) (d progressDeadline, ok bool) {
	d.action, d.maxRestarts = trainer.StallActionFail, defaultMaxStallRestarts
	if rt != nil && rt.Spec.StallPolicy != nil {
		p := rt.Spec.StallPolicy
		d.seconds, d.field = p.ProgressDeadlineSeconds, rt.String()+" stallPolicy.progressDeadlineSeconds"
		if p.Action != "" {
			d.action = p.Action
		}
		d.maxRestarts = ptr.Deref(p.MaxRestarts, defaultMaxStallRestarts)
	}
	if s := tj.Spec.ProgressDeadlineSeconds; s != nil {
		d.seconds, d.field = *s, "spec.progressDeadlineSeconds"
	}
	d.counted = max(time.Duration(d.seconds)*time.Second, minWindow)
	return d, d.seconds > 0
}

// reportedThisRun reports whether the trainer's progress changed since the TrainJob last
// started (status.startTime: its creation or last resume). Times are kept to the second: a change
// within the second of the start counts.
func reportedThisRun(tj *trainer.TrainJob) bool {
	last := tj.Status.LastProgressTime
	return last != nil && !last.Before(ptr.To(startedAt(tj)))
}

// stallAt is when the TrainJob stalls unless its progress advances first: its deadline after the
// later of its last progress and the moment every pod of its training last became ready (after
// its start, a pod's restart, or a restart for an earlier stall). ok is false when it cannot
// stall now: its state is not Running (every pod ready; not suspended, not finished), or its
// trainer reported no progress since it last started, as one that never reports; and never
// without a deadline. The clock never starts before listening: when the manager, and with it the
// progress endpoint, started, so that a trainer whose reports had nowhere to go while no manager
// ran gets the whole deadline to report again.
func stallAt(tj *trainer.TrainJob, d progressDeadline, listening time.Time) (at time.Time, ok bool) {
	if state, _ := stateOf(tj.Status.Conditions, tj.Status.State); d.seconds <= 0 || state != trainer.TrainJobRunning || !reportedThisRun(tj) {
		return time.Time{}, false
	}
	since := tj.Status.LastProgressTime.Time
	if ready := tj.Status.ReadyTime; ready != nil && ready.After(since) {
		since = ready.Time
	}
	if listening.After(since) {
		since = listening
	}
	return since.Add(d.counted), true
}

// message is the Stalled condition's: the deadline, where it comes from, and the last progress.
func (d progressDeadline) message(tj *trainer.TrainJob) string {
	last := tj.Status.LastProgressTime
	deadline := fmt.Sprintf("%ds", d.seconds)
	if d.counted > time.Duration(d.seconds)*time.Second {
		deadline += fmt.Sprintf(", counted as %s: twice the interval the operator writes progress at", d.counted)
	}
	msg := fmt.Sprintf("The trainer's progress did not advance for %s (%s) while every pod of the training ran: its last progress was at %s",
		d.field, deadline, last.UTC().Format(time.RFC3339))
	if ready := tj.Status.ReadyTime; ready != nil && ready.After(last.Time) {
		msg += fmt.Sprintf(", and its pods were all ready from %s", ready.UTC().Format(time.RFC3339))
	}
	return msg
}

// setReadyTime records when every pod of the training became ready: the state becomes Running.
func setReadyTime(tj *trainer.TrainJob, now time.Time) {
	if state, _ := stateOf(tj.Status.Conditions, tj.Status.State); state == trainer.TrainJobRunning && tj.Status.State != trainer.TrainJobRunning {
		tj.Status.ReadyTime = ptr.To(metav1.NewTime(now))
	}
}

// defaultMaxStallRestarts is a Restart policy's maxRestarts when it says none.
const defaultMaxStallRestarts = 3

// failingForStall reports whether the TrainJob stalled under a Fail policy and is not Failed
// yet: its JobSet, suspended to stop its pods, stays suspended.
func failingForStall(tj *trainer.TrainJob, rt *trainingruntime.Runtime) bool {
	d, ok := progressDeadlineOf(tj, rt, 0)
	failing := d.action == trainer.StallActionFail || (d.action == trainer.StallActionRestart && tj.Status.StallRestarts >= d.maxRestarts)
	return ok && failing && apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobStalled)
}

// terminatingRetry is how soon a restart looks again whether its stopped pods are gone.
const terminatingRetry = 2 * time.Second

// stallRestartsOf is the number of the last restart for a stall begun on the JobSet, or 0.
func stallRestartsOf(js *jobsetv1alpha2.JobSet) int32 {
	n, _ := strconv.ParseInt(js.Annotations[stallRestartsAnnotation], 10, 32)
	return int32(n)
}

// restartingForStall reports whether the operator suspended the JobSet to restart the TrainJob,
// which is not suspended itself, and has yet to resume it: the JobSet bears the number of the
// TrainJob's next restart (any other is not the operator's), and was built from its spec as it
// is (a TrainJob suspended, changed and resumed meanwhile is built again instead, which ends the
// restart).
func restartingForStall(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) bool {
	return js != nil && ptr.Deref(js.Spec.Suspend, false) && !ptr.Deref(tj.Spec.Suspend, false) &&
		stallRestartsOf(js) == tj.Status.StallRestarts+1 && framework.Built(js, tj, framework.SnapshotPolicy(tj))
}

// jobsStopped reports whether JobSet counts no Job with a pod that runs or is ready: after its
// suspension, every pod of the training is gone.
func jobsStopped(js *jobsetv1alpha2.JobSet) bool {
	for _, s := range js.Status.ReplicatedJobsStatus {
		if s.Active > 0 || s.Ready > 0 {
			return false
		}
	}
	return true
}

// recordStallRestart records the restart numbered n as made: the stall is over, and its clock
// starts again once every pod is ready.
func recordStallRestart(tj *trainer.TrainJob, n int32) {
	tj.Status.StallRestarts = n
	setCondition(tj, trainer.TrainJobStalled, metav1.ConditionFalse, trainer.TrainJobRestartedReason,
		fmt.Sprintf("Every pod of the training was stopped and started again (restart %d for a stall): the stall clock starts again once they are all ready", n))
}

// resumeRestarted resumes a JobSet the operator suspended to restart the TrainJob, once its pods
// are gone, so that they all start again together; a gang's waits for its PodGroup, as every
// resume does. Until then, the JobSet's changes queue the TrainJob.
func (r *TrainJobReconciler) resumeRestarted(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, rt *trainingruntime.Runtime) (wait time.Duration, err error) {
	if !jobsStopped(js) {
		return 0, nil // The JobSet's update when they stop queues the TrainJob.
	}
	// JobSet counts a pod that is being deleted as stopped; a hung trainer may take its whole
	// grace period to go, on the node and under the host name the new one needs. The Jobs'
	// counts of terminating pods say when they are gone; nothing queues the TrainJob when they
	// change, so it is looked at again shortly.
	jobs := &batchv1.JobList{}
	if err := r.client.List(ctx, jobs, client.InNamespace(js.Namespace), client.MatchingLabels{trainer.TrainJobNameLabel: tj.Name}); err != nil {
		return 0, err
	}
	for _, job := range jobs.Items {
		if jobSetOf(&job) == js.UID && (job.Status.Active > 0 || ptr.Deref(job.Status.Terminating, 0) > 0) {
			return terminatingRetry, nil
		}
	}
	if rt != nil {
		if wait, err := r.waitForPodGroup(ctx, tj, rt, js); wait || err != nil {
			return 0, err
		}
	}
	n := stallRestartsOf(js)
	if err := r.applySuspend(ctx, js, false, n); err != nil {
		return 0, err
	}
	ctrl.LoggerFrom(ctx).Info("Resumed the JobSet of a TrainJob restarted for a stall", "jobSet", js.Name, "restart", n)
	recordStallRestart(tj, n)
	return 0, nil
}

// catchStall is the last step of the reconcile of a TrainJob that is not suspended, whose JobSet
// is not being restarted: it records a restart that an earlier reconcile made, ends a stall that
// is over, and stalls a TrainJob whose progress did not advance for its deadline, doing what its
// policy says; else it asks to be reconciled when the deadline would pass.
func (r *TrainJobReconciler) catchStall(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, rt *trainingruntime.Runtime, before *trainer.TrainJobStatus) (ctrl.Result, error) {
	if n := stallRestartsOf(js); n == tj.Status.StallRestarts+1 {
		recordStallRestart(tj, n) // Resumed by a reconcile whose status was not written.
	}
	d, ok := progressDeadlineOf(tj, rt, r.minStallWindow)
	if c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobStalled); c != nil && c.Status == metav1.ConditionTrue {
		// Times are kept to the second, and a stall comes a second or more after the start and
		// the progress it counts from: a start or a progress of the second it stalled is later.
		last, stalled := tj.Status.LastProgressTime, &c.LastTransitionTime
		switch {
		case !ptr.To(startedAt(tj)).Before(stalled):
			setCondition(tj, trainer.TrainJobStalled, metav1.ConditionFalse, trainer.TrainJobResumedReason,
				"The TrainJob was suspended and resumed since it stalled: the stall clock starts again")
		case last != nil && !last.Before(stalled):
			setCondition(tj, trainer.TrainJobStalled, metav1.ConditionFalse, trainer.TrainJobProgressResumedReason,
				"The trainer's progress advanced again at "+last.UTC().Format(time.RFC3339))
		case ok:
			// Stalled, and the policy's action not taken yet: the reconcile that stalled it
			// could not take it.
			return r.actOnStall(ctx, tj, js, d, before)
		default:
			return ctrl.Result{}, nil
		}
	}
	at, ok := stallAt(tj, d, r.started)
	if !ok {
		return ctrl.Result{}, nil
	}
	if left := time.Until(at); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil // Looked at again when the deadline passes.
	}
	setCondition(tj, trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason, d.message(tj))
	ctrl.LoggerFrom(ctx).Info("The TrainJob stalled", "deadline", d.field, "seconds", d.seconds, "action", d.action)
	return r.actOnStall(ctx, tj, js, d, before)
}

// actOnStall does what the stall policy says to a stalled TrainJob. Fail stops its pods (the
// JobSet is suspended first, so that a TrainJob is never Failed with its pods running) and fails
// it. Restart writes the stall first, then suspends the JobSet, marked with the restart's number:
// the TrainJob itself stays unsuspended, and its start time, from which activeDeadlineSeconds
// counts, stays; resumeRestarted resumes the JobSet once its pods are gone. Report does nothing
// more.
func (r *TrainJobReconciler) actOnStall(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, d progressDeadline, before *trainer.TrainJobStatus) (ctrl.Result, error) {
	failure := d.message(tj) + ": its pods are stopped"
	if d.action == trainer.StallActionRestart && tj.Status.StallRestarts >= d.maxRestarts {
		d.action = trainer.StallActionFail
		failure = fmt.Sprintf("%s, after %d restarts for stalls (stallPolicy.maxRestarts): its pods are stopped", d.message(tj), tj.Status.StallRestarts)
	}
	switch d.action {
	case trainer.StallActionFail:
		// The stall is written first: a reconcile that comes between the JobSet's suspension and
		// the TrainJob's failure (its status write refused) does not take the JobSet for one to
		// resume (failingForStall).
		if result, err := r.commit(ctx, tj, before); err != nil || !result.IsZero() {
			return result, err
		}
		if err := r.stopAndFail(ctx, tj, js, trainer.TrainJobProgressDeadlineExceededReason, failure); err != nil {
			return ctrl.Result{}, err
		}
	case trainer.StallActionRestart:
		if result, err := r.commit(ctx, tj, before); err != nil || !result.IsZero() {
			return result, err
		}
		if err := r.applySuspend(ctx, js, true, tj.Status.StallRestarts+1); err != nil {
			return ctrl.Result{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Suspended the JobSet of a stalled TrainJob to restart it", "jobSet", js.Name, "restart", tj.Status.StallRestarts+1)
	}
	return ctrl.Result{}, nil
}

// progressMoved passes the updates of a TrainJob in which its trainer's progress changed and the
// stall rule needs the controller: the first progress since the TrainJob last started, which
// starts the stall clock, and progress that may end a stall. Other progress needs no reconcile:
// the one the clock asked for, when the deadline would pass, reads it then.
func progressMoved() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*trainer.TrainJob)
			tj, ok2 := e.ObjectNew.(*trainer.TrainJob)
			if !ok1 || !ok2 || old.Status.LastProgressTime.Equal(tj.Status.LastProgressTime) {
				return false
			}
			return !reportedThisRun(old) || apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobStalled)
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
