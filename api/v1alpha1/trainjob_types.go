package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TrainJobKind is the TrainJob's kind.
const TrainJobKind = "TrainJob"

// Values of spec.managedBy.
const (
	// TrainJobControllerName is the default spec.managedBy: this operator reconciles the TrainJob.
	TrainJobControllerName = "trainer.kubeflow.org/trainjob-controller"

	// MultiKueueControllerName hands the TrainJob to Kueue's MultiKueue, which runs it on a worker
	// cluster; this operator leaves such TrainJobs alone.
	MultiKueueControllerName = "kueue.x-k8s.io/multikueue"
)

// TrainJob runs one distributed training from a training runtime blueprint: the operator turns
// it into a JobSet with the framework's distributed settings, gang scheduling and the TrainJob's
// own trainer, initializer and override values.
//
// The name becomes the JobSet's and its headless Service's name, so it must be a DNS-1035 label.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.trainer.numNodes,statuspath=.status.nodes,selectorpath=.status.selector
// +kubebuilder:resource:shortName=tj,categories=trainer
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`,description="The TrainJob's state: Pending, Created, Running, Suspended, Complete or Failed"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`,description="Pods of the training that are ready, over their number (every node's, and MPI's launcher)"
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.spec.runtimeRef.name`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`,description="Number of training nodes (pods of the trainer job) of the TrainJob's JobSet"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.trainer.numNodes`,description="Number of training nodes the TrainJob asks for (kubectl scale sets it); empty means the runtime's"
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restarts`,description="How many times JobSet restarted all of the TrainJob's pods after a failure"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.failure.reason`,description="Why the first pod of the latest failed attempt failed: OOMKilled, Error, Evicted, ..."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.trainerStatus.progressPercentage`,priority=1,description="Percent of the training done, as the trainer last reported it"
// +kubebuilder:printcolumn:name="Remaining",type=integer,JSONPath=`.status.trainerStatus.estimatedRemainingSeconds`,priority=1,description="Seconds the training still needs, as the trainer last estimated it"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it names the JobSet and its Service"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be no more than 63 characters"
type TrainJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired TrainJob.
	// +required
	Spec TrainJobSpec `json:"spec"`

	// Status is the observed state of the TrainJob, written by the operator.
	// +optional
	Status TrainJobStatus `json:"status,omitempty"`
}

