package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of TrainJob status.conditions.
const (
	// TrainJobCreated is True once the TrainJob's children are applied to the cluster.
	TrainJobCreated = "Created"

	// TrainJobSuspended is True while the TrainJob is suspended.
	TrainJobSuspended = "Suspended"

	// TrainJobRunning is True while every pod of the training (every node's, and MPI's launcher;
	// not the initializers') is ready. It is False once they were and no longer are, and when the TrainJob is
	// suspended or finished.
	TrainJobRunning = "Running"

	// TrainJobComplete is True when the TrainJob finished successfully. It is terminal.
	TrainJobComplete = "Complete"

	// TrainJobFailed is True when the TrainJob failed. It is terminal.
	TrainJobFailed = "Failed"

	// TrainJobStalled is True while the trainer's reported progress has not advanced for the
	// TrainJob's progress deadline while every pod of its training ran. It is this operator's:
	// upstream Kubeflow Trainer has no such condition.
	TrainJobStalled = "Stalled"
)

// Condition reasons of TrainJob status.conditions.
const (
	// TrainJobJobsBuildFailedReason explains Created=False when the children could not be built
	// from the TrainJob and its runtime.
	TrainJobJobsBuildFailedReason = "JobsBuildFailed"

	// TrainJobJobsCreationFailedReason explains Created=False when the children were built but could
	// not be applied to the cluster.
	TrainJobJobsCreationFailedReason = "JobsCreationFailed"

	// TrainJobObjectNotOwnedReason explains Created=False when an object of the name of one of
	// the TrainJob's children (its JobSet, PodGroup, MPI Secret or ConfigMaps) exists that is not
	// the TrainJob's: the operator never changes, mounts or deletes it, and the TrainJob waits for
	// it to go.
	TrainJobObjectNotOwnedReason = "ObjectNotOwned"

	// TrainJobPodGroupCreationFailedReason explains Created=False when the API server refused the
	// TrainJob's PodGroup (a closed or missing Volcano queue, a quota, a policy): its pods do not
	// start without their gang, and the PodGroup is tried again.
	TrainJobPodGroupCreationFailedReason = "PodGroupCreationFailed"

	// TrainJobJobsCreatedReason explains Created=True.
	TrainJobJobsCreatedReason = "JobsCreated"

	// TrainJobSuspendedReason explains Suspended=True.
	TrainJobSuspendedReason = "Suspended"

	// TrainJobResumedReason explains Suspended=False after the TrainJob was resumed, and
	// Stalled=False when it was resumed after it stalled: a new run starts a new stall clock.
	TrainJobResumedReason = "Resumed"

	// TrainJobNodesReadyReason explains Running=True.
	TrainJobNodesReadyReason = "NodesReady"

	// TrainJobNodesNotReadyReason explains Running=False while a pod of the training is not ready.
	TrainJobNodesNotReadyReason = "NodesNotReady"

	// TrainJobFinishedReason explains Running=False once the TrainJob is Complete or Failed.
	TrainJobFinishedReason = "Finished"

	// TrainJobRuntimeNotFoundReason explains Failed=True when spec.runtimeRef names no runtime.
	TrainJobRuntimeNotFoundReason = "TrainingRuntimeNotFound"

	// TrainJobResizedReason is the reason of the event of an elastic TrainJob whose trainer job
	// the operator grew or shrank to spec.trainer.numNodes.
	TrainJobResizedReason = "Resized"

	// TrainJobResizeFailedReason is the reason of the Warning event of an elastic TrainJob whose
	// JobSet refused to change size (JobSet's ElasticJobSet feature gate is off), or whose size is
	// outside its runtime's bounds.
	TrainJobResizeFailedReason = "ResizeFailed"

	// TrainJobAutoscalerRefusedReason is the reason of the Warning event of an elastic TrainJob
	// whose HorizontalPodAutoscaler the API server refused (its runtime's metrics).
	TrainJobAutoscalerRefusedReason = "AutoscalerRefused"

	// TrainJobProgressUnavailableReason is the reason of the Warning event of a TrainJob built
	// without progress reporting: the operator cannot read the CA its trainer would need.
	TrainJobProgressUnavailableReason = "ProgressUnavailable"

	// TrainJobRebuildingReason explains Suspended=True for a TrainJob that was suspended, changed
	// and resumed while the operator did not see it: its JobSet, still running the previous spec,
	// is stopped and built again, then resumed.
	TrainJobRebuildingReason = "Rebuilding"

	// TrainJobJobSetDeletedReason explains Failed=True when the TrainJob's JobSet was deleted
	// after its pods may have run, before the operator saw it finish: how the training ended is
	// unknown, and it is never run a second time. Create the TrainJob again to run it again.
	TrainJobJobSetDeletedReason = "JobSetDeleted"

	// TrainJobPodFailedReason is the reason of the Warning event of a TrainJob one of whose pods
	// failed: the event says which, how, on which node, and its last log lines.
	TrainJobPodFailedReason = "PodFailed"

	// TrainJobDeadlineExceededReason explains Failed=True when the TrainJob ran longer than
	// spec.activeDeadlineSeconds, as for a Job.
	TrainJobDeadlineExceededReason = "DeadlineExceeded"

	// TrainJobProgressDeadlineExceededReason explains Stalled=True, and Failed=True when the
	// runtime's stallPolicy.action is Fail: the trainer's progress did not advance for the
	// progress deadline.
	TrainJobProgressDeadlineExceededReason = "ProgressDeadlineExceeded"

	// TrainJobRestartedReason explains Stalled=False once the operator restarted a stalled
	// TrainJob's pods (stallPolicy.action Restart), and is the reason of the Warning event of a
	// TrainJob all of whose pods JobSet restarted after a failure: the event says which attempt
	// this is and why.
	TrainJobRestartedReason = "Restarted"

	// TrainJobProgressResumedReason explains Stalled=False once the trainer's progress advanced
	// again.
	TrainJobProgressResumedReason = "ProgressResumed"
)

