package controller

import (
	"fmt"
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

// conditionOrder is the order conditions are kept in, most significant first, so that the STATE
// printer column (the first condition that is True) reads Complete, Failed, Suspended or Created.
var conditionOrder = []string{
	trainer.TrainJobComplete, trainer.TrainJobFailed, trainer.TrainJobSuspended, trainer.TrainJobRunning, trainer.TrainJobCreated,
}

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
// its JobSet was (a suspension too brief for its status to be written still counts). A TrainJob
// never suspended has no Suspended condition.
func setSuspended(tj *trainer.TrainJob, jobSetWasSuspended bool) {
	switch {
	case ptr.Deref(tj.Spec.Suspend, false):
		setCondition(tj, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "TrainJob is suspended")
	case jobSetWasSuspended, apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobSuspended):
		setCondition(tj, trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason, "TrainJob is resumed")
	}
}

// timeLeft is how long a running TrainJob may still run under spec.activeDeadlineSeconds, counted
// from when it last started running: its last resume (a Suspended condition that is False), else
// its creation. A TrainJob resumed a moment ago, whose Suspended condition is still True, starts
// its clock now. ok is false when the TrainJob has no deadline or is suspended.
func timeLeft(tj *trainer.TrainJob, now time.Time) (left time.Duration, ok bool) {
	if tj.Spec.ActiveDeadlineSeconds == nil || ptr.Deref(tj.Spec.Suspend, false) {
		return 0, false
	}
	start := tj.CreationTimestamp.Time
	if c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobSuspended); c != nil {
		start = now
		if c.Status == metav1.ConditionFalse {
			start = c.LastTransitionTime.Time
		}
	}
	return start.Add(time.Duration(*tj.Spec.ActiveDeadlineSeconds) * time.Second).Sub(now), true
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
	for part := range strings.SplitSeq(js.Annotations[framework.TrainingPodsAnnotation], ",") {
		name, size, _ := strings.Cut(part, "=")
		var replicas, perJob int32
		if _, err := fmt.Sscanf(size, "%dx%d", &replicas, &perJob); err != nil {
			continue
		}
		total += replicas * perJob
		for _, s := range js.Status.ReplicatedJobsStatus {
			if s.Name == name {
				ready += s.Ready * perJob
			}
		}
	}
	return ready, total
}

// setRunning reports whether the training runs: Running=True once all its pods are ready; False when one no longer has, and when the TrainJob is suspended or finished. A TrainJob
// whose training never ran has no Running condition.
func setRunning(tj *trainer.TrainJob, ready, total int32) {
	ran := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobRunning) != nil
	switch {
	case finished(tj):
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

// recordTransitions emits an event for each condition that changed from before, once the status
// that holds it is written: failures as warnings, the rest as normal events.
func recordTransitions(recorder events.EventRecorder, tj *trainer.TrainJob, before []metav1.Condition) {
	for _, c := range tj.Status.Conditions {
		old := apimeta.FindStatusCondition(before, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			continue
		}
		eventType := corev1.EventTypeNormal
		if (c.Type == trainer.TrainJobCreated && c.Status == metav1.ConditionFalse) ||
			(c.Type == trainer.TrainJobFailed && c.Status == metav1.ConditionTrue) {
			eventType = corev1.EventTypeWarning
		}
		recorder.Eventf(tj, nil, eventType, c.Reason, c.Type, "%s", c.Message)
	}
}