// TrainJobSpec is the desired TrainJob: which runtime to use and what to change in it.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.activeDeadlineSeconds) || has(self.activeDeadlineSeconds)",message="activeDeadlineSeconds may not be removed once set"
type TrainJobSpec struct {
	// RuntimeRef names the TrainingRuntime or ClusterTrainingRuntime this TrainJob runs from.
	// It cannot be changed after creation.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="runtimeRef is immutable"
	RuntimeRef RuntimeRef `json:"runtimeRef"`

	// Initializer configures the jobs that download the dataset and the pre-trained model before
	// training starts. The runtime must have the matching initializer jobs.
	// +optional
	Initializer *Initializer `json:"initializer,omitempty"`

	// Trainer overrides the runtime's trainer: image, command, arguments, environment, node count
	// and resources of the trainer container on every training node.
	// +optional
	Trainer *Trainer `json:"trainer,omitempty"`

	// Labels are merged into the labels of the JobSet, its Jobs and their Pods. On a clash with the
	// runtime's labels, the TrainJob's value wins.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations are merged into the annotations of the JobSet, its Jobs and their Pods. On a clash
	// with the runtime's annotations, the TrainJob's value wins.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// PodSpecOverrides change the Pod templates of the runtime's jobs for this TrainJob only, for
	// example a user's service account, volumes or node placement. They win over both the runtime
	// and spec.trainer. Tools built on upstream Kubeflow Trainer's Go types (Kueue among them) do
	// not know this field and drop it when they update the TrainJob: with them, use
	// runtimePatches.
	// +optional
	// +listType=atomic
	PodSpecOverrides []PodSpecOverride `json:"podSpecOverrides,omitempty"`

	// RuntimePatches change the runtime's JobSet template for this TrainJob only, one entry per
	// manager (a user, or a controller such as Kueue, which writes its node placement here before
	// it resumes the TrainJob). They are applied in list order, after the runtime, spec.trainer,
	// spec.podSpecOverrides and spec.labels and spec.annotations, so they win over all of them.
	// The field and its structure are upstream Kubeflow Trainer's.
	// +optional
	// +listType=map
	// +listMapKey=manager
	// +kubebuilder:validation:MaxItems=16
	RuntimePatches []RuntimePatch `json:"runtimePatches,omitempty"`

	// ActiveDeadlineSeconds is how long the TrainJob may run, counted from when it last started
	// running: its creation, or its last resume (a resume restarts the clock, as for a Job). Past
	// it, the TrainJob is Failed with reason DeadlineExceeded and its pods are stopped. It cannot
	// be changed nor removed once set. Unset, the runtime's runPolicy.activeDeadlineSeconds holds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="activeDeadlineSeconds is immutable"
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// TTLSecondsAfterFinished deletes the TrainJob, and with it everything it owns, this many
	// seconds after it finished (Complete or Failed), as for a Job: 0 deletes it as soon as it
	// finishes; unset, the runtime's runPolicy.ttlSecondsAfterFinished holds, and without one the
	// TrainJob is kept. The time counts from the terminal condition's transition, so a restart of
	// the operator does not reset it. Tools built on upstream Kubeflow Trainer v2.2's Go types
	// (Kueue among them) do not know this field and drop it when they update the TrainJob: set it
	// in the runtime's runPolicy for queued TrainJobs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// FailurePolicy overrides, for this TrainJob, how many restarts its runtime's
	// runPolicy.failurePolicy lets it spend.
	// +optional
	FailurePolicy *TrainJobFailurePolicy `json:"failurePolicy,omitempty"`

	// ProgressDeadlineSeconds overrides the runtime's stallPolicy.progressDeadlineSeconds: how
	// long the trainer's reported progress may stay the same while every pod of the training
	// runs before the TrainJob is Stalled. The runtime's stallPolicy.action applies, Fail when the
	// runtime has no stallPolicy. A TrainJob whose trainer never reports progress is never
	// stalled. It may change while the TrainJob runs. This operator's field: tools built on
	// upstream Kubeflow Trainer's Go types (Kueue among them) do not know it and drop it when they
	// update the TrainJob; set the runtime's stallPolicy for TrainJobs queued by Kueue.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// Suspend stops the TrainJob's pods, or keeps them from starting, while true. Setting it back
	// to false resumes the TrainJob. Queueing systems such as Kueue use it to admit TrainJobs.
	// Defaults to false.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`

	// ManagedBy names the controller that reconciles this TrainJob:
	// "trainer.kubeflow.org/trainjob-controller" (this operator) or "kueue.x-k8s.io/multikueue"
	// (Kueue's MultiKueue, which runs the TrainJob on a worker cluster; this operator then leaves
	// it alone). It cannot be changed after creation.
	// Defaults to "trainer.kubeflow.org/trainjob-controller".
	// +optional
	// +kubebuilder:default="trainer.kubeflow.org/trainjob-controller"
	// +kubebuilder:validation:Enum="trainer.kubeflow.org/trainjob-controller";"kueue.x-k8s.io/multikueue"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="managedBy is immutable"
	ManagedBy *string `json:"managedBy,omitempty"`
}

// RuntimeRef names a training runtime.
type RuntimeRef struct {
	// Name of the runtime. A TrainingRuntime must be in the TrainJob's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// APIGroup of the runtime.
	// Defaults to "trainer.kubeflow.org".
	// +optional
	// +kubebuilder:default="trainer.kubeflow.org"
	// +kubebuilder:validation:Enum="trainer.kubeflow.org"
	APIGroup *string `json:"apiGroup,omitempty"`

	// Kind of the runtime: ClusterTrainingRuntime (cluster-wide) or TrainingRuntime (in the
	// TrainJob's namespace).
	// Defaults to ClusterTrainingRuntime.
	// +optional
	// +kubebuilder:default="ClusterTrainingRuntime"
	// +kubebuilder:validation:Enum=TrainingRuntime;ClusterTrainingRuntime
	Kind *string `json:"kind,omitempty"`
}