// TrainJobPending is status.state of a TrainJob whose JobSet is not made yet, or cannot be (a
// Created condition that is False says why). Its other states are named as the conditions are:
// Created (its JobSet made, not every pod of its training ready), Running, Suspended, Complete
// and Failed.
const TrainJobPending = "Pending"

// TrainJobStatus is the observed state of a TrainJob.
type TrainJobStatus struct {
	// State is the TrainJob's state, for people and tools that want one word: Pending, Created,
	// Running, Suspended, Complete or Failed (the STATE column). It is the first of Complete,
	// Failed, Suspended, Running and Created that holds, else Pending; it is kept whichever
	// conditions the operator writes.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Created;Running;Suspended;Complete;Failed
	State string `json:"state,omitempty"`

	// StartTime is when the TrainJob last started: when its JobSet was first made not suspended,
	// or when it was last resumed. spec.activeDeadlineSeconds counts from it, as a Job's does.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// CompletionTime is when the TrainJob completed: its Complete condition's time. Set only
	// when it succeeded, as a Job's.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// ReadyTime is when every pod of the training last became ready: when status.state last
	// became Running. A stall is counted from it or from lastProgressTime, whichever is later.
	// +optional
	ReadyTime *metav1.Time `json:"readyTime,omitempty"`

	// LastProgressTime is when the trainer's reported progress last changed (its
	// progressPercentage, estimatedRemainingSeconds or metrics), by the operator's clock, not
	// the trainer's. A TrainJob is Stalled when it stays the same past its progress deadline.
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`

	// StallRestarts is how many times the operator restarted the TrainJob's pods because it
	// stalled (its runtime's stallPolicy.action is Restart).
	// +optional
	// +kubebuilder:validation:Minimum=0
	StallRestarts int32 `json:"stallRestarts,omitempty"`

	// ObservedGeneration is the TrainJob's generation its JobSet was last made from, or brought
	// in line with.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions of the TrainJob. By default, upstream Kubeflow Trainer's: Suspended while the
	// TrainJob is suspended (removed when it is resumed), the terminal Complete or Failed, and
	// Created=False while its JobSet cannot be made, with the reason; so that upstream's Python SDK,
	// which sees a TrainJob Running only while it has no condition, sees it run; and this
	// operator's Stalled while it is stalled (removed when the stall ends). A manager started
	// with --conditions=all writes the seed's Created and this operator's Running as well, and keeps
	// Suspended=False after a resume and Stalled=False after a stall. They are kept in the order
	// Complete, Failed, Suspended, Running, Created, Stalled, most significant first.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// JobsStatus counts the Jobs of each of the JobSet's replicated jobs by state.
	// +optional
	// +listType=map
	// +listMapKey=name
	JobsStatus []JobStatus `json:"jobsStatus,omitempty"`

	// Ready is, for display, how many pods of the training (every node's, and MPI's launcher; not
	// the initializers') are ready, over how many there are: "2/2" once the training runs. JobSet
	// counts ready Jobs, not pods: a Job's pods count once all of them are ready. jobsStatus holds
	// the counts per replicated job.
	// +optional
	// +kubebuilder:validation:MaxLength=24
	Ready string `json:"ready,omitempty"`

	// Nodes is the number of training nodes the TrainJob's JobSet runs, or will run once resumed:
	// its trainer job's pods, or for MPI its node job's (and the launcher's when it runs as a
	// node). An elastic TrainJob's follows spec.trainer.numNodes once
	// the operator resized its JobSet (the scale subresource's status replicas).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Nodes int32 `json:"nodes,omitempty"`

	// Selector selects the pods of the training nodes (those Nodes counts), as a label selector
	// string: the pods an autoscaler reads the metrics of (the scale subresource's selector).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Selector string `json:"selector,omitempty"`

	// RuntimeSnapshot is the runtime the TrainJob is built from: its runtime as it was when the
	// TrainJob was first built, kept in a ConfigMap the TrainJob owns. An edit or the deletion of
	// the runtime never changes a TrainJob once built, not even one rebuilt after an edit while
	// suspended (upstream Kubeflow Trainer's KEP-2599).
	// +optional
	RuntimeSnapshot *RuntimeSnapshot `json:"runtimeSnapshot,omitempty"`

	// Failure is the first pod failure of the TrainJob's latest attempt that had one: why a
	// Failed TrainJob failed, and why a running one was restarted. Nil until a pod of the
	// TrainJob fails. The operator reads the failed pod once, when its Job counts it.
	// +optional
	Failure *PodFailure `json:"failure,omitempty"`

	// Restarts is how many times the TrainJob's JobSet restarted all of its pods after a failure,
	// under the runtime's spec.template.spec.failurePolicy.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Restarts int32 `json:"restarts,omitempty"`

	// RestartsCountTowardsMax is how many of those restarts counted against the failure
	// policy's maxRestarts: not those after a failure its node or a preemption caused, nor
	// those of a rule that restarts without counting.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RestartsCountTowardsMax int32 `json:"restartsCountTowardsMax,omitempty"`

	// AvoidedNodes are the nodes a restart of the TrainJob's pods keeps off where another node
	// fits (the runtime's recoveryPolicy.avoidNodes): the nodes of the first failed pods of its
	// earlier attempts, one per attempt, the last 16. They apply to this TrainJob alone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	AvoidedNodes []string `json:"avoidedNodes,omitempty"`

	// TrainerStatus is the progress the trainer last reported to the operator's progress
	// endpoint (upstream Kubeflow Trainer's shape): the URL, CA and a token of the TrainJob's own
	// are in the trainer container's KUBEFLOW_TRAINER_SERVER_* env vars. Nil until a report
	// arrives. Reports are written at most once per TrainJob per interval, the latest winning.
	// +optional
	TrainerStatus *TrainerStatus `json:"trainerStatus,omitempty"`
}

// PodFailure is how one pod of a TrainJob failed, as the operator read it from the pod.
type PodFailure struct {
	// Pod is the name of the pod that failed.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`

	// ReplicatedJob is the pod's role: the name of its replicated job, such as "node", "launcher"
	// or "dataset-initializer".
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ReplicatedJob string `json:"replicatedJob,omitempty"`

	// Rank is the pod's completion index in its Job: the node's rank for the trainer of every
	// framework (PET_NODE_RANK, JAX_PROCESS_ID, the MPI hostfile's order).
	// +optional
	Rank *int32 `json:"rank,omitempty"`

	// Attempt is the JobSet's restart attempt the pod belonged to: 0 for the first run, then one
	// more for each restart (status.restarts).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Attempt int32 `json:"attempt,omitempty"`

	// Container is the container that failed; empty when the pod failed as a whole (evicted,
	// preempted, its node lost).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container,omitempty"`

	// ExitCode is the container's exit code.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`

	// Signal is the signal that ended the container, when it was killed by one: the kubelet's
	// report, else the exit code minus 128 for exit codes above 128 (137 is SIGKILL, 9).
	// +optional
	Signal *int32 `json:"signal,omitempty"`

	// Reason is the short cause: the container's (OOMKilled, Error, ContainerCannotRun,
	// DeadlineExceeded), else the pod's (Evicted, Preempted, NodeLost, DeadlineExceeded, ...), or
	// a container's waiting reason (ImagePullBackOff, CrashLoopBackOff, ...) for a pod that never
	// ran. The REASON column.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`

	// Message is the container's termination message: the last lines of its log (at most 20
	// lines and 2 KiB) when it failed without writing one, which the operator asks the kubelet
	// for by building containers with terminationMessagePolicy FallbackToLogsOnError; else the
	// pod's message (an eviction's, a preemption's).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`

	// Node is the node the pod ran on.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`

	// NodeCaused tells that the node, not the training, was the cause: the pod was evicted for
	// the node's pressure, the node was lost, shut down or tainted, or refused the pod.
	// +optional
	NodeCaused bool `json:"nodeCaused,omitempty"`

	// Time is when the pod failed: its container's finish, else when the operator read it.
	// +required
	Time metav1.Time `json:"time"`
}

