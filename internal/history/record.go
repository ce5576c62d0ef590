// Package history keeps what happened to each TrainJob after the TrainJob is gone: a record per
// run (a TrainJob's UID; a name used again later is another run), kept in a database, SQLite in
// a file or PostgreSQL.
package history

import (
	"maps"
	"slices"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// Bounds of a record, so that one TrainJob's record stays a few KiB whatever the TrainJob
// reports.
const (
	// MaxProgressPoints is how many points of a run's progress a record keeps: when a record has
	// more, every other point of its older half is dropped, so the series keeps its start, its
	// end and an even spread between.
	MaxProgressPoints = 64
	// MaxRestartCauses is how many restart causes a record keeps, the latest.
	MaxRestartCauses = 16
	// MaxMetrics is how many metrics a progress point or the final metrics keep.
	MaxMetrics = 16
	// maxText bounds a record's messages and each metric's name and value.
	maxText = 1024
	// maxLabels bounds the labels a record keeps, taken in the order of their keys.
	maxLabels = 64
)

// Record is what is kept of one run of a TrainJob.
type Record struct {
	UID       string            `json:"uid"`
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels,omitempty"`
	Creator   string            `json:"creator,omitempty"`

	Runtime   Runtime `json:"runtime"`
	Framework string  `json:"framework,omitempty"`
	Image     string  `json:"image,omitempty"`
	// Nodes is the number of training nodes, the most the run had.
	Nodes int32 `json:"nodes"`
	// ProcsPerNode is the trainer's processes per node as the TrainJob or its runtime says it
	// ("auto", "gpu" or a number); empty where neither says.
	ProcsPerNode string `json:"procsPerNode,omitempty"`
	GPUsPerNode  int64  `json:"gpusPerNode"`
	Queue        string `json:"queue,omitempty"`

	Created time.Time `json:"created"`
	// Admitted is when the run first started: when its JobSet was first not suspended.
	Admitted *time.Time `json:"admitted,omitempty"`
	// FirstRunning is when every pod of its training was first ready.
	FirstRunning *time.Time `json:"firstRunning,omitempty"`
	// Finished is when it became Complete or Failed.
	Finished *time.Time `json:"finished,omitempty"`
	// Deleted is when the TrainJob was deleted; its record stays.
	Deleted *time.Time `json:"deleted,omitempty"`

	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`

	Failure       *trainer.PodFailure `json:"failure,omitempty"`
	Restarts      int32               `json:"restarts,omitempty"`
	RestartCauses []Cause             `json:"restartCauses,omitempty"`
	Stalls        int32               `json:"stalls,omitempty"`

	Progress     []Point          `json:"progress,omitempty"`
	FinalMetrics []trainer.Metric `json:"finalMetrics,omitempty"`

	// RunningSeconds is how long every pod of its training was ready, over all of its runs.
	RunningSeconds float64 `json:"runningSeconds"`
	// RunningSince is when its current running period began; nil while it is not running.
	RunningSince *time.Time `json:"runningSince,omitempty"`
	NodeSeconds  float64    `json:"nodeSeconds"`
	GPUSeconds   float64    `json:"gpuSeconds"`

	// Observed is when the record was last brought in line with its TrainJob.
	Observed time.Time `json:"observed"`
}

// Runtime names the runtime a run was built from.
type Runtime struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Digest string `json:"digest,omitempty"`
}

// Cause is why a run's pods were restarted.
type Cause struct {
	Time     time.Time `json:"time"`
	Reason   string    `json:"reason"`
	Message  string    `json:"message,omitempty"`
	Node     string    `json:"node,omitempty"`
	ExitCode *int32    `json:"exitCode,omitempty"`
}

// Point is one report of a run's progress.
type Point struct {
	Time     time.Time        `json:"time"`
	Percent  *int32           `json:"percent,omitempty"`
	Metrics  []trainer.Metric `json:"metrics,omitempty"`
	Restarts int32            `json:"restarts,omitempty"`
}

// Shape is what a record reads of a run's runtime where the TrainJob does not say it: the
// trainer's image, processes and GPUs per node. The writer reads it from the runtime's snapshot.
type Shape struct {
	Framework    string
	Image        string
	Nodes        int32
	ProcsPerNode string
	GPUsPerNode  int64
}

// Observe brings prev, the record of tj's run so far (nil for its first), in line with tj at
// now, and returns the new record; prev is not changed. What the TrainJob no longer shows (its
// earlier progress, restart causes, running periods) is carried over from prev.
func Observe(prev *Record, tj *trainer.TrainJob, shape Shape, now time.Time) *Record {
	r := &Record{}
	if prev != nil {
		*r = *prev
		r.Labels = nil
		r.RestartCauses = slices.Clone(prev.RestartCauses)
		r.Progress = slices.Clone(prev.Progress)
	}
	r.UID, r.Namespace, r.Name = string(tj.UID), tj.Namespace, tj.Name
	r.Labels = boundLabels(tj.Labels)
	// A TrainJob admitted without the webhook has none. The first creator recorded stays: the
	// webhook keeps the annotation through every update, but a TrainJob being deleted may be
	// changed while the operator's webhook is away.
	if r.Creator == "" {
		r.Creator = tj.Annotations[trainer.CreatorAnnotation]
	}
	r.Created = tj.CreationTimestamp.UTC()
	r.Queue = tj.Labels[trainer.KueueQueueLabel]
	r.Runtime.Kind, r.Runtime.Name = runtimeRef(tj)
	if s := tj.Status.RuntimeSnapshot; s != nil {
		r.Runtime.Digest = s.Digest
	}
	if tj.DeletionTimestamp != nil && r.Deleted == nil {
		r.Deleted = ptrTime(tj.DeletionTimestamp.Time)
	}
	r.observeShape(tj, shape)
	r.observeTimes(tj, now)
	r.observeFailures(tj)
	r.observeProgress(tj)
	r.State = state(tj)
	r.Reason, r.Message = "", ""
	if c := terminal(tj); c != nil {
		r.Reason, r.Message = c.Reason, truncate(c.Message)
	}
	r.NodeSeconds = r.RunningSeconds * float64(r.Nodes)
	r.GPUSeconds = r.NodeSeconds * float64(r.GPUsPerNode)
	r.Observed = now.UTC()
	return r
}

// Vanished is the record of a run whose TrainJob went while no recorder watched (without the
// history's finalizer): deleted at now, as far as the history can tell, unless the record knew
// its deletion already. A running period it saw begin is closed when the history was last
// recording (lastAlive, or the record's own last observation if later): the TrainJob was there
// then, or its deletion would have been seen; the time the history was away is not counted.
func (r *Record) Vanished(now, lastAlive time.Time) *Record {
	v := *r
	if v.Deleted == nil {
		v.Deleted = ptrTime(now)
	}
	if v.RunningSince != nil {
		end := r.Observed
		if lastAlive.After(end) && lastAlive.Before(now) {
			end = lastAlive
		}
		v.RunningSeconds += max(0, end.Sub(*v.RunningSince).Seconds())
		v.RunningSince = nil
	}
	v.NodeSeconds = v.RunningSeconds * float64(v.Nodes)
	v.GPUSeconds = v.NodeSeconds * float64(v.GPUsPerNode)
	v.Observed = now.UTC()
	if !v.Observed.After(r.Observed) {
		v.Observed = r.Observed.Add(time.Millisecond)
	}
	return &v
}

// Ended is when the run ended: its finish, else its TrainJob's deletion; nil while it goes on.
func (r *Record) Ended() *time.Time {
	if r.Finished != nil {
		return r.Finished
	}
	return r.Deleted
}

func (r *Record) observeShape(tj *trainer.TrainJob, shape Shape) {
	r.Framework = shape.Framework
	r.Image, r.ProcsPerNode, r.GPUsPerNode = shape.Image, shape.ProcsPerNode, shape.GPUsPerNode
	nodes := shape.Nodes
	if t := tj.Spec.Trainer; t != nil {
		if t.Image != nil {
			r.Image = *t.Image
		}
		if t.NumNodes != nil {
			nodes = *t.NumNodes
		}
		if t.NumProcPerNode != nil {
			r.ProcsPerNode = t.NumProcPerNode.String()
		}
		if t.ResourcesPerNode != nil {
			r.GPUsPerNode = framework.GPUsOf(t.ResourcesPerNode)
		}
	}
	if tj.Status.Nodes > 0 {
		nodes = tj.Status.Nodes
	}
	r.Nodes = max(r.Nodes, nodes, 1)
}

// observeTimes records the run's first start and first readiness, its finish, and adds each
// running period to RunningSeconds. A running period is counted from status.readyTime to when
// the record sees the run no longer running (its finish where it finished).
func (r *Record) observeTimes(tj *trainer.TrainJob, now time.Time) {
	s := &tj.Status
	if r.Admitted == nil && s.StartTime != nil {
		r.Admitted = ptrTime(s.StartTime.Time)
	}
	if r.FirstRunning == nil && s.ReadyTime != nil {
		r.FirstRunning = ptrTime(s.ReadyTime.Time)
	}
	end := now.UTC()
	if c := terminal(tj); c != nil {
		if r.Finished == nil {
			r.Finished = ptrTime(c.LastTransitionTime.Time)
		}
		end = *r.Finished
	} else if r.Deleted != nil {
		end = *r.Deleted
	}
	running := s.State == trainer.TrainJobRunning && s.ReadyTime != nil && r.Ended() == nil
	if r.RunningSince != nil && (!running || !s.ReadyTime.Time.Equal(*r.RunningSince)) {
		// The period the record saw began has ended: at the run's finish, or when the record
		// sees it ended, or when the next one began where the record missed the end.
		if running {
			end = s.ReadyTime.UTC()
		}
		r.RunningSeconds += max(0, end.Sub(*r.RunningSince).Seconds())
		r.RunningSince = nil
	}
	if r.RunningSince == nil && running {
		r.RunningSince = ptrTime(s.ReadyTime.Time)
	}
	if r.RunningSeconds == 0 && s.ReadyTime != nil {
		// A run the record never saw running: it ran from its last readiness to its finish, or
		// to its deletion when it was deleted running.
		switch {
		case r.Finished != nil:
			r.RunningSeconds = max(0, r.Finished.Sub(s.ReadyTime.Time).Seconds())
		case r.Deleted != nil && s.State == trainer.TrainJobRunning:
			r.RunningSeconds = max(0, r.Deleted.Sub(s.ReadyTime.Time).Seconds())
		}
	}
}

// observeFailures adds the TrainJob's latest failure to the restart causes when the run was
// restarted since.
func (r *Record) observeFailures(tj *trainer.TrainJob) {
	s := &tj.Status
	r.Stalls = max(r.Stalls, s.StallRestarts)
	if f := s.Failure; f != nil {
		r.Failure = f.DeepCopy()
		r.Failure.Message = truncate(f.Message)
	}
	if s.Restarts > r.Restarts {
		r.Restarts = s.Restarts
		if f := s.Failure; f != nil {
			cause := Cause{Time: f.Time.UTC(), Reason: f.Reason, Message: truncate(f.Message), Node: f.Node, ExitCode: f.ExitCode}
			if n := len(r.RestartCauses); n == 0 || !r.RestartCauses[n-1].Time.Equal(cause.Time) {
				r.RestartCauses = append(r.RestartCauses, cause)
			}
			if n := len(r.RestartCauses); n > MaxRestartCauses {
				r.RestartCauses = slices.Delete(r.RestartCauses, 0, n-MaxRestartCauses)
			}
		}
	}
}

// observeProgress appends the trainer's latest report to the progress series when it is new.
func (r *Record) observeProgress(tj *trainer.TrainJob) {
	ts := tj.Status.TrainerStatus
	if ts == nil {
		return
	}
	metrics := boundMetrics(ts.Metrics)
	r.FinalMetrics = metrics
	at := ts.LastUpdatedTime.UTC()
	if n := len(r.Progress); n > 0 && !r.Progress[n-1].Time.Before(at) {
		return
	}
	r.Progress = append(r.Progress, Point{Time: at, Percent: ts.ProgressPercentage, Metrics: metrics, Restarts: tj.Status.Restarts})
	if len(r.Progress) > MaxProgressPoints {
		r.Progress = thin(r.Progress)
	}
}

// thin drops every other point of the older half of a series, keeping its first point.
func thin(points []Point) []Point {
	half := len(points) / 2
	out := make([]Point, 0, len(points))
	for i, p := range points[:half] {
		if i%2 == 0 {
			out = append(out, p)
		}
	}
	return append(out, points[half:]...)
}

// state is the run's state as the TrainJob shows it, the STATE column's word.
func state(tj *trainer.TrainJob) string {
	if tj.Status.State != "" {
		return tj.Status.State
	}
	return trainer.TrainJobPending
}

// terminal is the TrainJob's Complete or Failed condition that holds, or nil.
func terminal(tj *trainer.TrainJob) *metav1.Condition {
	for _, t := range []string{trainer.TrainJobComplete, trainer.TrainJobFailed} {
		if c := apimeta.FindStatusCondition(tj.Status.Conditions, t); c != nil && c.Status == "True" {
			return c
		}
	}
	return nil
}

func runtimeRef(tj *trainer.TrainJob) (kind, name string) {
	kind = "ClusterTrainingRuntime"
	if k := tj.Spec.RuntimeRef.Kind; k != nil && *k != "" {
		kind = *k
	}
	return kind, tj.Spec.RuntimeRef.Name
}

func boundLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(labels))
	out := make(map[string]string, min(len(keys), maxLabels))
	for _, k := range keys[:min(len(keys), maxLabels)] {
		out[k] = labels[k]
	}
	return out
}

func boundMetrics(metrics []trainer.Metric) []trainer.Metric {
	out := make([]trainer.Metric, 0, min(len(metrics), MaxMetrics))
	for _, m := range metrics[:min(len(metrics), MaxMetrics)] {
		out = append(out, trainer.Metric{Name: truncate(m.Name), Value: truncate(m.Value)})
	}
	return out
}

func truncate(s string) string {
	if len(s) <= maxText {
		return s
	}
	return s[:maxText-3] + "..."
}

func ptrTime(t time.Time) *time.Time {
	t = t.UTC()
	return &t
}
