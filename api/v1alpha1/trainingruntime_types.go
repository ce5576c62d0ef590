package v1alpha1

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Kinds a TrainJob's spec.runtimeRef may name.
const (
	TrainingRuntimeKind        = "TrainingRuntime"
	ClusterTrainingRuntimeKind = "ClusterTrainingRuntime"
)

// Labels the operator reads and writes.
const (
	// AncestorStepLabel on a replicated job's Job template (as upstream Kubeflow Trainer puts it)
	// or its Pod template (as KEP-2170 does) tells which part of the TrainJob the job receives:
	// the trainer, or the dataset or model initializer. Where both have it, they must agree.
	AncestorStepLabel = "trainer.kubeflow.org/trainjob-ancestor-step"

	// FrameworkLabel on a shipped runtime names its framework; the Kubeflow SDK lists runtimes by it.
	FrameworkLabel = "trainer.kubeflow.org/framework"

	// TrainJobNameLabel on a child the operator creates beside the JobSet (MPI's Secret and
	// ConfigMap, a PodGroup), and on the JobSet's Jobs, names its TrainJob.
	TrainJobNameLabel = "trainer.kubeflow.org/trainjob-name"

	// KueueQueueLabel on a TrainJob names the Kueue LocalQueue it is queued in.
	KueueQueueLabel = "kueue.x-k8s.io/queue-name"

	// AvoidNodesLabel on a TrainJob's Jobs is its runtime's recoveryPolicy.avoidNodes, on the
	// Jobs of a JobSet that restarts (failurePolicy.maxRestarts above 0, or a rule that restarts
	// regardless) and a policy other than Never: the pods of a restart prefer the nodes that are
	// not in the TrainJob's status.avoidedNodes.
	AvoidNodesLabel = "trainer.kubeflow.org/avoid-nodes"

	// CreatorAnnotation on a TrainJob is the user who created it, as the API server
	// authenticated them: the operator's webhook writes it at creation, keeps it through every
	// update, and ignores any value a user gives. The history records it.
	CreatorAnnotation = "trainer.kubeflow.org/creator"

	// HistoryFinalizer on a TrainJob keeps it until the history has recorded how it ended: the
	// operator's webhook adds it at creation when the history is installed (the manager's
	// --history flag), and the history removes it once the record is written.
	HistoryFinalizer = "trainer.kubeflow.org/history"
)

// Values of AncestorStepLabel.
const (
	AncestorTrainer            = "trainer"
	AncestorDatasetInitializer = "dataset-initializer"
	AncestorModelInitializer   = "model-initializer"
)

// ClusterTrainingRuntime is a cluster-wide training blueprint that TrainJobs in any namespace can
// run from. Changing it never changes TrainJobs that already run from it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=trainer
// +kubebuilder:printcolumn:name="Framework",type=string,JSONPath=`.metadata.labels.trainer\.kubeflow\.org/framework`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.spec.mlPolicy.numNodes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterTrainingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the blueprint.
	// +required
	Spec TrainingRuntimeSpec `json:"spec"`
}

// ClusterTrainingRuntimeList is a list of ClusterTrainingRuntimes.
//
// +kubebuilder:object:root=true
type ClusterTrainingRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterTrainingRuntime `json:"items"`
}

// TrainingRuntime is a training blueprint that TrainJobs in its own namespace can run from.
// Changing it never changes TrainJobs that already run from it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=trainer
// +kubebuilder:printcolumn:name="Framework",type=string,JSONPath=`.metadata.labels.trainer\.kubeflow\.org/framework`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.spec.mlPolicy.numNodes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TrainingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the blueprint.
	// +required
	Spec TrainingRuntimeSpec `json:"spec"`
}

// TrainingRuntimeList is a list of TrainingRuntimes.
//
// +kubebuilder:object:root=true
type TrainingRuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainingRuntime `json:"items"`
}

