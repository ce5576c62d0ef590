package podfailure

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

var (
	now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	t1  = metav1.NewTime(now.Add(-time.Minute))
	t2  = metav1.NewTime(now.Add(-30 * time.Second))
)

// pod is a pod of rank rank, attempt attempt, on node-1, in phase, with a trainer container
// "node" in state.
func pod(name string, rank, attempt int, phase corev1.PodPhase, state corev1.ContainerState) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"jobset.sigs.k8s.io/replicatedjob-name": "node", RestartAttemptLabel: itoa(attempt)},
			Annotations: map[string]string{completionIndexAnnotation: itoa(rank)},
		},
		Spec: corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{
			Phase:             phase,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "node", State: state}},
		},
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

func terminated(code int32, reason, message string, at metav1.Time) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: message, FinishedAt: at}}
}

func TestRead(t *testing.T) {
	base := func(f trainer.PodFailure) *trainer.PodFailure {
		f.Pod, f.ReplicatedJob, f.Node = "p", "node", "node-1"
		if f.Rank == nil {
			f.Rank = ptr.To[int32](1)
		}
		return &f
	}
	cases := map[string]struct {
		pod  func() corev1.Pod
		want *trainer.PodFailure
	}{
		"an OOM-killed trainer: its exit code, SIGKILL and the last lines of its log": {
			pod: func() corev1.Pod {
				return pod("p", 1, 2, corev1.PodFailed, terminated(137, "OOMKilled", "step 41\nstep 42\n", t1))
			},
			want: base(trainer.PodFailure{Attempt: 2, Container: "node", ExitCode: ptr.To[int32](137), Signal: ptr.To[int32](9),
				Reason: "OOMKilled", Message: "step 41\nstep 42", Time: t1}),
		},
		"a trainer that exits 1: no signal": {
			pod:  func() corev1.Pod { return pod("p", 1, 0, corev1.PodFailed, terminated(1, "Error", "Traceback", t1)) },
			want: base(trainer.PodFailure{Container: "node", ExitCode: ptr.To[int32](1), Reason: "Error", Message: "Traceback", Time: t1}),
		},
		"a pod the kubelet evicted: the node's doing, with the eviction's message": {
			pod: func() corev1.Pod {
				p := pod("p", 1, 0, corev1.PodFailed, terminated(137, "Error", "", t1))
				p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory."
				return p
			},
			want: base(trainer.PodFailure{Container: "node", ExitCode: ptr.To[int32](137), Signal: ptr.To[int32](9), Reason: "Evicted",
				Message: "The node was low on resource: memory.", NodeCaused: true, Time: t1}),
		},
		"a preempted pod: not the node's doing": {
			pod: func() corev1.Pod {
				p := pod("p", 1, 0, corev1.PodFailed, terminated(143, "Error", "", t1))
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
					Reason: "PreemptionByScheduler", Message: "Preempted by a pod of higher priority"}}
				return p
			},
			want: base(trainer.PodFailure{Container: "node", ExitCode: ptr.To[int32](143), Signal: ptr.To[int32](15), Reason: "Preempted",
				Message: "Preempted by a pod of higher priority", Time: t1}),
		},
		"a pod whose node went NoExecute: the node's doing": {
			pod: func() corev1.Pod {
				p := pod("p", 1, 0, corev1.PodFailed, terminated(137, "Error", "", t1))
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"}}
				return p
			},
			want: base(trainer.PodFailure{Container: "node", ExitCode: ptr.To[int32](137), Signal: ptr.To[int32](9), Reason: "NodeTainted",
				NodeCaused: true, Time: t1}),
		},
		"a pod that cannot pull its image never failed, and says why it waits": {
			pod: func() corev1.Pod {
				return pod("p", 1, 0, corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
					Reason: "ImagePullBackOff", Message: `Back-off pulling image "nope"`}})
			},
			want: base(trainer.PodFailure{Container: "node", Reason: "ImagePullBackOff", Message: `Back-off pulling image "nope"`,
				Time: metav1.NewTime(now)}),
		},
		"a pod that is merely creating its containers is no failure": {
			pod: func() corev1.Pod {
				return pod("p", 1, 0, corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})
			},
		},
		"a pod that succeeded is no failure": {
			pod: func() corev1.Pod { return pod("p", 1, 0, corev1.PodSucceeded, terminated(0, "Completed", "", t1)) },
		},
		"an init container that failed before the trainer started": {
			pod: func() corev1.Pod {
				p := pod("p", 0, 0, corev1.PodFailed, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}})
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "wait-for-launcher", State: terminated(2, "Error", "no route", t1)}}
				return p
			},
			want: base(trainer.PodFailure{Rank: ptr.To[int32](0), Container: "wait-for-launcher", ExitCode: ptr.To[int32](2), Reason: "Error",
				Message: "no route", Time: t1}),
		},
		"a pod failed as a whole, with no container that did: its reason alone": {
			pod: func() corev1.Pod {
				p := pod("p", 1, 0, corev1.PodFailed, corev1.ContainerState{})
				p.Status.Reason, p.Status.Message = "NodeLost", "node node-1 which was running pod p is unresponsive"
				return p
			},
			want: base(trainer.PodFailure{Reason: "NodeLost", Message: "node node-1 which was running pod p is unresponsive",
				NodeCaused: true, Time: metav1.NewTime(now)}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := tc.pod()
			if diff := cmp.Diff(tc.want, Read(&p, now)); diff != "" {
				t.Errorf("Read (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFirst(t *testing.T) {
	oom := pod("oom", 3, 1, corev1.PodFailed, terminated(137, "OOMKilled", "", t1))
	// The Job deleted the other pods of the attempt when the first failed: in the same second.
	stopped := pod("stopped", 0, 1, corev1.PodFailed, terminated(137, "Error", "", t1))
	stopped.DeletionTimestamp = &t2
	later := pod("later", 1, 1, corev1.PodFailed, terminated(1, "Error", "", t2))
	earlierAttempt := pod("before", 2, 0, corev1.PodFailed, terminated(1, "Error", "", metav1.NewTime(now.Add(-time.Hour))))
	waiting := pod("waiting", 4, 1, corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}})
	running := pod("running", 5, 1, corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})

	first, others := First([]corev1.Pod{running, later, stopped, earlierAttempt, oom, waiting}, now)
	assert.Equal(t, "oom", first.Pod, "the earliest failure of the latest attempt, before a pod deleted in the same second")
	assert.Equal(t, 2, others, "the other failed pods of attempt 1; a waiting pod is not counted once one failed")

	first, others = First([]corev1.Pod{running, waiting}, now)
	assert.Equal(t, "waiting", first.Pod, "with no failed pod, one that cannot start is the cause")
	assert.Zero(t, others)

	first, _ = First([]corev1.Pod{running}, now)
	assert.Nil(t, first)
}

