package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/podfailure"
)

// Why a TrainJob is not running, each the Reason of a cause, in the order `describe` looks for
// them: the first found is the cause.
const (
	CauseFailed            = "Failed"
	CauseStalled           = "Stalled"
	CauseQueued            = "QueueAdmission"
	CauseSuspended         = "Suspended"
	CauseNotCreated        = "NotCreated"
	CausePodsNotCreated    = "PodsNotCreated"
	CauseGangWait          = "GangWait"
	CauseUnschedulable     = "Unschedulable"
	CauseImagePull         = "ImagePull"
	CauseInitializerFailed = "InitializerFailed"
	CausePodFailed         = "PodFailed"
	CauseStarting          = "Starting"
)

// cause says why a TrainJob is not running: a reason from the list above and what to read.
type cause struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// imagePullReasons are the reasons a container waits for an image it cannot get.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
}

// diagnose finds why the TrainJob of t is not running, or nil when it runs or has completed.
// It reads only what t holds, so that what is known of a cluster decides alone.
func diagnose(t *tree, now time.Time) *cause {
	tj := t.tj
	switch {
	case apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete):
		return nil
	case apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed):
		return failedCause(t)
	case apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobStalled):
		c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobStalled)
		return &cause{CauseStalled, c.Message}
	}
	if c := queueCause(t); c != nil {
		return c
	}
	if ptr.Deref(tj.Spec.Suspend, false) {
		return &cause{CauseSuspended, fmt.Sprintf("spec.suspend is true: `kubectl trainjob resume %s` runs it", tj.Name)}
	}
	if c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated); c != nil && c.Status == metav1.ConditionFalse {
		return &cause{CauseNotCreated, c.Reason + ": " + c.Message}
	}
	if tj.Status.State == trainer.TrainJobRunning {
		return nil
	}
	for _, find := range []func(*tree, time.Time) *cause{podsNotCreatedCause, gangCause, unschedulableCause, imagePullCause, initializerCause, podFailedCause} {
		if c := find(t, now); c != nil {
			return c
		}
	}
	if t.jobSet == nil {
		return &cause{CauseNotCreated, "the operator has not made its JobSet yet: is it running, and does it serve this TrainJob's runtime?"}
	}
	return &cause{CauseStarting, fmt.Sprintf("its pods are starting (%s ready)", cmp.Or(tj.Status.Ready, "none"))}
}

// failedCause is what failed: the first failed pod of the last attempt, which the operator
// recorded, else the Failed condition (a deadline, a lost JobSet, a missing runtime).
func failedCause(t *tree) *cause {
	c := apimeta.FindStatusCondition(t.tj.Status.Conditions, trainer.TrainJobFailed)
	f := t.tj.Status.Failure
	if f == nil {
		return &cause{CauseFailed, c.Reason + ": " + c.Message}
	}
	reason := CausePodFailed
	if strings.HasSuffix(f.ReplicatedJob, "initializer") || t.initializers[f.ReplicatedJob] {
		reason = CauseInitializerFailed
	}
	return &cause{reason, podfailure.Summary(withLogTail(f, t.logTails))}
}

// withLogTail is the failure with the end of its pod's log when the kubelet kept no message.
func withLogTail(f *trainer.PodFailure, tails map[string]string) *trainer.PodFailure {
	if f.Message != "" || tails[f.Pod] == "" {
		return f
	}
	g := *f
	g.Message = podfailure.Tail(tails[f.Pod])
	return &g
}

// queueCause is Kueue's: its Workload waits for quota or for a queue that does not exist.
func queueCause(t *tree) *cause {
	queue := t.tj.Labels[trainer.KueueQueueLabel]
	if t.workload == nil {
		if queue == "" || !ptr.Deref(t.tj.Spec.Suspend, false) {
			return nil
		}
		return &cause{CauseQueued, fmt.Sprintf("it is in Kueue's LocalQueue %q, and Kueue has made no Workload for it yet: is Kueue running, with its TrainJob integration on?", queue)}
	}
	if workloadCondition(t.workload, "Admitted") == "True" {
		return nil
	}
	// An eviction says most; then why no quota is reserved; then what admission still waits for.
	for _, want := range []struct{ typ, status string }{{"Evicted", "True"}, {"QuotaReserved", "False"}, {"Admitted", "False"}} {
		if status, reason, message := workloadConditionDetail(t.workload, want.typ); status == want.status && message != "" {
			return &cause{CauseQueued, fmt.Sprintf("Kueue has not admitted Workload %s (queue %q), %s: %s", t.workload.GetName(), queue, reason, message)}
		}
	}
	return &cause{CauseQueued, fmt.Sprintf("Kueue has not admitted Workload %s (queue %q) yet", t.workload.GetName(), queue)}
}

func workloadCondition(wl *unstructured.Unstructured, typ string) string {
	status, _, _ := workloadConditionDetail(wl, typ)
	return status
}

func workloadConditionDetail(wl *unstructured.Unstructured, typ string) (status, reason, message string) {
	conditions, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			status, _ = m["status"].(string)
			reason, _ = m["reason"].(string)
			message, _ = m["message"].(string)
			return status, reason, message
		}
	}
	return "", "", ""
}

// creationFailures are the reasons of the warnings JobSet and the Job controller give when the
// API server refuses a Job or a pod: a quota, a policy, an admission webhook, an invalid spec.
var creationFailures = map[string]bool{"JobCreationFailed": true, "FailedCreate": true}

