package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

func trainJob() *trainer.TrainJob {
	return &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{
			Name: "bert", Namespace: "team-a", UID: "u1", CreationTimestamp: metav1.NewTime(t0),
			Labels:      map[string]string{trainer.KueueQueueLabel: "gpus", "team": "nlp"},
			Annotations: map[string]string{trainer.CreatorAnnotation: "alice@example.com"},
		},
		Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: "torch-distributed"}},
	}
}

func at(minutes int) time.Time { return t0.Add(time.Duration(minutes) * time.Minute) }

func mt(minutes int) *metav1.Time { return ptr.To(metav1.NewTime(at(minutes))) }

func finish(tj *trainer.TrainJob, condition string, minutes int) {
	tj.Status.State = condition
	tj.Status.Conditions = append(tj.Status.Conditions, metav1.Condition{
		Type: condition, Status: metav1.ConditionTrue, Reason: "Done", Message: "it ended", LastTransitionTime: *mt(minutes),
	})
}

func TestObserve(t *testing.T) {
	shape := Shape{Framework: "torch", Image: "runtime-image", Nodes: 1, ProcsPerNode: "auto", GPUsPerNode: 1}

	t.Run("what the TrainJob says wins over its runtime's shape", func(t *testing.T) {
		tj := trainJob()
		tj.Spec.Trainer = &trainer.Trainer{
			Image: ptr.To("mine"), NumNodes: ptr.To[int32](4), NumProcPerNode: ptr.To(intstr.FromInt32(8)),
			ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
		}
		tj.Status.RuntimeSnapshot = &trainer.RuntimeSnapshot{Digest: "sha256:abc"}
		r := Observe(nil, tj, shape, at(1))
		require.Equal(t, Record{
			UID: "u1", Namespace: "team-a", Name: "bert", Labels: tj.Labels, Creator: "alice@example.com",
			Runtime:   Runtime{Kind: "ClusterTrainingRuntime", Name: "torch-distributed", Digest: "sha256:abc"},
			Framework: "torch", Image: "mine", Nodes: 4, ProcsPerNode: "8", GPUsPerNode: 8, Queue: "gpus",
			Created: t0, State: trainer.TrainJobPending, Observed: at(1),
		}, *r)
		require.Equal(t, "runtime-image", Observe(nil, trainJob(), shape, at(1)).Image)
	})

	t.Run("a run followed from queued to complete counts the time it ran", func(t *testing.T) {
		tj := trainJob()
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2)}
		tj.Status.State = trainer.TrainJobSuspended
		r := Observe(nil, tj, shape, at(1))
		require.Nil(t, r.Admitted)

		tj.Status.State, tj.Status.StartTime = trainer.TrainJobCreated, mt(5)
		r = Observe(r, tj, shape, at(6))
		tj.Status.State, tj.Status.ReadyTime = trainer.TrainJobRunning, mt(10)
		r = Observe(r, tj, shape, at(11))
		require.Equal(t, at(10), *r.RunningSince)

		// A pod fails and JobSet restarts them all: the run is not running for a while.
		tj.Status.State, tj.Status.Restarts = trainer.TrainJobCreated, 1
		tj.Status.Failure = &trainer.PodFailure{Pod: "p", Reason: "Error", ExitCode: ptr.To[int32](137), Node: "n1", Time: *mt(20)}
		r = Observe(r, tj, shape, at(21))
		require.Nil(t, r.RunningSince)
		require.InDelta(t, 11*60, r.RunningSeconds, 0.001, "ran from 10 to 21, when the record saw it stop")
		require.Equal(t, []Cause{{Time: at(20), Reason: "Error", Node: "n1", ExitCode: ptr.To[int32](137)}}, r.RestartCauses)

		tj.Status.State, tj.Status.ReadyTime = trainer.TrainJobRunning, mt(25)
		r = Observe(r, tj, shape, at(26))
		finish(tj, trainer.TrainJobComplete, 85)
		r = Observe(r, tj, shape, at(86))
		require.Equal(t, at(5), *r.Admitted)
		require.Equal(t, at(10), *r.FirstRunning)
		require.Equal(t, at(85), *r.Finished)
		require.Nil(t, r.RunningSince)
		require.InDelta(t, (11+60)*60, r.RunningSeconds, 0.001)
		require.InDelta(t, r.RunningSeconds*2, r.NodeSeconds, 0.001)
		require.InDelta(t, r.RunningSeconds*2*1, r.GPUSeconds, 0.001)
		require.Equal(t, trainer.TrainJobComplete, r.State)
		require.Equal(t, "Done", r.Reason)
		require.Equal(t, at(85), *r.Ended())

		again := Observe(r, tj, shape, at(200))
		require.Equal(t, r.RunningSeconds, again.RunningSeconds, "an ended run's record no longer changes")
	})

	t.Run("a run first seen finished ran from its last readiness", func(t *testing.T) {
		tj := trainJob()
		tj.Status.StartTime, tj.Status.ReadyTime = mt(1), mt(2)
		finish(tj, trainer.TrainJobFailed, 32)
		r := Observe(nil, tj, shape, at(500))
		require.InDelta(t, 30*60, r.RunningSeconds, 0.001)
		require.Equal(t, trainer.TrainJobFailed, r.State)
	})

	t.Run("a running TrainJob deleted stops counting at its deletion", func(t *testing.T) {
		tj := trainJob()
		tj.Status.State, tj.Status.ReadyTime = trainer.TrainJobRunning, mt(0)
		r := Observe(nil, tj, shape, at(1))
		tj.DeletionTimestamp = mt(10)
		r = Observe(r, tj, shape, at(30))
		require.Equal(t, at(10), *r.Deleted)
		require.Equal(t, at(10), *r.Ended())
		require.Nil(t, r.RunningSince)
		require.InDelta(t, 10*60, r.RunningSeconds, 0.001)
	})

	t.Run("progress is a bounded series that keeps its start and its end", func(t *testing.T) {
		tj := trainJob()
		var r *Record
		for i := range 1000 {
			tj.Status.TrainerStatus = &trainer.TrainerStatus{
				ProgressPercentage: ptr.To(int32(i / 10)), LastUpdatedTime: metav1.NewTime(at(i)),
				Metrics: []trainer.Metric{{Name: "loss", Value: fmt.Sprint(1000 - i)}},
			}
			r = Observe(r, tj, shape, at(i))
			r = Observe(r, tj, shape, at(i)) // the same report seen twice is one point
		}
		require.LessOrEqual(t, len(r.Progress), MaxProgressPoints)
		require.Greater(t, len(r.Progress), MaxProgressPoints/2)
		require.Equal(t, at(0), r.Progress[0].Time)
		require.Equal(t, at(999), r.Progress[len(r.Progress)-1].Time)
		for i := 1; i < len(r.Progress); i++ {
			require.True(t, r.Progress[i-1].Time.Before(r.Progress[i].Time), "in order")
		}
		require.Equal(t, []trainer.Metric{{Name: "loss", Value: "1"}}, r.FinalMetrics)
	})

	t.Run("what a TrainJob reports is bounded", func(t *testing.T) {
		tj := trainJob()
		for i := range 100 {
			tj.Labels[fmt.Sprint("l", i)] = "v"
		}
		var metrics []trainer.Metric
		for i := range 100 {
			metrics = append(metrics, trainer.Metric{Name: fmt.Sprint("m", i), Value: strings.Repeat("9", 5000)})
		}
		tj.Status.TrainerStatus = &trainer.TrainerStatus{Metrics: metrics, LastUpdatedTime: metav1.NewTime(at(1))}
		for i := range 40 {
			tj.Status.Restarts = int32(i + 1)
			tj.Status.Failure = &trainer.PodFailure{Reason: "Error", Message: strings.Repeat("m", 10000), Time: *mt(i)}
			finishLater := Observe(nil, tj, shape, at(i))
			require.LessOrEqual(t, len(finishLater.Failure.Message), maxText)
		}
		var r *Record
		for i := range 40 {
			tj.Status.Restarts = int32(i + 1)
			tj.Status.Failure = &trainer.PodFailure{Reason: "Error", Time: *mt(i)}
			r = Observe(r, tj, shape, at(i))
		}
		require.Len(t, r.Labels, maxLabels)
		require.Len(t, r.FinalMetrics, MaxMetrics)
		require.LessOrEqual(t, len(r.FinalMetrics[0].Value), maxText)
		require.Len(t, r.RestartCauses, MaxRestartCauses)
		require.Equal(t, at(39), r.RestartCauses[MaxRestartCauses-1].Time, "the latest causes are kept")
		require.EqualValues(t, 40, r.Restarts)
	})

	t.Run("a run first seen as it is deleted running ran from its readiness to its deletion", func(t *testing.T) {
		tj := trainJob()
		tj.Status.State, tj.Status.ReadyTime = trainer.TrainJobRunning, mt(10)
		tj.DeletionTimestamp = mt(40)
		r := Observe(nil, tj, shape, at(41))
		require.InDelta(t, 30*60, r.RunningSeconds, 0.001)
		require.InDelta(t, 30*60, r.GPUSeconds, 0.001, "one node of one GPU")
	})

	t.Run("the creator is the annotation the webhook wrote, and nothing else", func(t *testing.T) {
		tj := trainJob()
		tj.Labels["creator"] = "mallory"
		delete(tj.Annotations, trainer.CreatorAnnotation)
		require.Empty(t, Observe(nil, tj, shape, at(0)).Creator)

		// Once recorded, it stays: an annotation changed later (while the webhook is away) is not taken.
		first := Observe(nil, trainJob(), shape, at(0))
		changed := trainJob()
		changed.Annotations[trainer.CreatorAnnotation] = "mallory"
		require.Equal(t, "alice@example.com", Observe(first, changed, shape, at(1)).Creator)
	})
}