// Initializer configures the dataset and model initializer jobs of the runtime.
type Initializer struct {
	// Dataset configures the job labelled
	// trainer.kubeflow.org/trainjob-ancestor-step=dataset-initializer.
	// +optional
	Dataset *DatasetInitializer `json:"dataset,omitempty"`

	// Model configures the job labelled
	// trainer.kubeflow.org/trainjob-ancestor-step=model-initializer.
	// +optional
	Model *ModelInitializer `json:"model,omitempty"`
}

// DatasetInitializer says where to fetch the dataset from.
type DatasetInitializer struct {
	// StorageUri is where the dataset is, as scheme://path: for example
	// "hf://tatsu-lab/alpaca" or "s3://bucket/path". It is passed to the initializer as STORAGE_URI.
	// An absolute path is passed on as it is. Empty, as upstream Kubeflow Trainer's SDK may write
	// it, means the runtime's STORAGE_URI.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^([a-zA-Z][a-zA-Z0-9+.-]*://.+|/.*)$')",message="storageUri must be empty, an absolute path, or have the form scheme://path, for example hf://org/dataset or s3://bucket/path"
	StorageUri *string `json:"storageUri,omitempty"`

	// Env is merged by name into the dataset initializer container's environment; these values win
	// over the runtime's.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// SecretRef names a Secret in the TrainJob's namespace with the credentials to download the
	// dataset. Its keys become environment variables of the initializer container.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// ModelInitializer says where to fetch the pre-trained model from.
type ModelInitializer struct {
	// StorageUri is where the model is, as scheme://path: for example
	// "hf://meta-llama/Llama-3.2-1B". It is passed to the initializer as STORAGE_URI.
	// An absolute path is passed on as it is. Empty, as upstream Kubeflow Trainer's SDK may write
	// it, means the runtime's STORAGE_URI.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^([a-zA-Z][a-zA-Z0-9+.-]*://.+|/.*)$')",message="storageUri must be empty, an absolute path, or have the form scheme://path, for example hf://org/model or s3://bucket/path"
	StorageUri *string `json:"storageUri,omitempty"`

	// Env is merged by name into the model initializer container's environment; these values win
	// over the runtime's.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// SecretRef names a Secret in the TrainJob's namespace with the credentials to download the
	// model. Its keys become environment variables of the initializer container.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
}

// Trainer overrides the trainer container of the runtime's job labelled
// trainer.kubeflow.org/trainjob-ancestor-step=trainer.
type Trainer struct {
	// Image of the trainer container.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=500
	Image *string `json:"image,omitempty"`

	// Command replaces the trainer container's entrypoint. At most 128 items of at most 1 MiB
	// each, as upstream Kubeflow Trainer allows (its SDK puts a training function's source into
	// args); the TrainJob, and the JobSet built from it, must still fit in what etcd stores of an
	// object (1.5 MiB).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=1048576
	Command []string `json:"command,omitempty"`

	// Args replaces the arguments of the trainer container's entrypoint. At most 128 items of at
	// most 1 MiB each, as command.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=1048576
	Args []string `json:"args,omitempty"`

	// Env is merged by name into the trainer container's environment; these values win over the
	// runtime's. The framework's own variables (PET_*, DMLC_*, JAX_*, ...) are set by the operator
	// and may not be set here.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// NumNodes is the number of training nodes (pods of the trainer job). It overrides the
	// runtime's mlPolicy.numNodes. At most 5000, the largest cluster Kubernetes is built for.
	// Under a runtime with a torch.elasticPolicy it is the size the training runs at now, between
	// minNodes and maxNodes (maxNodes when omitted), and may change while it runs: the scale
	// subresource (kubectl scale, a HorizontalPodAutoscaler) sets it, and the trainer job grows or
	// shrinks in place. Otherwise it changes only while the TrainJob is suspended.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5000
	NumNodes *int32 `json:"numNodes,omitempty"`

	// ElasticPolicy narrows, for this TrainJob, the bounds of its runtime's
	// mlPolicy.torch.elasticPolicy (KEP-2903): minNodes no lower and maxNodes no higher than the
	// runtime's. numNodes, the scale subresource and the TrainJob's autoscaler keep within them;
	// numNodes defaults to its maxNodes. Only for a runtime with an elastic policy; it changes only
	// while the TrainJob is suspended.
	// +optional
	ElasticPolicy *TrainerElasticPolicy `json:"elasticPolicy,omitempty"`

	// ResourcesPerNode is merged into the trainer container's resources on each node: each
	// request and limit it names wins, those it does not name stay the runtime's (so a GPU-only
	// value keeps the runtime's CPU and memory), claims are merged by name. A merge that leaves a
	// request above its limit is refused.
	// +optional
	ResourcesPerNode *corev1.ResourceRequirements `json:"resourcesPerNode,omitempty"`

	// ResourceClaimsPerNode are the devices each training node claims through Dynamic Resource
	// Allocation (resource.k8s.io, KEP-2782): every node pod gets each as a pod resource claim,
	// and its trainer container (or the containers a claim lists) uses it. A claim names a
	// ResourceClaimTemplate of the TrainJob's namespace (each pod gets its own ResourceClaim made
	// from it, deleted with the pod) or a ResourceClaim (shared by every pod). The device count is
	// the template's. A claim of the same name in the runtime, spec.podSpecOverrides or a runtime
	// patch is replaced by this one on the node pods.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	ResourceClaimsPerNode []TrainerResourceClaim `json:"resourceClaimsPerNode,omitempty"`

	// NumProcPerNode is the number of training processes on each node: a positive integer such as
	// 4, or for torch "auto" (one per GPU when the node has GPUs, else per CPU), "cpu" or "gpu".
	// It overrides the runtime's value. Write an integer for TrainJobs queued by Kueue: it reads
	// TrainJobs with upstream Kubeflow Trainer's types, where this field is an integer.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(auto|cpu|gpu|[1-9][0-9]*)$')",message="numProcPerNode must be a positive integer, auto, cpu or gpu"
	NumProcPerNode *intstr.IntOrString `json:"numProcPerNode,omitempty"`
}

// TrainerResourceClaim is a device claim of each training node: a pod resource claim, and the
// containers that use it.
// +kubebuilder:validation:XValidation:rule="has(self.resourceClaimName) != has(self.resourceClaimTemplateName)",message="exactly one of resourceClaimName and resourceClaimTemplateName must be set"
type TrainerResourceClaim struct {
	// Name is the claim's name in the pod, which containers' resources.claims use: a DNS label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// ResourceClaimName names a ResourceClaim of the TrainJob's namespace, which every node pod
	// shares.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ResourceClaimName *string `json:"resourceClaimName,omitempty"`

	// ResourceClaimTemplateName names a ResourceClaimTemplate of the TrainJob's namespace: each
	// node pod gets a ResourceClaim of its own, made from it and deleted with the pod.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ResourceClaimTemplateName *string `json:"resourceClaimTemplateName,omitempty"`

	// ContainerNames are the containers (or init containers) of the node pods that use the claim;
	// each node pod must have them. Empty means the trainer container alone ("node", else
	// "trainer").
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	ContainerNames []string `json:"containerNames,omitempty"`
}

// PodSpecOverride changes the Pod template of some of the runtime's jobs for one TrainJob.
type PodSpecOverride struct {
	// TargetJobs are the names of the runtime's replicated jobs to change. Empty means all of them.
	// Each must name a job of the runtime.
	// +optional
	// +listType=set
	TargetJobs []string `json:"targetJobs,omitempty"`

	PodSpecPatch `json:",inline"`
}

// PodSpecPatch changes a Pod template: the fields of spec.podSpecOverrides and of a runtime
// patch's pod template.
type PodSpecPatch struct {
	// ServiceAccountName replaces the Pods' service account.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName *string `json:"serviceAccountName,omitempty"`

	// NodeSelector is merged into the Pods' node selector; these values win.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Affinity replaces the Pods' affinity.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations are added to the Pods' tolerations by spec.podSpecOverrides; a runtime patch's
	// replace them, as upstream Kubeflow Trainer's do.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Volumes are merged by name into the Pods' volumes; these win.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// InitContainers change init containers of the Pods, by name. Each must exist in the runtime.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	InitContainers []ContainerPatch `json:"initContainers,omitempty"`

	// Containers change containers of the Pods, by name. Each must exist in the runtime.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Containers []ContainerPatch `json:"containers,omitempty"`

	// ResourceClaims are merged by name into the Pods' resource claims (Dynamic Resource
	// Allocation, KEP-2782). The containers that use a claim name it in their resources.claims:
	// in the runtime's template, or for the trainer container spec.trainer.resourcesPerNode.claims.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	ResourceClaims []corev1.PodResourceClaim `json:"resourceClaims,omitempty"`

	// SchedulingGates are merged by name into the Pods' scheduling gates.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	SchedulingGates []corev1.PodSchedulingGate `json:"schedulingGates,omitempty"`

	// ImagePullSecrets are merged by name into the Pods' image pull secrets.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// SecurityContext replaces the Pods' security context.
	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// TerminationGracePeriodSeconds replaces how long the Pods' containers have to stop after
	// SIGTERM (on suspension, preemption or deletion) before they are killed: time for a trainer
	// to write a checkpoint.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// ContainerPatch changes one container of the runtime's Pod template.
type ContainerPatch struct {
	// Name of the container. The runtime's Pod template must have it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Env is merged by name into the container's environment; these values win.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// VolumeMounts are merged by mount path into the container's volume mounts; these win.
	// +optional
	// +listType=map
	// +listMapKey=mountPath
	// +kubebuilder:validation:MaxItems=128
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// SecurityContext replaces the container's security context.
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
}

// TrainJobFailurePolicy is a TrainJob's own part of its failure policy.
type TrainJobFailurePolicy struct {
	// MaxRestarts is how many times the training may restart after failures that count; the
	// runtime's (runPolicy.failurePolicy.maxRestarts, else its template's) when omitted.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`
}

// TrainerElasticPolicy is a TrainJob's own elastic bounds, within its runtime's.
// +kubebuilder:validation:XValidation:rule="!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",message="minNodes must not be greater than maxNodes"
type TrainerElasticPolicy struct {
	// MinNodes is the fewest nodes the training runs on; the runtime's when omitted.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5000
	MinNodes *int32 `json:"minNodes,omitempty"`

	// MaxNodes is the most nodes the training runs on; the runtime's when omitted.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5000
	MaxNodes *int32 `json:"maxNodes,omitempty"`
}

// RuntimePatch is one manager's change to the runtime's JobSet template, for one TrainJob.
type RuntimePatch struct {
	// Manager names who owns this patch: a user, or a controller such as Kueue
	// ("kueue.x-k8s.io/manager"). It keys the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Manager string `json:"manager"`

	// Time is when the manager last changed the patch, for people reading it. The operator's
	// webhook sets it: a new patch gets the request's time unless it brings one, a changed patch
	// gets the request's time, a patch that did not change keeps its time. The operator does not
	// use it otherwise.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// TrainingRuntimeSpec is the patch of the runtime's spec.
	// +optional
	TrainingRuntimeSpec *TrainingRuntimeSpecPatch `json:"trainingRuntimeSpec,omitempty"`
}

// TrainingRuntimeSpecPatch is the part of a runtime's spec a patch may change.
type TrainingRuntimeSpecPatch struct {
	// Template patches the JobSet template.
	// +optional
	Template *JobSetTemplatePatch `json:"template,omitempty"`
}

// JobSetTemplatePatch patches the JobSet's labels and annotations and its replicated jobs.
type JobSetTemplatePatch struct {
	// Metadata's labels and annotations are merged into the JobSet's; these values win.
	// +optional
	Metadata *MetadataPatch `json:"metadata,omitempty"`

	// Spec patches the JobSet's replicated jobs.
	// +optional
	Spec *JobSetSpecPatch `json:"spec,omitempty"`
}

// JobSetSpecPatch patches replicated jobs by name.
type JobSetSpecPatch struct {
	// ReplicatedJobs patch the runtime's replicated jobs of the same name. Each must name a job of
	// the runtime.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	ReplicatedJobs []ReplicatedJobPatch `json:"replicatedJobs,omitempty"`
}

// ReplicatedJobPatch patches one replicated job.
type ReplicatedJobPatch struct {
	// Name of the runtime's replicated job.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Template patches the job's Job template.
	// +optional
	Template *JobTemplatePatch `json:"template,omitempty"`
}

// PodSpec is the patch of the job's Pod spec, or nil when it has none.
func (p *ReplicatedJobPatch) PodSpec() *PodSpecPatch {
	if t := p.Template; t != nil && t.Spec != nil && t.Spec.Template != nil {
		return t.Spec.Template.Spec
	}
	return nil
}

// JobTemplatePatch patches a Job template.
type JobTemplatePatch struct {
	// Metadata's labels and annotations are merged into the Job template's; these values win.
	// +optional
	Metadata *MetadataPatch `json:"metadata,omitempty"`

	// Spec patches the Job's Pod template.
	// +optional
	Spec *JobSpecPatch `json:"spec,omitempty"`
}

// JobSpecPatch patches a Job's Pod template.
type JobSpecPatch struct {
	// Template patches the Pod template.
	// +optional
	Template *PodTemplatePatch `json:"template,omitempty"`
}

// PodTemplatePatch patches a Pod template.
type PodTemplatePatch struct {
	// Metadata's labels and annotations are merged into the Pod template's; these values win.
	// +optional
	Metadata *MetadataPatch `json:"metadata,omitempty"`

	// Spec patches the Pod spec.
	// +optional
	Spec *PodSpecPatch `json:"spec,omitempty"`
}

// MetadataPatch is the part of an object's metadata a patch may change.
type MetadataPatch struct {
	// Labels are merged into the object's labels; these values win.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations are merged into the object's annotations; these values win.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ActiveDeadline is how long the TrainJob may run, in seconds, and the field that says so: its
// own spec.activeDeadlineSeconds, else its runtime's runPolicy.activeDeadlineSeconds as its
// runtime snapshot records it (from when it first ran). ok is false when it has no deadline.
func (tj *TrainJob) ActiveDeadline() (seconds int64, field string, ok bool) {
	if d := tj.Spec.ActiveDeadlineSeconds; d != nil {
		return *d, "spec.activeDeadlineSeconds", true
	}
	if p := tj.recordedRunPolicy(); p != nil && p.ActiveDeadlineSeconds != nil {
		return *p.ActiveDeadlineSeconds, "runtime's runPolicy.activeDeadlineSeconds", true
	}
	return 0, "", false
}

// TTLAfterFinished is how long the TrainJob is kept once finished, in seconds, and the field that
// says so: its own spec.ttlSecondsAfterFinished, else its runtime's
// runPolicy.ttlSecondsAfterFinished as its runtime snapshot records it. ok is false when it is
// kept.
func (tj *TrainJob) TTLAfterFinished() (seconds int32, field string, ok bool) {
	if t := tj.Spec.TTLSecondsAfterFinished; t != nil {
		return *t, "spec.ttlSecondsAfterFinished", true
	}
	if p := tj.recordedRunPolicy(); p != nil && p.TTLSecondsAfterFinished != nil {
		return *p.TTLSecondsAfterFinished, "runtime's runPolicy.ttlSecondsAfterFinished", true
	}
	return 0, "", false
}

func (tj *TrainJob) recordedRunPolicy() *RunPolicy {
	if tj.Status.RuntimeSnapshot == nil {
		return nil
	}
	return tj.Status.RuntimeSnapshot.RunPolicy
}

// ManagedByOperator reports whether this operator reconciles the TrainJob, rather than another
// controller such as MultiKueue: spec.managedBy is unset or names this operator.
func (tj *TrainJob) ManagedByOperator() bool {
	return tj.Spec.ManagedBy == nil || *tj.Spec.ManagedBy == TrainJobControllerName
}

// FinishedCondition is the TrainJob's terminal condition (Complete or Failed) that is True, or
// nil.
func (tj *TrainJob) FinishedCondition() *metav1.Condition {
	for i, c := range tj.Status.Conditions {
		if (c.Type == TrainJobComplete || c.Type == TrainJobFailed) && c.Status == metav1.ConditionTrue {
			return &tj.Status.Conditions[i]
		}
	}
	return nil
}

// Finished reports whether the TrainJob is Complete or Failed. A finished TrainJob is final: the
// operator never writes its children again, not even recreates them when deleted.
func (tj *TrainJob) Finished() bool { return tj.FinishedCondition() != nil }

// TrainJobList is a list of TrainJobs.
//
// +kubebuilder:object:root=true
type TrainJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrainJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TrainJob{}, &TrainJobList{})
}