// TrainingRuntimeSpec is a training blueprint: the JobSet to run, the framework's distributed
// settings and the gang-scheduling policy.
type TrainingRuntimeSpec struct {
	// MLPolicy sets the number of nodes and the framework (torch, mpi, xgboost, jax or flux) whose
	// distributed settings the operator injects. Without a framework, the trainer runs as is.
	// +optional
	MLPolicy *MLPolicy `json:"mlPolicy,omitempty"`

	// PodGroupPolicy turns on gang scheduling, so that the pods of a TrainJob start all together
	// or not at all.
	// +optional
	PodGroupPolicy *PodGroupPolicy `json:"podGroupPolicy,omitempty"`

	// StallPolicy catches a training that hangs while its pods run (an NCCL hang, a deadlock):
	// when the trainer's progress reports stop advancing for progressDeadlineSeconds, the
	// TrainJob gets a Stalled condition and event, and action says what else happens. A TrainJob
	// whose trainer never reports progress is never called stalled. A TrainJob's
	// spec.progressDeadlineSeconds overrides the deadline; the action stays the runtime's. A
	// TrainJob keeps the policy of the runtime as it was when it was first built. This operator's
	// field: upstream Kubeflow Trainer has none.
	// +optional
	StallPolicy *StallPolicy `json:"stallPolicy,omitempty"`

	// RunPolicy sets how long the runtime's TrainJobs may run and how long they are kept once
	// finished: defaults for the TrainJobs that do not set their own (KEP-2899).
	// +optional
	RunPolicy *RunPolicy `json:"runPolicy,omitempty"`

	// Template is the JobSet each TrainJob starts from. Its trainer job is the replicated job whose
	// Job template or Pod template is labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer.
	// Its JobSet and Jobs may not have their own activeDeadlineSeconds or ttlSecondsAfterFinished:
	// the TrainJob's and runPolicy's decide when a training stops and when it is deleted.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.spec.ttlSecondsAfterFinished)",message="the JobSet template may not set ttlSecondsAfterFinished: set runPolicy.ttlSecondsAfterFinished, which deletes the TrainJob and all it owns"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec.replicatedJobs) || self.spec.replicatedJobs.all(rj, !has(rj.template.spec.activeDeadlineSeconds) && !has(rj.template.spec.ttlSecondsAfterFinished))",message="a replicated job's Job template may not set activeDeadlineSeconds or ttlSecondsAfterFinished: set runPolicy.activeDeadlineSeconds or runPolicy.ttlSecondsAfterFinished, which the TrainJob follows"
	Template JobSetTemplateSpec `json:"template"`

	// ComputeDomain gives each TrainJob its own NVIDIA ComputeDomain (resource.nvidia.com/v1beta1,
	// NVIDIA's DRA driver for GPUs), so that its nodes share GPU memory over multi-node NVLink
	// (GB200 NVL72 and the like): the operator creates the ComputeDomain, named after the
	// TrainJob and owned by it, before the JobSet, and every node pod claims its IMEX channel
	// (the pod resource claim "compute-domain-channel", used by the trainer container, from the
	// ResourceClaimTemplate "<trainjob>-compute-domain-channel" that NVIDIA's driver makes for the
	// ComputeDomain). The ComputeDomain is deleted once the TrainJob finished and its pods
	// stopped. This operator's field: upstream Kubeflow Trainer has none.
	// +optional
	ComputeDomain *ComputeDomainPolicy `json:"computeDomain,omitempty"`

	// RecoveryPolicy says how a TrainJob recovers when JobSet restarts all of its pods after a
	// failure (template.spec.failurePolicy.maxRestarts): which nodes the new attempt keeps off,
	// and where the trainer finds the checkpoint to resume from. Without it, a restart keeps off
	// the node of a failure the node caused.
	// +optional
	RecoveryPolicy *RecoveryPolicy `json:"recoveryPolicy,omitempty"`
}

// ComputeDomainPolicy is how a runtime's TrainJobs get their NVIDIA ComputeDomain.
type ComputeDomainPolicy struct {
	// AllocationMode is how many IMEX channels each node pod gets: Single (one, the default) or
	// All (every channel of the IMEX domain).
	// +optional
	// +kubebuilder:validation:Enum=Single;All
	AllocationMode ComputeDomainAllocationMode `json:"allocationMode,omitempty"`
}

// ComputeDomainAllocationMode is how many IMEX channels a ComputeDomain's claim gets.
type ComputeDomainAllocationMode string

const (
	// ComputeDomainAllocationSingle gets one IMEX channel.
	ComputeDomainAllocationSingle ComputeDomainAllocationMode = "Single"
	// ComputeDomainAllocationAll gets every IMEX channel of the domain.
	ComputeDomainAllocationAll ComputeDomainAllocationMode = "All"
)

