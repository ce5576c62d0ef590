package controller

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

func cond(condType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: message, ObservedGeneration: 3}
}

// replicatedJob is a replicated job of a built JobSet: its name, replicas and ancestor step.
func replicatedJob(name, ancestor string, replicas int32) jobsetv1alpha2.ReplicatedJob {
	rj := jobsetv1alpha2.ReplicatedJob{Name: name, Replicas: replicas}
	if ancestor != "" {
		rj.Template.Labels = map[string]string{trainer.AncestorStepLabel: ancestor}
	}
	return rj
}

var ignoreTime = cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")

// statusNow is the time TestStatus runs at: a resumed TrainJob's start time.
var statusNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestStatus(t *testing.T) {
	created := cond(trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason, "JobSet created")
	running := cond(trainer.TrainJobRunning, metav1.ConditionTrue, trainer.TrainJobNodesReadyReason, "All 2 pods of the training are ready")
	cases := map[string]struct {
		suspend            bool
		jobSetWasSuspended bool
		before             []metav1.Condition
		replicatedJobs     []jobsetv1alpha2.ReplicatedJob
		jobSet             *jobsetv1alpha2.JobSetStatus
		want               trainer.TrainJobStatus
	}{
		"a running TrainJob that was never suspended has no Suspended condition": {
			before: []metav1.Condition{created},
			jobSet: &jobsetv1alpha2.JobSetStatus{},
			want:   trainer.TrainJobStatus{Conditions: []metav1.Condition{created}},
		},
		"a suspended TrainJob is Suspended, ahead of Created": {
			suspend: true,
			before:  []metav1.Condition{created},
			want: trainer.TrainJobStatus{Conditions: []metav1.Condition{
				cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "TrainJob is suspended"),
				created,
			}},
		},
		"a suspended TrainJob that runs again is Resumed": {
			before: []metav1.Condition{
				cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "TrainJob is suspended"),
				created,
			},
			want: trainer.TrainJobStatus{Conditions: []metav1.Condition{
				cond(trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason, "TrainJob is resumed"),
				created,
			}, StartTime: ptr.To(metav1.NewTime(statusNow))},
		},
		"a TrainJob whose suspended JobSet runs again is Resumed, though its suspension was never written": {
			jobSetWasSuspended: true,
			before:             []metav1.Condition{created},
			want: trainer.TrainJobStatus{Conditions: []metav1.Condition{
				cond(trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason, "TrainJob is resumed"),
				created,
			}, StartTime: ptr.To(metav1.NewTime(statusNow))},
		},
		"a TrainJob created suspended stays Suspended while its JobSet is": {
			suspend:            true,
			jobSetWasSuspended: true,
			want: trainer.TrainJobStatus{Conditions: []metav1.Condition{
				cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "TrainJob is suspended"),
			}},
		},
		"replicated job counts are mirrored": {
			before: []metav1.Condition{created},
			jobSet: &jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{
				{Name: "initializer", Succeeded: 1},
				{Name: "node", Ready: 2, Active: 3, Failed: 1, Suspended: 4},
			}},
			want: trainer.TrainJobStatus{
				Conditions: []metav1.Condition{created},
				JobsStatus: []trainer.JobStatus{
					{Name: "initializer", Succeeded: 1},
					{Name: "node", Ready: 2, Active: 3, Failed: 1, Suspended: 4},
				},
			},
		},
		"a completed JobSet completes the TrainJob with its reason and message, first in the list": {
			before: []metav1.Condition{created},
			jobSet: &jobsetv1alpha2.JobSetStatus{
				TerminalState: "Completed",
				Conditions: []metav1.Condition{
					{Type: "StartupPolicyCompleted", Status: metav1.ConditionTrue, Reason: "Started"},
					{Type: "Completed", Status: metav1.ConditionTrue, Reason: "AllJobsCompleted", Message: "jobset completed successfully"},
				},
			},
			want: trainer.TrainJobStatus{Conditions: []metav1.Condition{
				cond(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully"),
				created,
			}},
		},
		"a failed JobSet fails the TrainJob with its reason and message": {
			before: []metav1.Condition{created},
			jobSet: &jobsetv1alpha2.JobSetStatus{
				TerminalState: "Failed",
				Conditions: []metav1.Condition{
					{Type: "Failed", Status: metav1.ConditionTrue, Reason: "ReachedMaxRestarts", Message: "jobset failed due to reaching max number of restarts"},
				},
			},
			want: trainer.TrainJobStatus{Conditions: []metav1.Condition{
				cond(trainer.TrainJobFailed, metav1.ConditionTrue, "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts"),
				created,
			}},
		},
		"a terminal state without its condition still finishes the TrainJob": {
			before: []metav1.Condition{created},
			jobSet: &jobsetv1alpha2.JobSetStatus{TerminalState: "Failed"},
			want: trainer.TrainJobStatus{Conditions: []metav1.Condition{
				cond(trainer.TrainJobFailed, metav1.ConditionTrue, "JobSetFailed", "JobSet is Failed"),
				created,
			}},
		},
		"a TrainJob whose training Jobs all have their pods ready is Running; initializers do not count": {
			before:         []metav1.Condition{created},
			replicatedJobs: []jobsetv1alpha2.ReplicatedJob{replicatedJob("dataset", trainer.AncestorDatasetInitializer, 1), replicatedJob("node", trainer.AncestorTrainer, 2)},
			jobSet: &jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{
				{Name: "dataset", Succeeded: 1}, {Name: "node", Ready: 2, Active: 2},
			}},
			want: trainer.TrainJobStatus{
				Conditions: []metav1.Condition{running, created},
				JobsStatus: []trainer.JobStatus{{Name: "dataset", Succeeded: 1}, {Name: "node", Ready: 2, Active: 2}},
				Ready:      "2/2",
			},
		},
		"a Job's pods count once all of them are ready, as upstream's runtimes run all nodes in one Job": {
			before: []metav1.Condition{created},
			replicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Replicas: 1, Template: batchv1.JobTemplateSpec{
				Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](3), Completions: ptr.To[int32](2)},
			}}},
			jobSet: &jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Ready: 1, Active: 1}}},
			want: trainer.TrainJobStatus{
				Conditions: []metav1.Condition{running, created},
				JobsStatus: []trainer.JobStatus{{Name: "node", Ready: 1, Active: 1}},
				Ready:      "2/2",
			},
		},
		"a TrainJob still starting has no Running condition; MPI's launcher counts": {
			before:         []metav1.Condition{created},
			replicatedJobs: []jobsetv1alpha2.ReplicatedJob{replicatedJob("launcher", "", 1), replicatedJob("node", trainer.AncestorTrainer, 2)},
			jobSet: &jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{
				{Name: "launcher", Ready: 1, Active: 1}, {Name: "node", Ready: 1, Active: 2},
			}},
			want: trainer.TrainJobStatus{
				Conditions: []metav1.Condition{created},
				JobsStatus: []trainer.JobStatus{{Name: "launcher", Ready: 1, Active: 1}, {Name: "node", Ready: 1, Active: 2}},
				Ready:      "2/3",
			},
		},
		"a Running TrainJob with a pod no longer ready is not Running": {
			before:         []metav1.Condition{running, created},
			replicatedJobs: []jobsetv1alpha2.ReplicatedJob{replicatedJob("node", trainer.AncestorTrainer, 2)},
			jobSet: &jobsetv1alpha2.JobSetStatus{ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{
				{Name: "node", Ready: 1, Active: 2},
			}},
			want: trainer.TrainJobStatus{
				Conditions: []metav1.Condition{
					cond(trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobNodesNotReadyReason, "A pod of the training is not ready"),
					created,
				},
				JobsStatus: []trainer.JobStatus{{Name: "node", Ready: 1, Active: 2}},
				Ready:      "1/2",
			},
		},
		"a Running TrainJob that is suspended is not Running": {
			suspend:        true,
			before:         []metav1.Condition{running, created},
			replicatedJobs: []jobsetv1alpha2.ReplicatedJob{replicatedJob("node", trainer.AncestorTrainer, 2)},
			jobSet:         &jobsetv1alpha2.JobSetStatus{},
			want: trainer.TrainJobStatus{
				Conditions: []metav1.Condition{
					cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "TrainJob is suspended"),
					cond(trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobSuspendedReason, "TrainJob is suspended"),
					created,
				},
				Ready: "0/2",
			},
		},
		"a Running TrainJob that completes is no longer Running": {
			before:         []metav1.Condition{running, created},
			replicatedJobs: []jobsetv1alpha2.ReplicatedJob{replicatedJob("node", trainer.AncestorTrainer, 2)},
			jobSet: &jobsetv1alpha2.JobSetStatus{
				TerminalState:        "Completed",
				ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Succeeded: 2}},
			},
			want: trainer.TrainJobStatus{
				Conditions: []metav1.Condition{
					cond(trainer.TrainJobComplete, metav1.ConditionTrue, "JobSetCompleted", "JobSet is Completed"),
					cond(trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobFinishedReason, "TrainJob is finished"),
					created,
				},
				JobsStatus: []trainer.JobStatus{{Name: "node", Succeeded: 2}},
				Ready:      "0/2",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob("tj", "ns").Suspend(tc.suspend).Obj()
			tj.Generation = 3
			tj.Status.Conditions = tc.before
			setSuspended(tj, tc.jobSetWasSuspended, statusNow)
			if tc.jobSet != nil {
				// The JobSet as the cache has it: its size in an annotation, its status.
				built := &jobsetv1alpha2.JobSet{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: tc.replicatedJobs}}
				setJobSetStatus(tj, &jobsetv1alpha2.JobSet{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{framework.TrainingPodsAnnotation: framework.TrainingPods(built)}},
					Status:     *tc.jobSet,
				})
			}
			// A completed TrainJob's completionTime is its Complete condition's time, as a Job's.
			if complete := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobComplete); complete != nil && complete.Status == metav1.ConditionTrue {
				assert.Equal(t, &complete.LastTransitionTime, tj.Status.CompletionTime)
				tj.Status.CompletionTime = nil
			} else {
				assert.Nil(t, tj.Status.CompletionTime, "set only when the TrainJob completes")
			}
			if diff := cmp.Diff(tc.want, tj.Status, ignoreTime); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetConditionTruncatesLongMessages(t *testing.T) {
	tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
	setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason, strings.Repeat("x", 40000))
	msg := tj.Status.Conditions[0].Message
	if len(msg) != maxMessageLength || !strings.HasSuffix(msg, "...") {
		t.Errorf("message of %d bytes ending %q, want %d bytes ending in ...", len(msg), msg[len(msg)-5:], maxMessageLength)
	}
}