// podsNotCreatedCause is a Job or pod the API server refused to JobSet or to the Job controller,
// while the training misses pods: their latest warning says why.
func podsNotCreatedCause(t *tree, _ time.Time) *cause {
	if t.jobSet == nil || len(podsByRank(t.jobSet, t.pods, trainer.AncestorTrainer)) >= rankCount(t.jobSet, trainer.AncestorTrainer) {
		return nil
	}
	var latest *corev1.Event
	for i := range t.events {
		e := &t.events[i]
		if e.Type == corev1.EventTypeWarning && creationFailures[e.Reason] && (latest == nil || !eventTime(e).Before(eventTime(latest))) {
			latest = e
		}
	}
	if latest == nil {
		return nil
	}
	return &cause{CausePodsNotCreated, fmt.Sprintf("%s %s cannot make its children: %s", latest.InvolvedObject.Kind, latest.InvolvedObject.Name, latest.Message)}
}

// gangCause is a gang that waits: its PodGroup has not got all its pods placed, and the
// scheduler says why.
func gangCause(t *tree, now time.Time) *cause {
	// The gang runs when its scheduler says so and its pods have nodes: scheduler-plugins'
	// PodGroup controller (v0.34) counts the pods of a PodGroup by its name in every namespace,
	// so a namespace's gang can read Running on the strength of another's pods.
	g := t.gang
	if g == nil || (g.Running && int32(scheduledPods(t)) >= g.MinMember) {
		return nil
	}
	msg := fmt.Sprintf("%s PodGroup %s is %s: %d of %d pods scheduled, for %s", g.Scheduler, g.name,
		cmp.Or(g.Phase, "new"), scheduledPods(t), g.MinMember, duration.HumanDuration(now.Sub(g.created)))
	if g.Timeout > 0 {
		msg += fmt.Sprintf(" (its schedule timeout is %ds)", int64(g.Timeout.Seconds()))
	}
	if p, why := firstUnschedulable(t); p != nil {
		msg += fmt.Sprintf("; the scheduler on pod %s: %s", p.Name, why)
	} else if g.Waiting != "" {
		msg += "; " + g.Waiting
	}
	return &cause{CauseGangWait, msg}
}

// scheduledPods counts the gang's pods that have a node: the training's, not an initializer's
// that ran before it, nor a pod on its way out.
func scheduledPods(t *tree) int {
	n := 0
	for i := range t.pods {
		p := &t.pods[i]
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && !t.initializers[p.Labels[jobsetv1alpha2.ReplicatedJobNameKey]] &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n
}

// unheardOf is how long a pod may wait for its scheduler's first word before describe says
// that no scheduler seems to look at it.
const unheardOf = 10 * time.Second

// unschedulableCause is a pod the scheduler cannot place, and why it says so; or a pod that
// no scheduler has looked at: its scheduler (a KAI or Volcano one the cluster lacks) is not
// running.
func unschedulableCause(t *tree, now time.Time) *cause {
	if p, why := firstUnschedulable(t); p != nil {
		return &cause{CauseUnschedulable, fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, why)}
	}
	for i := range t.pods {
		p := &t.pods[i]
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil && len(p.Status.Conditions) == 0 && now.Sub(p.CreationTimestamp.Time) > unheardOf {
			return &cause{CauseUnschedulable, fmt.Sprintf("pod %s waits for scheduler %q, which has not looked at it in %s: is that scheduler running in this cluster?",
				p.Name, cmp.Or(p.Spec.SchedulerName, corev1.DefaultSchedulerName), duration.HumanDuration(now.Sub(p.CreationTimestamp.Time)))}
		}
	}
	return nil
}

// firstUnschedulable is the first pod the scheduler refused, with its words: the pod's
// PodScheduled condition (events expire, it does not), or its latest FailedScheduling event.
func firstUnschedulable(t *tree) (*corev1.Pod, string) {
	for i := range t.pods {
		p := &t.pods[i]
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
				return p, c.Message
			}
		}
		if e := t.latestEvent(p.UID, "FailedScheduling"); e != nil {
			return p, e.Message
		}
	}
	return nil, ""
}

// imagePullCause is a container that cannot get its image.
func imagePullCause(t *tree, now time.Time) *cause {
	for i := range t.pods {
		if f := podfailure.Read(&t.pods[i], now); f != nil && imagePullReasons[f.Reason] {
			return &cause{CauseImagePull, podfailure.Summary(f)}
		}
	}
	return nil
}

// initializerCause is an initializer's pod that failed or cannot start: the training waits for it.
func initializerCause(t *tree, now time.Time) *cause {
	var pods []corev1.Pod
	for _, p := range t.pods {
		if t.initializers[p.Labels[jobsetv1alpha2.ReplicatedJobNameKey]] {
			pods = append(pods, p)
		}
	}
	if f, _ := podfailure.First(pods, now); f != nil {
		return &cause{CauseInitializerFailed, podfailure.Summary(withLogTail(f, t.logTails))}
	}
	return nil
}

// podFailedCause is the first failed pod of the training's last attempt: JobSet may restart
// it, but this is what went wrong.
func podFailedCause(t *tree, now time.Time) *cause {
	f, others := podfailure.First(t.pods, now)
	if f == nil {
		return nil
	}
	msg := podfailure.Summary(withLogTail(f, t.logTails))
	if others > 0 {
		msg = fmt.Sprintf("%s\n(%d more pods of that attempt failed with it)", msg, others)
	}
	return &cause{CausePodFailed, msg}
}

// latestEvent is the latest event of reason about the object uid.
func (t *tree) latestEvent(uid types.UID, reason string) *corev1.Event {
	var found []*corev1.Event
	for i := range t.events {
		if e := &t.events[i]; e.InvolvedObject.UID == uid && e.Reason == reason {
			found = append(found, e)
		}
	}
	if len(found) == 0 {
		return nil
	}
	return slices.MaxFunc(found, func(a, b *corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
}

// eventTime is when the event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