// RuntimeSnapshot is where a TrainJob's runtime is kept, and what the operator reads of it
// without reading the copy: its framework, gang and stall policies.
type RuntimeSnapshot struct {
	// ConfigMap is the name of the ConfigMap, in the TrainJob's namespace, that holds the runtime
	// as YAML under the key "runtime": <TrainJob>-runtime-snapshot, as upstream names it.
	// +required
	// +kubebuilder:validation:MaxLength=253
	ConfigMap string `json:"configMap"`

	// Digest is "sha256:" and the hex SHA-256 of that YAML. A copy that no longer matches it was
	// changed by someone other than the operator, and is not built from.
	// +required
	// +kubebuilder:validation:MaxLength=71
	Digest string `json:"digest"`

	// MLPolicy is the runtime's framework policy, which decides the controller that runs the
	// TrainJob.
	// +optional
	MLPolicy *MLPolicy `json:"mlPolicy,omitempty"`

	// PodGroupPolicy is the runtime's gang policy.
	// +optional
	PodGroupPolicy *PodGroupPolicy `json:"podGroupPolicy,omitempty"`

	// StallPolicy is the runtime's stall policy.
	// +optional
	StallPolicy *StallPolicy `json:"stallPolicy,omitempty"`

	// RunPolicy is the runtime's run policy: the deadline and TTL of a TrainJob that sets none.
	// +optional
	RunPolicy *RunPolicy `json:"runPolicy,omitempty"`

	// ComputeDomain is the runtime's ComputeDomain policy: the TrainJob has an NVIDIA
	// ComputeDomain of its own, deleted once it finishes.
	// +optional
	ComputeDomain *ComputeDomainPolicy `json:"computeDomain,omitempty"`
}