// ComputeDomainChannelClaim is the name of the pod resource claim of a ComputeDomain's IMEX
// channel in each node pod of a TrainJob whose runtime has a computeDomain.
const ComputeDomainChannelClaim = "compute-domain-channel"

// RunPolicy is a runtime's defaults for how long its TrainJobs run and are kept: a TrainJob's own
// spec.activeDeadlineSeconds and spec.ttlSecondsAfterFinished override them. A TrainJob keeps the
// policy of the runtime as it was when it was first built.
type RunPolicy struct {
	// ActiveDeadlineSeconds is how long a TrainJob may run, counted from when it last started
	// running, for TrainJobs that set no spec.activeDeadlineSeconds: past it, the TrainJob is
	// Failed with reason DeadlineExceeded and its pods are stopped.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// TTLSecondsAfterFinished deletes a finished TrainJob (Complete or Failed), and everything it
	// owns, this many seconds after it finished, for TrainJobs that set no
	// spec.ttlSecondsAfterFinished: 0 deletes it as soon as it finishes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// FailurePolicy says what a failed training pod does to the TrainJob (KEP-4162): restart the
	// training (all its pods) or fail it at once, by the pod's exit codes and conditions; and how
	// many restarts it may spend. A pod that failed because of its node or a preemption (its
	// DisruptionTarget condition: evicted, drained, preempted, its node lost) restarts the
	// training without spending one.
	// +optional
	FailurePolicy *FailurePolicy `json:"failurePolicy,omitempty"`
}

// FailurePolicy is what a runtime's failed training pods do to their TrainJob.
type FailurePolicy struct {
	// MaxRestarts is how many times the training may restart after failures that count: the
	// JobSet's failurePolicy.maxRestarts. A TrainJob's spec.failurePolicy.maxRestarts overrides
	// it; omitted, the template's holds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`

	// Rules decide, in order, what a failed training pod does: the first whose requirement it
	// meets. A pod that meets none counts against its Job's backoffLimit, and a Job that fails
	// then restarts the training (spending a restart) as the template's failurePolicy says.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Rules []FailurePolicyRule `json:"rules,omitempty"`
}

// FailurePolicyAction is what a failure that meets a rule does.
// +kubebuilder:validation:Enum=Fail;Restart;RestartNotCounted
type FailurePolicyAction string

const (
	// FailurePolicyFail fails the TrainJob at once: its other pods are stopped and no restart
	// is spent. For failures no restart can fix (a bug in the training code, a bad argument).
	FailurePolicyFail FailurePolicyAction = "Fail"
	// FailurePolicyRestart restarts the training at once, spending a restart.
	FailurePolicyRestart FailurePolicyAction = "Restart"
	// FailurePolicyRestartNotCounted restarts the training at once without spending a restart.
	FailurePolicyRestartNotCounted FailurePolicyAction = "RestartNotCounted"
)

// FailurePolicyRule is a requirement on a failed training pod and what meeting it does. It
// names exit codes, or pod conditions, not both.
// +kubebuilder:validation:XValidation:rule="has(self.onExitCodes) != has(self.onPodConditions)",message="a rule names onExitCodes or onPodConditions, one of them"
type FailurePolicyRule struct {
	// Action is what a pod that meets the rule does to the TrainJob.
	// +required
	Action FailurePolicyAction `json:"action"`

	// OnExitCodes is met by a pod whose container (the named one, else any) ended with one of
	// the codes (operator In) or any code but them and 0 (NotIn).
	// +optional
	OnExitCodes *batchv1.PodFailurePolicyOnExitCodesRequirement `json:"onExitCodes,omitempty"`

	// OnPodConditions is met by a pod that has one of these conditions True.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	OnPodConditions []batchv1.PodFailurePolicyOnPodConditionsPattern `json:"onPodConditions,omitempty"`
}

// AvoidNodesPolicy says after which failures a restart keeps off the failed pod's node.
// +kubebuilder:validation:Enum=NodeFailures;AllFailures;Never
type AvoidNodesPolicy string

const (
	// AvoidNodesOnNodeFailures keeps a restart off the node of a failure the node caused: the
	// kubelet evicted the pod for the node's pressure, refused or shut down with it, the node was
	// lost, drained or tainted NoExecute (status.failure.nodeCaused).
	AvoidNodesOnNodeFailures AvoidNodesPolicy = "NodeFailures"
	// AvoidNodesOnAllFailures keeps a restart off the node of any failure: for faults that only
	// show as a crashing trainer, such as a GPU that fails every process on it.
	AvoidNodesOnAllFailures AvoidNodesPolicy = "AllFailures"
	// AvoidNodesNever lets a restart run anywhere.
	AvoidNodesNever AvoidNodesPolicy = "Never"
)