func TestSupersedes(t *testing.T) {
	f := func(attempt int32, at metav1.Time) *trainer.PodFailure {
		return &trainer.PodFailure{Pod: "p", Attempt: attempt, Time: at}
	}
	assert.True(t, Supersedes(f(0, t1), nil), "the first failure")
	assert.True(t, Supersedes(f(1, t2), f(0, t1)), "a failure of a later attempt")
	assert.False(t, Supersedes(f(0, t2), f(1, t1)), "a failure of an earlier attempt")
	assert.True(t, Supersedes(f(1, t1), f(1, t2)), "an earlier failure of the same attempt")
	assert.False(t, Supersedes(f(1, t2), f(1, t1)), "a later failure of the same attempt")
	assert.False(t, Supersedes(f(1, t1), f(1, t1)), "the same")
	assert.False(t, Supersedes(nil, f(1, t1)))
}

func TestTail(t *testing.T) {
	var lines []string
	for i := range 50 {
		lines = append(lines, "line "+itoa(i%10))
	}
	got := Tail(strings.Join(lines, "\n") + "\n")
	assert.Equal(t, strings.Join(lines[30:], "\n"), got, "the last 20 lines, without the final newline")

	long := strings.Repeat("é", 3000) // 2 bytes each
	got = Tail(long)
	assert.LessOrEqual(t, len(got), MaxMessageBytes)
	assert.True(t, strings.HasSuffix(long, got))
	assert.Equal(t, strings.Repeat("é", MaxMessageBytes/2), got, "cut at a character's start")
}

func TestSummary(t *testing.T) {
	f := &trainer.PodFailure{Pod: "tj-node-0-1-x", ReplicatedJob: "node", Rank: ptr.To[int32](1), Attempt: 2, Container: "node",
		ExitCode: ptr.To[int32](137), Signal: ptr.To[int32](9), Reason: "OOMKilled", Node: "gpu-7", Message: "step 42"}
	assert.Equal(t, "pod tj-node-0-1-x (replicated job node, rank 1, attempt 2), container node: OOMKilled, exit code 137 (signal 9), on node gpu-7; message:\nstep 42",
		Summary(f))

	f.Message = strings.Repeat("x", 3000) + "the end"
	got := SummaryWithin(f, 500)
	assert.LessOrEqual(t, len(got), 500)
	assert.True(t, strings.HasPrefix(got, "pod tj-node-0-1-x (replicated job node, rank 1, attempt 2)"), "the facts are kept")
	assert.True(t, strings.HasSuffix(got, "xxxthe end"), "the end of the log is kept")
	assert.Contains(t, got, "message:\n...x")
}

func TestMetricReason(t *testing.T) {
	for reason, want := range map[string]string{
		"OOMKilled": "OOMKilled", "Error": "Error", "ErrImagePull": "ImagePullBackOff", "Shutdown": "NodeLost",
		"UnexpectedAdmissionError": "NodeLost", "ContainerCannotRun": "Other", "anything a runtime says": "Other",
	} {
		assert.Equal(t, want, MetricReason(reason), reason)
	}
}

func TestReadKeepsEachTextWithinItsField(t *testing.T) {
	p := pod(strings.Repeat("p", 300), 1, 0, corev1.PodFailed, terminated(1, strings.Repeat("r", 300), "", t1))
	p.Status.ContainerStatuses[0].Name = strings.Repeat("c", 100)
	p.Status.Reason = "OutOf" + strings.Repeat("example.com~1gpu", 20)
	f := Read(&p, now)
	assert.Len(t, f.Pod, 253)
	assert.Len(t, f.Container, 63)
	assert.Len(t, f.Reason, 128)
	assert.True(t, strings.HasPrefix(f.Reason, "OutOfexample.com~1gpu"))
}
