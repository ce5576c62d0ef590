// Package podfailure tells how a pod of a TrainJob failed, from the pod alone: which container,
// its exit code or signal, the reason, the node, and the last lines of its log that the kubelet
// keeps as its termination message. It also picks the first failure among a TrainJob's pods, and
// words it for a condition or an event.
package podfailure

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// Bounds of a failure's message: the tail of a log, as much as a person reads in a status.
const (
	MaxMessageLines = 20
	MaxMessageBytes = 2048
)

const (
	// completionIndexAnnotation is the index of a pod in its Indexed Job.
	completionIndexAnnotation = "batch.kubernetes.io/job-completion-index"
	// RestartAttemptLabel is JobSet's restart attempt of a pod (jobset's constants.RestartsKey).
	RestartAttemptLabel = "jobset.sigs.k8s.io/restart-attempt"
)

// waitingErrors are the reasons a container waits that mean it will not start by itself.
var waitingErrors = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
	"RunContainerError": true,
}

// disruptionReasons name, shortly, why Kubernetes stopped a pod (its DisruptionTarget condition).
var disruptionReasons = map[string]string{
	"PreemptionByScheduler":  "Preempted",
	"EvictionByEvictionAPI":  "Evicted",
	"DeletionByTaintManager": "NodeTainted",
	"DeletionByPodGC":        "NodeLost",
	"TerminationByKubelet":   "TerminatedByKubelet",
}

// nodeReasons are the reasons of a pod's failure that come from its node rather than from the
// training: the kubelet evicted it for the node's pressure, refused it or shut down with it,
// the node went away, was drained or tainted NoExecute.
var nodeReasons = map[string]bool{
	"Evicted": true, "NodeLost": true, "NodeTainted": true, "TerminatedByKubelet": true,
	"Shutdown": true, "Terminated": true, "NodeShutdown": true, "UnexpectedAdmissionError": true,
	"NodeAffinity": true,
}

// Read tells how the pod failed, or, for a pod that never ran, why it cannot start (an image
// that cannot be pulled, a crash loop). It is nil for a pod that did neither. now stands for
// the time of a failure whose pod records none.
func Read(pod *corev1.Pod, now time.Time) *trainer.PodFailure {
	f := &trainer.PodFailure{
		Pod:           cut(pod.Name, 253),
		ReplicatedJob: cut(pod.Labels[jobsetv1alpha2.ReplicatedJobNameKey], 63),
		Node:          cut(pod.Spec.NodeName, 253),
		Time:          metav1.NewTime(now),
	}
	// The status takes each text at most as long as its field allows: a kubelet's reason may be
	// longer (OutOf and an extended resource's name), and whoever may write a pod's status
	// writes what it likes.
	defer func() {
		if f != nil {
			f.Container, f.Reason = cut(f.Container, 63), cut(f.Reason, 128)
		}
	}()
	if i, err := strconv.ParseInt(pod.Annotations[completionIndexAnnotation], 10, 32); err == nil {
		f.Rank = ptr.To(int32(i))
	}
	if a, err := strconv.ParseInt(pod.Labels[RestartAttemptLabel], 10, 32); err == nil && a >= 0 {
		f.Attempt = int32(a)
	}

	if pod.Status.Phase != corev1.PodFailed {
		name, waiting := waitingError(pod)
		if waiting == nil {
			return nil
		}
		f.Container, f.Reason, f.Message = name, waiting.Reason, Tail(waiting.Message)
		return f
	}

	if name, t := failedContainer(pod); t != nil {
		f.Container, f.ExitCode, f.Reason, f.Message = name, ptr.To(t.ExitCode), t.Reason, Tail(t.Message)
		if !t.FinishedAt.IsZero() {
			f.Time = t.FinishedAt
		}
		switch {
		case t.Signal != 0:
			f.Signal = ptr.To(t.Signal)
		case t.ExitCode > 128 && t.ExitCode < 160:
			f.Signal = ptr.To(t.ExitCode - 128)
		}
	}
	// What stopped the pod as a whole is the cause, whatever its containers said when they were
	// stopped.
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			f.Reason = cmp.Or(disruptionReasons[c.Reason], c.Reason)
			f.Message = Tail(cmp.Or(c.Message, f.Message))
		}
	}
	if pod.Status.Reason != "" {
		f.Reason, f.Message = pod.Status.Reason, Tail(cmp.Or(pod.Status.Message, f.Message))
	}
	f.Reason = cmp.Or(f.Reason, "Failed")
	f.NodeCaused = nodeReasons[f.Reason]
	return f
}

// failedContainer is the container that failed first: the one whose terminated state ended
// earliest with a non-zero exit code, init containers first.
func failedContainer(pod *corev1.Pod) (string, *corev1.ContainerStateTerminated) {
	var name string
	var first *corev1.ContainerStateTerminated
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		t := s.State.Terminated
		if t == nil {
			t = s.LastTerminationState.Terminated
		}
		if t == nil || t.ExitCode == 0 {
			continue
		}
		if first == nil || t.FinishedAt.Before(&first.FinishedAt) {
			name, first = s.Name, t
		}
	}
	return name, first
}

