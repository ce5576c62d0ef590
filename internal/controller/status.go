package controller

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// stateConditions are the conditions that say status.state, most significant first: it is the
// first of them that is True.
var stateConditions = []string{
	trainer.TrainJobComplete, trainer.TrainJobFailed, trainer.TrainJobSuspended, trainer.TrainJobRunning, trainer.TrainJobCreated,
}

// conditionOrder is the order conditions are kept in, most significant first: those that say the
// state, then Stalled, which says something of a state (Running, or Failed) and is none itself.
var conditionOrder = append(slices.Clone(stateConditions), trainer.TrainJobStalled)

// maxMessageLength is the longest condition message the API accepts.
const maxMessageLength = 32768

// setCondition sets a condition of the TrainJob's status in memory for its current generation.
func setCondition(tj *trainer.TrainJob, condType string, status metav1.ConditionStatus, reason, message string) {
	message = truncate(message, maxMessageLength)
	apimeta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: tj.Generation,
	})
	slices.SortStableFunc(tj.Status.Conditions, func(a, b metav1.Condition) int {
		return rank(a.Type) - rank(b.Type)
	})
	if condType == trainer.TrainJobComplete && status == metav1.ConditionTrue && tj.Status.CompletionTime == nil {
		completed := apimeta.FindStatusCondition(tj.Status.Conditions, condType).LastTransitionTime
		tj.Status.CompletionTime = &completed
	}
}

// truncate cuts s to at most n bytes, ending it with "..." when it was cut. A message says the
// field and the reason first, so that its beginning is what matters.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) { // Never cut a character in two.
		cut--
	}
	return s[:cut] + "..."
}

func rank(condType string) int {
	if i := slices.Index(conditionOrder, condType); i >= 0 {
		return i
	}
	return len(conditionOrder)
}

// setSuspended reports spec.suspend: Suspended=True while suspended, and Suspended=False with
// reason Resumed once a suspended TrainJob runs again: its condition said it was suspended, or
// its JobSet was (a suspension too brief for its status to be written still counts); its start
// time is then now. A TrainJob never suspended has no Suspended condition.
func setSuspended(tj *trainer.TrainJob, jobSetWasSuspended bool, now time.Time) {
	switch {
	case ptr.Deref(tj.Spec.Suspend, false):
		setCondition(tj, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "TrainJob is suspended")
	case jobSetWasSuspended, apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobSuspended):
		setCondition(tj, trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason, "TrainJob is resumed")
		tj.Status.StartTime = ptr.To(metav1.NewTime(now))
	}
}

// timeLeft is how long a running TrainJob may still run under its deadline (ActiveDeadline), counted
// from when it last started (status.startTime: its creation or last resume). A TrainJob resumed a
// moment ago, whose Suspended condition is still True, starts its clock now. ok is false when the
// TrainJob has no deadline or is suspended.
func timeLeft(tj *trainer.TrainJob, now time.Time) (left time.Duration, ok bool) {
	deadline, _, ok := tj.ActiveDeadline()
	if !ok || ptr.Deref(tj.Spec.Suspend, false) {
		return 0, false
	}
	start := startedAt(tj).Time
	if apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobSuspended) {
		start = now
	}
	return start.Add(time.Duration(deadline) * time.Second).Sub(now), true
}

// deadlineText names a TrainJob's deadline for its messages: "its spec.activeDeadlineSeconds (60s)".
func deadlineText(tj *trainer.TrainJob) string {
	seconds, field, _ := tj.ActiveDeadline()
	return fmt.Sprintf("its %s (%ds)", field, seconds)
}

// startedAt is when the TrainJob last started: status.startTime; for a TrainJob resumed by an
// operator that kept no start time, its Suspended condition's last change; else its creation.
func startedAt(tj *trainer.TrainJob) metav1.Time {
	if tj.Status.StartTime != nil {
		return *tj.Status.StartTime
	}
	if c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobSuspended); c != nil && c.Status == metav1.ConditionFalse {
		return c.LastTransitionTime
	}
	return tj.CreationTimestamp
}

