package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// TestStallAt is the stall rule: a TrainJob stalls its deadline after the later of its last
// progress and the moment its pods last all became ready, only while its state is Running, and
// only if its trainer reported progress since it last started.
func TestStallAt(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(seconds int) *metav1.Time {
		return ptr.To(metav1.NewTime(created.Add(time.Duration(seconds) * time.Second)))
	}
	running := []metav1.Condition{
		cond(trainer.TrainJobRunning, metav1.ConditionTrue, trainer.TrainJobNodesReadyReason, "ready"),
		cond(trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason, "made"),
	}
	notReady := []metav1.Condition{
		cond(trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobNodesNotReadyReason, "not ready"),
		cond(trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason, "made"),
	}
	suspended := []metav1.Condition{
		cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "suspended"),
		cond(trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobSuspendedReason, "suspended"),
		cond(trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason, "made"),
	}
	runtimeDeadline := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch",
		Spec: &trainer.TrainingRuntimeSpec{StallPolicy: &trainer.StallPolicy{ProgressDeadlineSeconds: 60, Action: trainer.StallActionRestart}}}
	cases := map[string]struct {
		runtime      *trainingruntime.Runtime
		override     *int32
		suspend      bool
		conditions   []metav1.Condition
		startTime    *metav1.Time
		lastProgress *metav1.Time
		readyTime    *metav1.Time
		want         *metav1.Time
		wantField    string
		wantAction   trainer.StallAction
	}{
		"from the last progress": {runtime: runtimeDeadline, conditions: running, lastProgress: at(100), readyTime: at(10),
			want: at(160), wantField: `ClusterTrainingRuntime "torch" stallPolicy.progressDeadlineSeconds`, wantAction: trainer.StallActionRestart},
		"a trainer that never reported never stalls": {runtime: runtimeDeadline, conditions: running, readyTime: at(10),
			wantField: `ClusterTrainingRuntime "torch" stallPolicy.progressDeadlineSeconds`, wantAction: trainer.StallActionRestart},
		"suspended: never": {runtime: runtimeDeadline, suspend: true, conditions: suspended, lastProgress: at(100),
			wantField: `ClusterTrainingRuntime "torch" stallPolicy.progressDeadlineSeconds`, wantAction: trainer.StallActionRestart},
		"a pod not ready: never": {runtime: runtimeDeadline, conditions: notReady, lastProgress: at(100), readyTime: at(10),
			wantField: `ClusterTrainingRuntime "torch" stallPolicy.progressDeadlineSeconds`, wantAction: trainer.StallActionRestart},
		"progress from before the last resume does not count: the clock restarts": {runtime: runtimeDeadline, conditions: running,
			startTime: at(200), lastProgress: at(100), readyTime: at(210),
			wantField: `ClusterTrainingRuntime "torch" stallPolicy.progressDeadlineSeconds`, wantAction: trainer.StallActionRestart},
		"progress of the second the run started counts": {runtime: runtimeDeadline, conditions: running,
			startTime: at(200), lastProgress: at(200), readyTime: at(100), want: at(260),
			wantField: `ClusterTrainingRuntime "torch" stallPolicy.progressDeadlineSeconds`, wantAction: trainer.StallActionRestart},
		"pods ready again after a restart: from then": {runtime: runtimeDeadline, conditions: running, lastProgress: at(100), readyTime: at(300),
			want: at(360), wantField: `ClusterTrainingRuntime "torch" stallPolicy.progressDeadlineSeconds`, wantAction: trainer.StallActionRestart},
		"the TrainJob's deadline overrides the runtime's, whose action stays": {runtime: runtimeDeadline, override: ptr.To[int32](5),
			conditions: running, lastProgress: at(100), want: at(105), wantField: "spec.progressDeadlineSeconds", wantAction: trainer.StallActionRestart},
		"the TrainJob's deadline with a runtime without a stall policy: Fail": {runtime: &trainingruntime.Runtime{Spec: &trainer.TrainingRuntimeSpec{}},
			override: ptr.To[int32](5), conditions: running, lastProgress: at(100), want: at(105),
			wantField: "spec.progressDeadlineSeconds", wantAction: trainer.StallActionFail},
		"the TrainJob's deadline, its runtime unreadable: Fail": {override: ptr.To[int32](5), conditions: running, lastProgress: at(100),
			want: at(105), wantField: "spec.progressDeadlineSeconds", wantAction: trainer.StallActionFail},
		"no deadline at all: never": {runtime: &trainingruntime.Runtime{Spec: &trainer.TrainingRuntimeSpec{}}, conditions: running,
			lastProgress: at(100), wantAction: trainer.StallActionFail},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob("tj", "ns").Suspend(tc.suspend).Obj()
			tj.CreationTimestamp = metav1.NewTime(created)
			tj.Spec.ProgressDeadlineSeconds = tc.override
			tj.Status.Conditions = tc.conditions
			tj.Status.StartTime, tj.Status.LastProgressTime, tj.Status.ReadyTime = tc.startTime, tc.lastProgress, tc.readyTime
			d, _ := progressDeadlineOf(tj, tc.runtime, 0)
			if d.field != tc.wantField || d.action != tc.wantAction {
				t.Errorf("progressDeadlineOf = %q, %q; want %q, %q", d.field, d.action, tc.wantField, tc.wantAction)
			}
			got, ok := stallAt(tj, d, time.Time{})
			switch {
			case tc.want == nil && ok:
				t.Errorf("stallAt = %v; want never", got)
			case tc.want != nil && (!ok || !got.Equal(tc.want.Time)):
				t.Errorf("stallAt = %v, %t; want %v", got, ok, tc.want.Time)
			}
		})
	}
}