// TrainerStatus is the progress of a TrainJob's trainer, as it reports it.
// +kubebuilder:validation:XValidation:rule="has(self.lastUpdatedTime)",message="lastUpdatedTime is required when trainerStatus is present"
type TrainerStatus struct {
	// ProgressPercentage is how much of the training is done, from 0 to 100; empty if unknown.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ProgressPercentage *int32 `json:"progressPercentage,omitempty"`

	// EstimatedRemainingSeconds is how long the training still needs; empty if unknown.
	// +optional
	// +kubebuilder:validation:Minimum=0
	EstimatedRemainingSeconds *int32 `json:"estimatedRemainingSeconds,omitempty"`

	// Metrics are the trainer's latest figures, such as loss or accuracy.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Metrics []Metric `json:"metrics,omitempty"`

	// LastUpdatedTime is when the trainer reported this.
	// +optional
	LastUpdatedTime metav1.Time `json:"lastUpdatedTime,omitempty"`
}

// Metric is one named figure of the trainer's.
type Metric struct {
	// Name of the metric, e.g. "loss" or "eval_accuracy".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`

	// Value of the metric, as text.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Value string `json:"value"`
}

// UpdateTrainJobStatusRequest is the body a trainer posts to the progress endpoint.
type UpdateTrainJobStatusRequest struct {
	// TrainerStatus is the trainer's progress; a request without it changes nothing.
	// +optional
	TrainerStatus *TrainerStatus `json:"trainerStatus,omitempty"`
}

// JobStatus counts the Jobs of one replicated job by state.
type JobStatus struct {
	// Name of the replicated job.
	// +required
	Name string `json:"name"`

	// Ready is the number of Jobs whose pods are all ready or completed.
	// +required
	Ready int32 `json:"ready"`

	// Succeeded is the number of Jobs that completed successfully.
	// +required
	Succeeded int32 `json:"succeeded"`

	// Failed is the number of Jobs that failed.
	// +required
	Failed int32 `json:"failed"`

	// Active is the number of Jobs with at least one pod running or pending.
	// +required
	Active int32 `json:"active"`

	// Suspended is the number of Jobs that are suspended.
	// +required
	Suspended int32 `json:"suspended"`
}