// RecoveryPolicy is how a TrainJob recovers from a restart of all of its pods.
type RecoveryPolicy struct {
	// AvoidNodes is after which failures the restarted pods keep off the node the attempt's first
	// failed pod ran on: NodeFailures (the default), AllFailures or Never. The restart's pods
	// prefer, with the greatest weight, every other node: the scheduler puts them on an avoided
	// node only when no other fits, rather than leave them pending. The nodes are kept in the
	// TrainJob's status.avoidedNodes (the last 16) and apply to that TrainJob alone: no node is
	// changed.
	// +optional
	AvoidNodes AvoidNodesPolicy `json:"avoidNodes,omitempty"`

	// CheckpointDir is the directory where the trainer keeps its checkpoints, on storage that
	// outlives its pods (a volume the runtime mounts). The trainer container gets it in
	// KUBEFLOW_TRAINER_CHECKPOINT_DIR, so that a restarted, resumed or preempted trainer resumes
	// from the newest checkpoint there instead of starting over.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="checkpointDir must be an absolute path"
	CheckpointDir string `json:"checkpointDir,omitempty"`
}

// StallPolicy says when a training counts as stalled and what the operator then does.
type StallPolicy struct {
	// ProgressDeadlineSeconds is how long the trainer's reported progress (its
	// progressPercentage or metrics) may stay the same while every pod of the training runs,
	// counted from its last change or from when the pods last all became ready, whichever is
	// later; and at least twice the interval the operator writes progress at (its
	// --progress-interval, 30 s by default), so that a trainer reporting all along is never
	// called stalled.
	// +required
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds int32 `json:"progressDeadlineSeconds"`

	// Action is what happens to a stalled TrainJob besides its Stalled condition and event: Fail
	// stops its pods and fails it (reason ProgressDeadlineExceeded); Restart stops all its pods
	// and starts them again, as a whole, counted in status.stallRestarts; Report does nothing
	// more, and the condition goes once progress advances again.
	// Defaults to Fail.
	// +optional
	// +kubebuilder:default=Fail
	Action StallAction `json:"action,omitempty"`

	// MaxRestarts is how many times a Restart action restarts a TrainJob at most: the stall after
	// them fails it (reason ProgressDeadlineExceeded), as Fail would. A training that hangs at
	// the same place each time is not restarted forever.
	// Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`
}

// StallAction is what happens to a stalled TrainJob.
//
// +kubebuilder:validation:Enum=Fail;Restart;Report
type StallAction string

// Stall actions.
const (
	StallActionFail    StallAction = "Fail"
	StallActionRestart StallAction = "Restart"
	StallActionReport  StallAction = "Report"
)

// JobSetTemplateSpec is the JobSet a TrainJob starts from. The JobSet's name and namespace are the
// TrainJob's.
type JobSetTemplateSpec struct {
	// Metadata holds the labels and annotations to put on the JobSet.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec of the JobSet.
	// +optional
	Spec jobsetv1alpha2.JobSetSpec `json:"spec,omitempty"`
}

// MLPolicy sets the number of nodes and at most one framework.
//
// +kubebuilder:validation:XValidation:rule="[has(self.torch), has(self.mpi), has(self.xgboost), has(self.jax), has(self.flux)].filter(x, x).size() <= 1",message="at most one of torch, mpi, xgboost, jax and flux may be set"
// +kubebuilder:validation:XValidation:rule="!(has(self.numNodes) && has(self.torch) && has(self.torch.elasticPolicy))",message="numNodes must be omitted when torch.elasticPolicy is set: minNodes and maxNodes size the job"
type MLPolicy struct {
	// NumNodes is the number of training nodes (pods of the trainer job). A TrainJob's
	// trainer.numNodes overrides it. Omitted means 1, or the elastic bounds when
	// torch.elasticPolicy is set. At most 5000, the largest cluster Kubernetes is built for.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5000
	NumNodes *int32 `json:"numNodes,omitempty"`

	MLPolicySource `json:",inline"`
}