// waitingError is the first container of a pod that waits for a reason that keeps it from ever
// starting by itself.
func waitingError(pod *corev1.Pod) (string, *corev1.ContainerStateWaiting) {
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if w := s.State.Waiting; w != nil && waitingErrors[w.Reason] {
			return s.Name, w
		}
	}
	return "", nil
}

// First is the first failure among pods: of the latest attempt among them, the earliest, a pod
// that failed by itself before one that was deleted (stopped because another failed), and the
// lowest rank when they tie. others is how many more pods of that attempt failed. Pods that
// never ran count only when none failed.
func First(pods []corev1.Pod, now time.Time) (first *trainer.PodFailure, others int) {
	type read struct {
		*trainer.PodFailure
		deleted bool
		failed  bool
	}
	var all []read
	for i := range pods {
		if f := Read(&pods[i], now); f != nil {
			all = append(all, read{f, pods[i].DeletionTimestamp != nil, pods[i].Status.Phase == corev1.PodFailed})
		}
	}
	if slices.ContainsFunc(all, func(r read) bool { return r.failed }) {
		all = slices.DeleteFunc(all, func(r read) bool { return !r.failed })
	}
	if len(all) == 0 {
		return nil, 0
	}
	latest := slices.MaxFunc(all, func(a, b read) int { return cmp.Compare(a.Attempt, b.Attempt) }).Attempt
	all = slices.DeleteFunc(all, func(r read) bool { return r.Attempt != latest })
	f := slices.MinFunc(all, func(a, b read) int {
		return cmp.Or(a.Time.Compare(b.Time.Time), compareBool(a.deleted, b.deleted),
			cmp.Compare(ptr.Deref(a.Rank, 0), ptr.Deref(b.Rank, 0)), cmp.Compare(a.Pod, b.Pod))
	})
	return f.PodFailure, len(all) - 1
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Supersedes tells whether f should replace was as a TrainJob's recorded failure: it is of a
// later attempt, or earlier in the same one.
func Supersedes(f, was *trainer.PodFailure) bool {
	switch {
	case f == nil:
		return false
	case was == nil || f.Attempt != was.Attempt:
		return was == nil || f.Attempt > was.Attempt
	}
	return f.Time.Before(&was.Time)
}

// Summary words a failure in one line, and its message on the lines that follow: what a
// condition's message and an event say.
func Summary(f *trainer.PodFailure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s", f.Pod)
	var where []string
	if f.ReplicatedJob != "" {
		where = append(where, "replicated job "+f.ReplicatedJob)
	}
	if f.Rank != nil {
		where = append(where, fmt.Sprintf("rank %d", *f.Rank))
	}
	where = append(where, fmt.Sprintf("attempt %d", f.Attempt))
	fmt.Fprintf(&b, " (%s)", strings.Join(where, ", "))
	if f.Container != "" {
		fmt.Fprintf(&b, ", container %s", f.Container)
	}
	fmt.Fprintf(&b, ": %s", f.Reason)
	if f.ExitCode != nil {
		fmt.Fprintf(&b, ", exit code %d", *f.ExitCode)
	}
	if f.Signal != nil {
		fmt.Fprintf(&b, " (signal %d)", *f.Signal)
	}
	if f.Node != "" {
		fmt.Fprintf(&b, ", on node %s", f.Node)
		if f.NodeCaused {
			b.WriteString(" (the node's doing)")
		}
	}
	if f.Message != "" {
		fmt.Fprintf(&b, "; message:\n%s", f.Message)
	}
	return b.String()
}

// SummaryWithin is Summary cut to at most n bytes by dropping the start of the failure's
// message, whose end, the last lines of a log, says most.
func SummaryWithin(f *trainer.PodFailure, n int) string {
	s := Summary(f)
	if over := len(s) - n; over > 0 && f.Message != "" {
		short := *f
		short.Message = tailBytes(f.Message, max(len(f.Message)-over-len("..."), 0))
		if short.Message != "" {
			short.Message = "..." + short.Message
		}
		s = Summary(&short)
	}
	return s
}

// Tail keeps the end of a message: its last MaxMessageLines lines, and of those at most
// MaxMessageBytes bytes, cut at a character's start.
func Tail(message string) string {
	message = strings.TrimRight(message, "\n")
	lines := strings.Split(message, "\n")
	if len(lines) > MaxMessageLines {
		message = strings.Join(lines[len(lines)-MaxMessageLines:], "\n")
	}
	return tailBytes(message, MaxMessageBytes)
}

// cut is the start of s of at most n bytes, cut at a character's start.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tailBytes is the end of s of at most n bytes, cut at a character's start.
func tailBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return s[cut:]
}

// MetricReason is the reason of a failure as a metric's label: one of a few, so that a
// free-form reason never makes a new series.
func MetricReason(reason string) string {
	switch reason {
	case "OOMKilled", "Error", "Evicted", "Preempted", "DeadlineExceeded", "NodeLost", "NodeTainted", "CrashLoopBackOff":
		return reason
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
		return "ImagePullBackOff"
	}
	if nodeReasons[reason] {
		return "NodeLost"
	}
	return "Other"
}