// The pods all becoming ready is recorded once per run: a pod that was not ready and is again
// restarts the stall clock, a reconcile of a training that stays Running does not.
func TestSetReadyTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	earlier := ptr.To(metav1.NewTime(now.Add(-time.Hour)))
	running := []metav1.Condition{cond(trainer.TrainJobRunning, metav1.ConditionTrue, trainer.TrainJobNodesReadyReason, "ready")}
	for name, tc := range map[string]struct {
		was  string
		want *metav1.Time
	}{
		"became Running":    {was: trainer.TrainJobCreated, want: ptr.To(metav1.NewTime(now))},
		"was Running":       {was: trainer.TrainJobRunning, want: earlier},
		"became so at once": {was: trainer.TrainJobPending, want: ptr.To(metav1.NewTime(now))},
	} {
		t.Run(name, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
			tj.Status.Conditions, tj.Status.State, tj.Status.ReadyTime = running, tc.was, earlier
			setReadyTime(tj, now)
			if !tj.Status.ReadyTime.Equal(tc.want) {
				t.Errorf("readyTime = %v, want %v", tj.Status.ReadyTime, tc.want)
			}
		})
	}
}

// Under upstream's conditions a stall that ends is told by an event, though no condition written
// says so.
func TestTellStallOver(t *testing.T) {
	stalled := cond(trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason, "stalled")
	restarted := cond(trainer.TrainJobStalled, metav1.ConditionFalse, trainer.TrainJobRestartedReason, "restarted")
	for name, tc := range map[string]struct {
		before, written []metav1.Condition
		want            []string
	}{
		"the stall ended":  {before: []metav1.Condition{stalled}, want: []string{"Normal Restarted restarted"}},
		"still stalled":    {before: []metav1.Condition{stalled}, written: []metav1.Condition{stalled}},
		"it never stalled": {},
	} {
		t.Run(name, func(t *testing.T) {
			recorder := events.NewFakeRecorder(10)
			tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
			tj.Status.Conditions = tc.written
			all := []metav1.Condition{restarted}
			if len(tc.written) > 0 {
				all = tc.written
			}
			tellStallOver(recorder, tj, tc.before, all)
			close(recorder.Events)
			var got []string
			for e := range recorder.Events {
				got = append(got, e)
			}
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Errorf("events = %v, want %v", got, tc.want)
			}
		})
	}
}

// A deadline shorter than twice the interval the progress endpoint writes at is counted as that:
// a trainer that reports all along may see its report written only that often. A stall is never
// counted from before the manager started, when no endpoint heard the trainer.
func TestAStallIsCountedOverTheProgressWriteIntervalAndFromTheManagersStart(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tj := utiltesting.MakeTrainJob("tj", "ns").ProgressDeadlineSeconds(5).Obj()
	tj.Status.State = trainer.TrainJobRunning
	tj.Status.StartTime = ptr.To(metav1.NewTime(now.Add(-time.Hour)))
	tj.Status.LastProgressTime = ptr.To(metav1.NewTime(now))

	d, ok := progressDeadlineOf(tj, nil, 60*time.Second)
	require.True(t, ok)
	at, ok := stallAt(tj, d, time.Time{})
	require.True(t, ok)
	assert.Equal(t, now.Add(60*time.Second), at, "twice the write interval")
	assert.Contains(t, d.message(tj), "spec.progressDeadlineSeconds (5s, counted as 1m0s: twice the interval the operator writes progress at)")

	d, _ = progressDeadlineOf(tj, nil, 0)
	at, _ = stallAt(tj, d, now.Add(time.Minute))
	assert.Equal(t, now.Add(time.Minute+5*time.Second), at, "from the manager's start")
}