// stateSince is when the TrainJob entered state, its state, as its status tells it, for a state
// that is not finished: Pending since its creation (it is Pending only until its first JobSet);
// Suspended since its Suspended condition last changed; Running since status.readyTime; Created
// since it last started (startedAt), or, for a training that ran since, since its Running
// condition turned False. Under upstream's conditions no condition records that: ok is false for
// such a TrainJob (its pods were all ready once since it started and are not now: a restart).
func stateSince(tj *trainer.TrainJob, state string) (since time.Time, ok bool) {
	s := &tj.Status
	switch state {
	case trainer.TrainJobPending:
		return tj.CreationTimestamp.Time, true
	case trainer.TrainJobSuspended:
		if c := apimeta.FindStatusCondition(s.Conditions, trainer.TrainJobSuspended); c != nil {
			return c.LastTransitionTime.Time, true
		}
		return tj.CreationTimestamp.Time, true
	case trainer.TrainJobRunning:
		if s.ReadyTime != nil {
			return s.ReadyTime.Time, true
		}
		return startedAt(tj).Time, true
	case trainer.TrainJobCreated:
		started := startedAt(tj)
		if s.ReadyTime == nil || s.ReadyTime.Before(&started) {
			return started.Time, true
		}
		if c := apimeta.FindStatusCondition(s.Conditions, trainer.TrainJobRunning); c != nil && c.Status == metav1.ConditionFalse {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// stateOf is status.state as the conditions set in memory say it, with the reason of the
// condition that says it: the first of stateConditions that is True, else Pending. Under
// upstream's conditions a JobSet made earlier has no Created condition written: a reconcile that
// returned before saying so again keeps the state that was, Created or Running.
func stateOf(conditions []metav1.Condition, was string) (state, reason string) {
	for _, c := range conditions {
		if c.Status == metav1.ConditionTrue && slices.Contains(stateConditions, c.Type) {
			return c.Type, c.Reason
		}
	}
	if apimeta.FindStatusCondition(conditions, trainer.TrainJobCreated) == nil &&
		(was == trainer.TrainJobCreated || was == trainer.TrainJobRunning) {
		return was, ""
	}
	return trainer.TrainJobPending, ""
}

// statusState is the state a written status says. A status written by an operator that kept no
// status.state says it with its conditions.
func statusState(s *trainer.TrainJobStatus) string {
	if s.State != "" {
		return s.State
	}
	state, _ := stateOf(s.Conditions, "")
	return state
}

// jobSetMade reports whether the TrainJob's JobSet was made: status.observedGeneration, or the
// Created condition of a status written by an operator that kept none.
func jobSetMade(tj *trainer.TrainJob) bool {
	return observedGeneration(tj) > 0
}

// observedGeneration is the generation the TrainJob's JobSet was last made from or brought in
// line with, or 0.
func observedGeneration(tj *trainer.TrainJob) int64 {
	if g := tj.Status.ObservedGeneration; g > 0 {
		return g
	}
	if c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated); c != nil && c.Status == metav1.ConditionTrue {
		return c.ObservedGeneration
	}
	return 0
}

// settle finishes a status that the reconcile set in memory with all the conditions:
// status.state and status.observedGeneration from them, then only the conditions of the
// manager's set. It returns the reason of the new state and the conditions it cut from, for the
// metrics and events.
func settle(tj *trainer.TrainJob, before *trainer.TrainJobStatus, set ConditionSet) (reason string, all []metav1.Condition) {
	s := &tj.Status
	all = slices.Clone(s.Conditions)
	s.State, reason = stateOf(all, statusState(before))
	if c := apimeta.FindStatusCondition(all, trainer.TrainJobCreated); c != nil && c.Status == metav1.ConditionTrue {
		s.ObservedGeneration = c.ObservedGeneration
	}
	if set == UpstreamConditions {
		s.Conditions = slices.DeleteFunc(s.Conditions, notUpstreams)
		if len(s.Conditions) == 0 {
			s.Conditions = nil
		}
	}
	return reason, all
}

// notUpstreams reports whether a condition is left out under upstream's conditions: those
// upstream Kubeflow Trainer would not write, as its SDK sees a TrainJob Running only while it has
// none. Created=False stays: it says why a TrainJob does not start. Stalled=True, this
// operator's, stays too: nothing else says that the training hangs (the SDK shows such a
// TrainJob Created); once the stall is over it goes, so that the SDK sees the TrainJob run again.
func notUpstreams(c metav1.Condition) bool {
	switch c.Type {
	case trainer.TrainJobCreated:
		return c.Status == metav1.ConditionTrue
	case trainer.TrainJobRunning:
		return true
	case trainer.TrainJobSuspended, trainer.TrainJobStalled:
		return c.Status != metav1.ConditionTrue
	}
	return false
}

// setJobSetStatus mirrors the JobSet's replicated jobs into status.jobsStatus and status.ready,
// its terminal state into the Complete or Failed condition, with the reason and message of the
// JobSet's own condition, and its training's ready pods into the Running condition.
func setJobSetStatus(tj *trainer.TrainJob, jobSet *jobsetv1alpha2.JobSet) {
	js := &jobSet.Status
	ready, total := setJobSetCounts(tj, jobSet)
	defer setRunning(tj, ready, total)

	terminal := map[string]string{
		string(jobsetv1alpha2.JobSetCompleted): trainer.TrainJobComplete,
		string(jobsetv1alpha2.JobSetFailed):    trainer.TrainJobFailed,
	}
	condType, ok := terminal[js.TerminalState]
	if !ok {
		return
	}
	reason, message := "JobSet"+js.TerminalState, "JobSet is "+js.TerminalState
	if c := apimeta.FindStatusCondition(js.Conditions, js.TerminalState); c != nil {
		reason, message = c.Reason, c.Message
	}
	if condType == trainer.TrainJobFailed {
		message = withFailure(message, tj, js.Restarts)
	}
	setCondition(tj, condType, metav1.ConditionTrue, reason, message)
}

// setJobSetCounts mirrors the JobSet's replicated jobs into status.jobsStatus and its training's
// ready pods into status.ready, and returns those pods' counts.
func setJobSetCounts(tj *trainer.TrainJob, jobSet *jobsetv1alpha2.JobSet) (ready, total int32) {
	tj.Status.JobsStatus = nil
	for _, s := range jobSet.Status.ReplicatedJobsStatus {
		tj.Status.JobsStatus = append(tj.Status.JobsStatus, trainer.JobStatus{
			Name:      s.Name,
			Ready:     s.Ready,
			Succeeded: s.Succeeded,
			Failed:    s.Failed,
			Active:    s.Active,
			Suspended: s.Suspended,
		})
	}
	tj.Status.Restarts = jobSet.Status.Restarts
	tj.Status.RestartsCountTowardsMax = jobSet.Status.RestartsCountTowardsMax
	setScaleStatus(tj, jobSet)
	ready, total = trainingPods(jobSet)
	if total > 0 {
		tj.Status.Ready = fmt.Sprintf("%d/%d", ready, total)
	}
	return ready, total
}

// trainingPods counts the pods of the JobSet's training, and those of them that are ready, from
// the sizes its TrainingPodsAnnotation records and its status. JobSet counts ready Jobs, not
// pods: a Job's pods count as ready once all of them are. A JobSet without the annotation has no
// pods to count.
func trainingPods(js *jobsetv1alpha2.JobSet) (ready, total int32) {
	for name, size := range recordedSizes(js) {
		total += size.replicas * size.perJob
		for _, s := range js.Status.ReplicatedJobsStatus {
			if s.Name == name {
				ready += s.Ready * size.perJob
			}
		}
	}
	return ready, total
}

// jobSize is the size of a replicated job: its Jobs, and the pods of each.
type jobSize struct{ replicas, perJob int32 }

// recordedSizes are the sizes of the JobSet's training's replicated jobs, by name, as its
// TrainingPodsAnnotation records them; a part that does not parse is left out.
func recordedSizes(js *jobsetv1alpha2.JobSet) iter.Seq2[string, jobSize] {
	return func(yield func(string, jobSize) bool) {
		for part := range strings.SplitSeq(js.Annotations[framework.TrainingPodsAnnotation], ",") {
			name, size, _ := strings.Cut(part, "=")
			var s jobSize
			if _, err := fmt.Sscanf(size, "%dx%d", &s.replicas, &s.perJob); err == nil && !yield(name, s) {
				return
			}
		}
	}
}

// setRunning reports whether the training runs: Running=True once all its pods are ready; False when one no longer has, and when the TrainJob is suspended or finished. A TrainJob
// whose training never ran has no Running condition.
func setRunning(tj *trainer.TrainJob, ready, total int32) {
	ran := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobRunning) != nil
	switch {
	case tj.Finished():
		if ran {
			setCondition(tj, trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobFinishedReason, "TrainJob is finished")
		}
	case ptr.Deref(tj.Spec.Suspend, false):
		if ran {
			setCondition(tj, trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobSuspendedReason, "TrainJob is suspended")
		}
	case total > 0 && ready == total:
		setCondition(tj, trainer.TrainJobRunning, metav1.ConditionTrue, trainer.TrainJobNodesReadyReason,
			fmt.Sprintf("All %d pods of the training are ready", total))
	case ran:
		setCondition(tj, trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobNodesNotReadyReason,
			"A pod of the training is not ready")
	}
}

// tellState emits, once the status is written, the events of a change of status.state that no
// condition written tells under upstream's conditions: the JobSet made, the TrainJob resumed, the
// training running or no longer. all are the conditions set in memory.
func tellState(recorder events.EventRecorder, tj *trainer.TrainJob, from string, all []metav1.Condition) {
	to := tj.Status.State
	if from == to || (to != trainer.TrainJobCreated && to != trainer.TrainJobRunning) {
		return
	}
	var told []*metav1.Condition
	switch from {
	case trainer.TrainJobPending, "":
		told = append(told, apimeta.FindStatusCondition(all, trainer.TrainJobCreated))
	case trainer.TrainJobSuspended:
		told = append(told, apimeta.FindStatusCondition(all, trainer.TrainJobSuspended))
	case trainer.TrainJobRunning:
		told = append(told, &metav1.Condition{Type: trainer.TrainJobRunning, Reason: trainer.TrainJobNodesNotReadyReason,
			Message: "A pod of the training is not ready"})
	}
	if to == trainer.TrainJobRunning {
		told = append(told, apimeta.FindStatusCondition(all, trainer.TrainJobRunning))
	}
	for _, c := range told {
		if c != nil {
			recorder.Eventf(tj, nil, corev1.EventTypeNormal, c.Reason, c.Type, "%s", c.Message)
		}
	}
}

// recordTransitions emits an event for each condition that changed from before, once the status
// that holds it is written: failures as warnings, the rest as normal events.
func recordTransitions(recorder events.EventRecorder, tj *trainer.TrainJob, before []metav1.Condition) {
	for _, c := range tj.Status.Conditions {
		old := apimeta.FindStatusCondition(before, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			continue
		}
		recordCondition(recorder, tj, &c)
	}
}

// recordCondition emits the event of a condition's change: failures and stalls as warnings, the
// rest as normal events.
func recordCondition(recorder events.EventRecorder, tj *trainer.TrainJob, c *metav1.Condition) {
	eventType := corev1.EventTypeNormal
	if (c.Type == trainer.TrainJobCreated && c.Status == metav1.ConditionFalse) ||
		(c.Type == trainer.TrainJobFailed && c.Status == metav1.ConditionTrue) ||
		(c.Type == trainer.TrainJobStalled && c.Status == metav1.ConditionTrue) {
		eventType = corev1.EventTypeWarning
	}
	recorder.Eventf(tj, nil, eventType, c.Reason, c.Type, "%s", c.Message)
}

// tellStallOver emits, once the status is written, the event of a stall that ended, which
// upstream's conditions tell by removing Stalled=True: the Stalled=False condition set in memory
// (among all) says how it ended.
func tellStallOver(recorder events.EventRecorder, tj *trainer.TrainJob, before []metav1.Condition, all []metav1.Condition) {
	if !apimeta.IsStatusConditionTrue(before, trainer.TrainJobStalled) || apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobStalled) != nil {
		return
	}
	if c := apimeta.FindStatusCondition(all, trainer.TrainJobStalled); c != nil {
		recordCondition(recorder, tj, c)
	}
}