// MLPolicySource is the framework of a runtime. At most one field may be set.
type MLPolicySource struct {
	// Torch runs the trainer with PyTorch's torchrun: the operator sets the PET_* environment.
	// +optional
	Torch *TorchMLPolicySource `json:"torch,omitempty"`

	// MPI runs an MPI launcher job that starts the processes on the node job over SSH: the
	// operator creates the SSH keys and the hostfile.
	// +optional
	MPI *MPIMLPolicySource `json:"mpi,omitempty"`

	// XGBoost runs distributed XGBoost with its Rabit tracker on the first node: the operator sets
	// the DMLC_* environment.
	// +optional
	XGBoost *XGBoostMLPolicySource `json:"xgboost,omitempty"`

	// JAX runs one JAX process per node: the operator sets the JAX_* environment for
	// jax.distributed.initialize().
	// +optional
	JAX *JAXMLPolicySource `json:"jax,omitempty"`

	// Flux runs the trainer's command under the Flux Framework HPC scheduler: an init container
	// installs Flux into the node pods, which start one Flux cluster across the nodes; the first
	// node runs the command with flux run. The operator creates the brokers' configuration and
	// their CURVE certificate.
	// +optional
	Flux *FluxMLPolicySource `json:"flux,omitempty"`
}

// TorchMLPolicySource configures torchrun.
type TorchMLPolicySource struct {
	// NumProcPerNode is torchrun's --nproc-per-node: a positive integer such as 4, "auto" (one
	// per GPU when the node has GPUs, else per CPU), "cpu" or "gpu".
	// Defaults to "auto".
	// +optional
	// +kubebuilder:default="auto"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(auto|cpu|gpu|[1-9][0-9]*)$')",message="numProcPerNode must be a positive integer, auto, cpu or gpu"
	NumProcPerNode *intstr.IntOrString `json:"numProcPerNode,omitempty"`

	// ElasticPolicy makes the training elastic: torchrun uses c10d rendezvous and the job may run
	// between minNodes and maxNodes nodes. mlPolicy.numNodes must then be omitted.
	// +optional
	ElasticPolicy *TorchElasticPolicy `json:"elasticPolicy,omitempty"`

	// EnvInjection names containers, besides the trainer container, that get the same PET_*
	// environment as the trainer container: sidecars or init containers of the trainer job, or
	// containers of another replicated job, that need torchrun's world (its master address,
	// number of nodes, ...). By default only the trainer container gets it.
	// +optional
	EnvInjection *EnvInjection `json:"envInjection,omitempty"`
}

// EnvInjection names the containers that get torchrun's environment besides the trainer
// container.
type EnvInjection struct {
	// Targets are the replicated jobs, each at most once, and their containers that get the
	// environment. A job or container the runtime's template lacks makes the runtime invalid.
	// +optional
	// +listType=map
	// +listMapKey=jobName
	// +kubebuilder:validation:MaxItems=16
	Targets []EnvInjectionTarget `json:"targets,omitempty"`
}

// EnvInjectionTarget names containers of one replicated job.
type EnvInjectionTarget struct {
	// JobName is the name of a replicated job of the runtime's JobSet template.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	JobName string `json:"jobName"`

	// ContainerNames are the names of containers or init containers of the job's pod template.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	ContainerNames []string `json:"containerNames"`
}

// TorchElasticPolicy configures elastic PyTorch training with c10d rendezvous.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",message="minNodes must not be greater than maxNodes"
type TorchElasticPolicy struct {
	// MaxRestarts is how many times the training may restart: torchrun's --max-restarts and the
	// JobSet's failurePolicy.maxRestarts. Each scale-down of a running TrainJob spends one of
	// torchrun's on every node that stays (its workers fail on the next collective and restart at
	// the new size; a scale-up spends none). Omitted, torchrun's is 3 when minNodes < maxNodes (0
	// would fail the training at its first scale-down), and the JobSet's is the runtime's.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`

	// MinNodes is the fewest nodes the training runs on.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5000
	MinNodes *int32 `json:"minNodes,omitempty"`

	// MaxNodes is the most nodes the training runs on, and the size a TrainJob starts at unless
	// its trainer.numNodes says otherwise.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5000
	MaxNodes *int32 `json:"maxNodes,omitempty"`

	// Metrics from which an autoscaler computes the desired number of nodes: the operator gives
	// each running TrainJob a HorizontalPodAutoscaler (autoscaling/v2) of its name, which scales
	// it between minNodes and maxNodes on these metrics of its trainer pods. Resource metrics
	// need the trainer container to request the resource. Empty means no autoscaler: the size
	// changes only by hand (kubectl scale).
	// +optional
	// +listType=atomic
	Metrics []autoscalingv2.MetricSpec `json:"metrics,omitempty"`
}