func TestSetConditionNeverCutsACharacterInTwo(t *testing.T) {
	tj := &trainer.TrainJob{}
	setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, "R", strings.Repeat("é", maxMessageLength))
	msg := tj.Status.Conditions[0].Message
	if !utf8.ValidString(msg) || !strings.HasSuffix(msg, "é...") || len(msg) > maxMessageLength {
		t.Errorf("message of %d bytes, valid UTF-8 %t, ending %q", len(msg), utf8.ValidString(msg), msg[len(msg)-6:])
	}
}

func TestRecordTransitions(t *testing.T) {
	buildFailed := cond(trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason, "no trainer job")
	created := cond(trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason, "JobSet created")
	cases := map[string]struct {
		before, after []metav1.Condition
		want          []string
	}{
		"creation is a normal event": {
			after: []metav1.Condition{created},
			want:  []string{"Normal JobsCreated JobSet created"},
		},
		"a build failure is a warning": {
			after: []metav1.Condition{buildFailed},
			want:  []string{"Warning JobsBuildFailed no trainer job"},
		},
		"an unchanged condition is not repeated": {
			before: []metav1.Condition{created},
			after:  []metav1.Condition{created},
		},
		"a build failure with a new message is reported again": {
			before: []metav1.Condition{buildFailed},
			after:  []metav1.Condition{cond(trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason, "unknown target job")},
			want:   []string{"Warning JobsBuildFailed unknown target job"},
		},
		"completion is normal and failure a warning": {
			before: []metav1.Condition{created},
			after: []metav1.Condition{
				cond(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "done"),
				cond(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", "broken"),
				created,
			},
			want: []string{"Normal AllJobsCompleted done", "Warning FailedJobs broken"},
		},
		"a stall is a warning": {
			before: []metav1.Condition{created},
			after: []metav1.Condition{created,
				cond(trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason, "no progress")},
			want: []string{"Warning ProgressDeadlineExceeded no progress"},
		},
		"the end of a stall is a normal event": {
			before: []metav1.Condition{cond(trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason, "no progress")},
			after:  []metav1.Condition{cond(trainer.TrainJobStalled, metav1.ConditionFalse, trainer.TrainJobRestartedReason, "restarted")},
			want:   []string{"Normal Restarted restarted"},
		},
		"suspension and resumption are normal events": {
			before: []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "suspended")},
			after:  []metav1.Condition{cond(trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason, "resumed")},
			want:   []string{"Normal Resumed resumed"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			recorder := events.NewFakeRecorder(10)
			tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
			tj.Status.Conditions = tc.after
			recordTransitions(recorder, tj, tc.before)
			close(recorder.Events)
			var got []string
			for e := range recorder.Events {
				got = append(got, e)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTimeLeft(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := created.Add(50 * time.Second)
	resumed := func(at time.Time) metav1.Condition {
		return metav1.Condition{Type: trainer.TrainJobSuspended, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(at)}
	}
	cases := map[string]struct {
		deadline   *int64
		suspend    bool
		conditions []metav1.Condition
		startTime  *time.Time
		want       time.Duration
		wantOK     bool
	}{
		"resumed: from its start time": {deadline: ptr.To[int64](30), conditions: []metav1.Condition{resumed(created)},
			startTime: ptr.To(now.Add(-10 * time.Second)), want: 20 * time.Second, wantOK: true},
		"resumed, under upstream's conditions, which keep no Suspended condition: from its start time": {deadline: ptr.To[int64](30),
			startTime: ptr.To(now.Add(-10 * time.Second)), want: 20 * time.Second, wantOK: true},
		"no deadline":                     {},
		"suspended: the clock is stopped": {deadline: ptr.To[int64](60), suspend: true},
		"never suspended: from creation":  {deadline: ptr.To[int64](60), want: 10 * time.Second, wantOK: true},
		"past the deadline: negative":     {deadline: ptr.To[int64](30), want: -20 * time.Second, wantOK: true},
		"resumed by an operator that kept no start time: from the resume": {deadline: ptr.To[int64](30), conditions: []metav1.Condition{resumed(now.Add(-5 * time.Second))}, want: 25 * time.Second, wantOK: true},
		"resuming now: the clock restarts":                                {deadline: ptr.To[int64](30), conditions: []metav1.Condition{{Type: trainer.TrainJobSuspended, Status: metav1.ConditionTrue}}, want: 30 * time.Second, wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob("tj", "ns").Suspend(tc.suspend).Obj()
			tj.CreationTimestamp = metav1.NewTime(created)
			tj.Spec.ActiveDeadlineSeconds = tc.deadline
			tj.Status.Conditions = tc.conditions
			if tc.startTime != nil {
				tj.Status.StartTime = ptr.To(metav1.NewTime(*tc.startTime))
			}
			left, ok := timeLeft(tj, now)
			if left != tc.want || ok != tc.wantOK {
				t.Errorf("timeLeft = %v, %t; want %v, %t", left, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// settle writes status.state whichever conditions the manager writes, and under upstream's
// cuts what upstream Kubeflow Trainer would not write: its SDK sees a TrainJob Running only
// while it has no condition.
func TestSettle(t *testing.T) {
	created := cond(trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason, "JobSet created")
	created.ObservedGeneration = 3
	running := cond(trainer.TrainJobRunning, metav1.ConditionTrue, trainer.TrainJobNodesReadyReason, "ready")
	suspended := cond(trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobSuspendedReason, "suspended")
	resumed := cond(trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason, "resumed")
	complete := cond(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully")
	finished := cond(trainer.TrainJobRunning, metav1.ConditionFalse, trainer.TrainJobFinishedReason, "finished")
	notOwned := cond(trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobObjectNotOwnedReason, "someone else's")
	stalled := cond(trainer.TrainJobStalled, metav1.ConditionTrue, trainer.TrainJobProgressDeadlineExceededReason, "stalled")
	restarted := cond(trainer.TrainJobStalled, metav1.ConditionFalse, trainer.TrainJobRestartedReason, "restarted")
	cases := map[string]struct {
		set        ConditionSet
		was        string
		conditions []metav1.Condition
		want       []metav1.Condition
		wantState  string
		wantReason string
	}{
		"upstream: a JobSet made says nothing": {set: UpstreamConditions, conditions: []metav1.Condition{created},
			wantState: trainer.TrainJobCreated, wantReason: trainer.TrainJobJobsCreatedReason},
		"upstream: a training that runs says nothing": {set: UpstreamConditions, conditions: []metav1.Condition{running, created},
			wantState: trainer.TrainJobRunning, wantReason: trainer.TrainJobNodesReadyReason},
		"upstream: a resumed TrainJob says nothing (kubeflow/sdk#803)": {set: UpstreamConditions, was: trainer.TrainJobSuspended,
			conditions: []metav1.Condition{resumed, created}, wantState: trainer.TrainJobCreated, wantReason: trainer.TrainJobJobsCreatedReason},
		"upstream: a suspended TrainJob says so": {set: UpstreamConditions, conditions: []metav1.Condition{suspended, created},
			want: []metav1.Condition{suspended}, wantState: trainer.TrainJobSuspended, wantReason: trainer.TrainJobSuspendedReason},
		"upstream: a finished TrainJob says only so": {set: UpstreamConditions, was: trainer.TrainJobRunning,
			conditions: []metav1.Condition{complete, resumed, finished, created}, want: []metav1.Condition{complete},
			wantState: trainer.TrainJobComplete, wantReason: "AllJobsCompleted"},
		"upstream: a JobSet that cannot be made says why": {set: UpstreamConditions, was: trainer.TrainJobRunning,
			conditions: []metav1.Condition{notOwned}, want: []metav1.Condition{notOwned}, wantState: trainer.TrainJobPending},
		"upstream: a reconcile that returned early keeps the state": {set: UpstreamConditions, was: trainer.TrainJobRunning,
			wantState: trainer.TrainJobRunning},
		"all: every condition stays": {set: AllConditions, conditions: []metav1.Condition{resumed, running, created},
			want: []metav1.Condition{resumed, running, created}, wantState: trainer.TrainJobRunning, wantReason: trainer.TrainJobNodesReadyReason},
		"upstream: a stalled TrainJob says so, and is still Running": {set: UpstreamConditions, was: trainer.TrainJobRunning,
			conditions: []metav1.Condition{running, created, stalled}, want: []metav1.Condition{stalled},
			wantState: trainer.TrainJobRunning, wantReason: trainer.TrainJobNodesReadyReason},
		"upstream: Stalled is no state: a reconcile that returned early keeps the state": {set: UpstreamConditions, was: trainer.TrainJobRunning,
			conditions: []metav1.Condition{stalled}, want: []metav1.Condition{stalled}, wantState: trainer.TrainJobRunning},
		"upstream: a stall that is over says nothing": {set: UpstreamConditions, was: trainer.TrainJobRunning,
			conditions: []metav1.Condition{created, restarted}, wantState: trainer.TrainJobCreated, wantReason: trainer.TrainJobJobsCreatedReason},
		"all: a stall that is over stays, False": {set: AllConditions, conditions: []metav1.Condition{running, created, restarted},
			want: []metav1.Condition{running, created, restarted}, wantState: trainer.TrainJobRunning, wantReason: trainer.TrainJobNodesReadyReason},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
			tj.Status.Conditions = slices.Clone(tc.conditions)
			reason, all := settle(tj, &trainer.TrainJobStatus{State: tc.was}, tc.set)
			if diff := cmp.Diff(tc.want, tj.Status.Conditions); diff != "" {
				t.Errorf("conditions written (-want +got):\n%s", diff)
			}
			assert.Equal(t, tc.conditions, all, "the conditions set in memory")
			assert.Equal(t, tc.wantState, tj.Status.State)
			assert.Equal(t, tc.wantReason, reason)
			if slices.Contains(tc.conditions, created) {
				assert.Equal(t, int64(3), tj.Status.ObservedGeneration, "the generation of the JobSet made")
			}
		})
	}
}

// Under upstream's conditions, a change of state that no written condition tells still has its
// event.
func TestTellState(t *testing.T) {
	all := []metav1.Condition{
		cond(trainer.TrainJobSuspended, metav1.ConditionFalse, trainer.TrainJobResumedReason, "TrainJob is resumed"),
		cond(trainer.TrainJobRunning, metav1.ConditionTrue, trainer.TrainJobNodesReadyReason, "All 2 pods of the training are ready"),
		cond(trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason, "JobSet made"),
	}
	cases := map[string]struct {
		from, to string
		want     []string
	}{
		"made":              {trainer.TrainJobPending, trainer.TrainJobCreated, []string{"Normal JobsCreated JobSet made"}},
		"running":           {trainer.TrainJobCreated, trainer.TrainJobRunning, []string{"Normal NodesReady All 2 pods of the training are ready"}},
		"no longer running": {trainer.TrainJobRunning, trainer.TrainJobCreated, []string{"Normal NodesNotReady A pod of the training is not ready"}},
		"resumed":           {trainer.TrainJobSuspended, trainer.TrainJobCreated, []string{"Normal Resumed TrainJob is resumed"}},
		"resumed and running at once": {trainer.TrainJobSuspended, trainer.TrainJobRunning,
			[]string{"Normal Resumed TrainJob is resumed", "Normal NodesReady All 2 pods of the training are ready"}},
		"made and running at once": {trainer.TrainJobPending, trainer.TrainJobRunning,
			[]string{"Normal JobsCreated JobSet made", "Normal NodesReady All 2 pods of the training are ready"}},
		"no change":                   {trainer.TrainJobRunning, trainer.TrainJobRunning, nil},
		"told by a condition written": {trainer.TrainJobRunning, trainer.TrainJobComplete, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			recorder := events.NewFakeRecorder(10)
			tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
			tj.Status.State = tc.to
			tellState(recorder, tj, tc.from, all)
			close(recorder.Events)
			var got []string
			for e := range recorder.Events {
				got = append(got, e)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
