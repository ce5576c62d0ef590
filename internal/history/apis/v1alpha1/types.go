package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrainJobRun is what the history keeps of one run of a TrainJob: one per TrainJob's UID, kept
// after the TrainJob is gone. Its name is the TrainJob's and the first eight characters of its
// UID ("bert.1f0c9a2e"), its uid the TrainJob's, its labels and creation time the TrainJob's.
// Anyone who may get or list TrainJobs in a namespace may read its runs.
//
// +kubebuilder:object:root=true
type TrainJobRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what ran.
	Spec TrainJobRunSpec `json:"spec"`
	// Status is how it went.
	Status TrainJobRunStatus `json:"status"`
}

// TrainJobRunSpec is what a run ran.
type TrainJobRunSpec struct {
	// TrainJobName is the name of the TrainJob.
	TrainJobName string `json:"trainJobName"`
	// Creator is the user who created the TrainJob, as the API server authenticated them; empty
	// for a TrainJob the operator's webhook did not admit.
	Creator string `json:"creator,omitempty"`
	// Runtime is the runtime the run was built from.
	Runtime RuntimeReference `json:"runtime"`
	// Framework is the runtime's framework: torch, mpi, xgboost, jax, flux or plain.
	Framework string `json:"framework,omitempty"`
	// Image is the trainer's image.
	Image string `json:"image,omitempty"`
	// Nodes is the number of training nodes, the most the run had.
	Nodes int32 `json:"nodes"`
	// ProcsPerNode is the trainer's processes per node, as the TrainJob or its runtime said it.
	ProcsPerNode string `json:"procsPerNode,omitempty"`
	// GPUsPerNode is the GPUs each training node had.
	GPUsPerNode int64 `json:"gpusPerNode"`
	// Queue is the Kueue LocalQueue the TrainJob was queued in.
	Queue string `json:"queue,omitempty"`
}

// RuntimeReference names a runtime and the snapshot of it a run was built from.
type RuntimeReference struct {
	// Kind is ClusterTrainingRuntime or TrainingRuntime.
	Kind string `json:"kind"`
	// Name is the runtime's name.
	Name string `json:"name"`
	// Digest is the digest of the runtime's snapshot (status.runtimeSnapshot.digest).
	Digest string `json:"digest,omitempty"`
}

// TrainJobRunStatus is how a run went.
type TrainJobRunStatus struct {
	// State is the TrainJob's last state: Pending, Created, Running, Suspended, Complete or Failed.
	State string `json:"state"`
	// Reason and Message are those of the TrainJob's Complete or Failed condition.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`

	// AdmittedTime is when the run first started (its JobSet first not suspended).
	AdmittedTime *metav1.Time `json:"admittedTime,omitempty"`
	// FirstRunningTime is when every pod of its training was first ready.
	FirstRunningTime *metav1.Time `json:"firstRunningTime,omitempty"`
	// FinishedTime is when it became Complete or Failed.
	FinishedTime *metav1.Time `json:"finishedTime,omitempty"`
	// DeletedTime is when its TrainJob was deleted.
	DeletedTime *metav1.Time `json:"deletedTime,omitempty"`

	// Failure is the TrainJob's last pod failure (its status.failure).
	Failure *PodFailure `json:"failure,omitempty"`
	// Restarts is how many times its pods were all restarted after a failure.
	Restarts int32 `json:"restarts,omitempty"`
	// RestartCauses are why, the latest 16.
	RestartCauses []RestartCause `json:"restartCauses,omitempty"`
	// Stalls is how many times the operator restarted it because it stalled.
	Stalls int32 `json:"stalls,omitempty"`

	// Progress is the trainer's reports over the run, at most 64 points spread over it.
	Progress []ProgressPoint `json:"progress,omitempty"`
	// FinalMetrics are the trainer's last reported metrics.
	FinalMetrics []Metric `json:"finalMetrics,omitempty"`

	// RunningSeconds is how long every pod of its training was ready.
	RunningSeconds int64 `json:"runningSeconds"`
	// NodeSeconds is RunningSeconds times its nodes.
	NodeSeconds int64 `json:"nodeSeconds"`
	// GPUSeconds is NodeSeconds times its GPUs per node.
	GPUSeconds int64 `json:"gpuSeconds"`
}

// RestartCause is why a run's pods were restarted.
type RestartCause struct {
	Time     metav1.Time `json:"time"`
	Reason   string      `json:"reason"`
	Message  string      `json:"message,omitempty"`
	Node     string      `json:"node,omitempty"`
	ExitCode *int32      `json:"exitCode,omitempty"`
}

// ProgressPoint is one report of a run's progress.
type ProgressPoint struct {
	Time metav1.Time `json:"time"`
	// Percent is the trainer's progressPercentage.
	Percent *int32 `json:"percent,omitempty"`
	// Metrics are the metrics it reported.
	Metrics []Metric `json:"metrics,omitempty"`
	// Restarts is how many restarts the run had then.
	Restarts int32 `json:"restarts,omitempty"`
}

// PodFailure is how a pod of a run failed, as the TrainJob's status.failure said.
type PodFailure struct {
	// Pod is the failed pod's name.
	Pod string `json:"pod"`
	// Rank is its rank in the training, where it had one.
	Rank *int32 `json:"rank,omitempty"`
	// Container is the container that failed.
	Container string `json:"container,omitempty"`
	// ExitCode is the container's exit code.
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Reason is why it failed: the container's reason (Error, OOMKilled) or the pod's (Evicted).
	Reason string `json:"reason"`
	// Message is the failure's message, or the container's last log lines.
	Message string `json:"message,omitempty"`
	// Node is the node it ran on.
	Node string `json:"node,omitempty"`
	// NodeCaused is whether the node caused it.
	NodeCaused bool `json:"nodeCaused,omitempty"`
	// Time is when it failed.
	Time metav1.Time `json:"time"`
}

// Metric is one metric a trainer reported.
type Metric struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// TrainJobRunList is a list of TrainJobRuns.
//
// +kubebuilder:object:root=true
type TrainJobRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainJobRun `json:"items"`
}