// MPIImplementation is the MPI flavour, which decides the hostfile syntax and its environment
// variable.
//
// +kubebuilder:validation:Enum=OpenMPI;Intel;MPICH;""
type MPIImplementation string

// Supported MPI implementations.
const (
	MPIImplementationOpenMPI MPIImplementation = "OpenMPI"
	MPIImplementationIntel   MPIImplementation = "Intel"
	MPIImplementationMPICH   MPIImplementation = "MPICH"
)

// MPIMLPolicySource configures MPI: SSH keys, hostfile and slots.
type MPIMLPolicySource struct {
	// NumProcPerNode is the number of MPI slots (processes) on each node in the hostfile.
	// Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	NumProcPerNode *int32 `json:"numProcPerNode,omitempty"`

	// MPIImplementation is OpenMPI, Intel or MPICH; it decides the hostfile syntax.
	// Defaults to OpenMPI; an empty one means OpenMPI too, as in upstream Kubeflow Trainer's
	// schema.
	// +optional
	// +kubebuilder:default="OpenMPI"
	MPIImplementation *MPIImplementation `json:"mpiImplementation,omitempty"`

	// SSHAuthMountPath is the directory where the generated SSH keys are mounted in the launcher
	// and node containers.
	// Defaults to /root/.ssh.
	// +optional
	// +kubebuilder:default="/root/.ssh"
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="sshAuthMountPath must be an absolute path"
	SSHAuthMountPath *string `json:"sshAuthMountPath,omitempty"`

	// RunLauncherAsNode makes the launcher run training processes too: it becomes the first
	// hostfile entry and the node job runs one pod fewer.
	// Defaults to false.
	// +optional
	// +kubebuilder:default=false
	RunLauncherAsNode *bool `json:"runLauncherAsNode,omitempty"`
}

// XGBoostMLPolicySource configures distributed XGBoost with the Rabit tracker.
type XGBoostMLPolicySource struct {
	// NumWorkersPerNode is the number of XGBoost workers on each node. Omitted means one per GPU
	// of the trainer container, or 1 without GPUs.
	// +optional
	// +kubebuilder:validation:Minimum=1
	NumWorkersPerNode *int32 `json:"numWorkersPerNode,omitempty"`

	// TrackerPort is the port of the Rabit tracker on the first node.
	// Defaults to 9091.
	// +optional
	// +kubebuilder:default=9091
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TrackerPort *int32 `json:"trackerPort,omitempty"`
}

// JAXMLPolicySource configures distributed JAX. It has no fields: the operator sets the coordinator
// address, process count and process id from the TrainJob.
type JAXMLPolicySource struct{}

// FluxMLPolicySource configures Flux. The trainer container's environment may also set
// FLUX_VIEW_IMAGE (the image that installs Flux, which must match the trainer image's OS),
// FLUX_NETWORK_DEVICE (the interface the brokers bind, eth0) and FLUX_QUEUE_POLICY (the Fluxion
// queue policy, fcfs).
type FluxMLPolicySource struct {
	// NumProcPerNode is the number of Flux tasks on each node: flux run starts
	// numNodes × numProcPerNode tasks. A TrainJob's trainer.numProcPerNode overrides it.
	// Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="numProcPerNode must be at least 1"
	NumProcPerNode *int32 `json:"numProcPerNode,omitempty"`
}

// PodGroupPolicy turns on gang scheduling with one of the supported schedulers.
//
// +kubebuilder:validation:XValidation:rule="[has(self.coscheduling), has(self.volcano), has(self.kaiScheduler), has(self.workload)].filter(x, x).size() <= 1",message="at most one of coscheduling, volcano, kaiScheduler and workload may be set"
type PodGroupPolicy struct {
	PodGroupPolicySource `json:",inline"`
}

// PodGroupPolicySource is the gang scheduler of a runtime. At most one field may be set.
type PodGroupPolicySource struct {
	// Coscheduling uses the scheduler-plugins Coscheduling plugin: the operator creates a
	// scheduling.x-k8s.io PodGroup. Pods must name that scheduler in schedulerName.
	// +optional
	Coscheduling *CoschedulingPodGroupPolicySource `json:"coscheduling,omitempty"`

	// Volcano uses the Volcano scheduler: the operator creates a scheduling.volcano.sh PodGroup.
	// +optional
	Volcano *VolcanoPodGroupPolicySource `json:"volcano,omitempty"`

	// KAIScheduler uses NVIDIA's KAI Scheduler: the operator labels the pods with the queue and
	// KAI's pod-grouper creates the PodGroup.
	// +optional
	KAIScheduler *KAISchedulerPodGroupPolicySource `json:"kaiScheduler,omitempty"`

	// Workload uses Kubernetes' own gang scheduling (KEP-4671, alpha in Kubernetes 1.35 and
	// 1.36): the operator creates a scheduling.k8s.io/v1alpha2 Workload and PodGroup, and the
	// gang's pods name the PodGroup in spec.schedulingGroup, for the kube-scheduler's
	// GangScheduling plugin. The cluster needs the GenericWorkload and GangScheduling feature
	// gates on (API server and scheduler) and the scheduling.k8s.io/v1alpha2 API served.
	// +optional
	Workload *WorkloadPodGroupPolicySource `json:"workload,omitempty"`
}

// WorkloadPodGroupPolicySource configures Kubernetes' own gang scheduling (upstream Kubeflow
// Trainer's KEP-3015). It has no fields yet: the gang's minCount is every pod of the training
// that must run at once, as the other schedulers' minMember.
type WorkloadPodGroupPolicySource struct{}

// CoschedulingPodGroupPolicySource configures the Coscheduling PodGroup. Its minMember is every pod
// that must run at once.
type CoschedulingPodGroupPolicySource struct {
	// ScheduleTimeoutSeconds is how long the scheduler waits for the whole gang to fit before it
	// gives up on the pods already placed.
	// Defaults to 60; 0 means the default too, as in upstream Kubeflow Trainer.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=0
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

// VolcanoPodGroupPolicySource configures the Volcano PodGroup.
type VolcanoPodGroupPolicySource struct {
	// Queue is the Volcano queue the PodGroup is submitted to. The annotation
	// scheduling.volcano.sh/queue-name on the JobSet (the runtime's template metadata, a
	// TrainJob's spec.annotations or a runtime patch's template metadata) overrides it, so that a
	// TrainJob may choose its queue. Omitted, and without the annotation, means Volcano's default
	// queue.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Queue *string `json:"queue,omitempty"`

	// NetworkTopology asks Volcano to place the gang's pods close together in the network, on
	// its HyperNodes: mode hard (the default) keeps them within highestTierAllowed (default 1,
	// the lowest tier), soft only prefers to. It needs Volcano's network-topology-aware
	// scheduling and HyperNode objects describing the cluster's network.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.highestTierAllowed) || self.highestTierAllowed >= 1",message="highestTierAllowed must be at least 1, the lowest tier",fieldPath=".highestTierAllowed"
	NetworkTopology *volcanov1beta1.NetworkTopologySpec `json:"networkTopology,omitempty"`
}

// KAISchedulerPodGroupPolicySource configures scheduling by KAI Scheduler.
type KAISchedulerPodGroupPolicySource struct {
	// Queue is the KAI queue, put on the JobSet and its pods as the kai.scheduler/queue label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Queue string `json:"queue"`
}

func init() {
	SchemeBuilder.Register(&ClusterTrainingRuntime{}, &ClusterTrainingRuntimeList{}, &TrainingRuntime{}, &TrainingRuntimeList{})
}

// IsInitializer reports whether a replicated job is a dataset or model initializer: it runs, and
// finishes, before the training.
func IsInitializer(job *jobsetv1alpha2.ReplicatedJob) bool {
	a := Ancestor(job)
	return a == AncestorDatasetInitializer || a == AncestorModelInitializer
}

// Ancestor is the AncestorStepLabel of a replicated job: its Job template's, else its Pod
// template's, else "".
func Ancestor(job *jobsetv1alpha2.ReplicatedJob) string {
	if a, ok := job.Template.Labels[AncestorStepLabel]; ok {
		return a
	}
	return job.Template.Spec.Template.Labels[AncestorStepLabel]
}
