// Package framework is the contract between the shared build pipeline and the ML frameworks.
// Each framework (torch, mpi, xgboost, jax, plain) is one controller in the manager and one
// package under this folder that implements Framework; the pipeline does everything else.
package framework

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// Framework is the distributed-training policy of one ML framework.
type Framework interface {
	// Name names the framework's controller and its field manager, trainer.kubeflow.org/<name>.
	Name() string

	// Selects reports whether this framework runs the TrainJobs of runtimes with this ML policy.
	// The policy is nil for runtimes without one and for TrainJobs whose runtime is missing.
	Selects(*trainer.MLPolicy) bool

	// ReservedEnv names the env vars the framework sets in the trainer container (and in its
	// EnvTargets, if it has any). A TrainJob or runtime that sets one of them by hand there cannot
	// be built.
	ReservedEnv() []string

	// Apply adds the framework's settings (environment, ports, node counts, children beside the
	// JobSet) to the JobSet being built. It runs after the trainer and initializer values are
	// applied, and before the TrainJob's podSpecOverrides.
	Apply(*Draft) error
}

// ProcessesPerNode is implemented by the frameworks that read spec.trainer.numProcPerNode (torch,
// mpi). A TrainJob that sets it for another framework cannot be built: it would be ignored.
type ProcessesPerNode interface {
	ReadsNumProcPerNode()
}

// EnvTargets is implemented by a framework that sets its env vars in more containers than the
// trainer container: torch, in those its runtime names in mlPolicy.torch.envInjection. The
// pipeline refuses the framework's env vars set by hand in them, as in the trainer container.
type EnvTargets interface {
	// EnvTargets returns the containers, besides the trainer container, that get the framework's
	// env vars, or a *RuntimeError naming a job or container the runtime lacks.
	EnvTargets(*Draft) ([]ContainerRef, error)
}

// PodParts is implemented by a framework that adds init containers, volumes and volume mounts
// of its own to the trainer job's pods: flux. The pipeline refuses a runtime or TrainJob that
// has, or patches, one of the same name (of a mount, the same path) there: one would silently
// replace the other, or the pod would be invalid.
type PodParts interface {
	// ReservedPodParts names what the framework adds to the trainer job's pod template.
	ReservedPodParts() ReservedPodParts
}

// ReservedPodParts are the parts of the trainer job's pod template that a framework adds.
type ReservedPodParts struct {
	// InitContainers are names of init containers; no container may have them either, since a
	// pod's containers and init containers share their names.
	InitContainers []string
	// Volumes are names of the pod's volumes.
	Volumes []string
	// MountPaths are paths the trainer container mounts volumes at.
	MountPaths []string
}

// Select returns the framework that runs TrainJobs of a runtime with this ML policy: the first of
// frameworks that selects it, or nil when none does.
func Select(frameworks []Framework, policy *trainer.MLPolicy) Framework {
	for _, f := range frameworks {
		if f.Selects(policy) {
			return f
		}
	}
	return nil
}

// Draft is the JobSet being built for a TrainJob, as the framework sees it, with what goes beside
// it. (build.Build runs the steps that fill it.)
type Draft struct {
	TrainJob *trainer.TrainJob
	Runtime  *trainingruntime.Runtime

	// JobSet is the JobSet being built; Apply changes it in place.
	JobSet *jobsetv1alpha2.JobSet

	// NumNodes is the number of training nodes: the TrainJob's trainer.numNodes, else the
	// runtime's mlPolicy.numNodes, else 1. The trainer job's parallelism and completions are set
	// to it before Apply runs.
	NumNodes int32

	// NodeJobs name the replicated jobs whose pods are the training's nodes, when they are not
	// the trainer job's alone: MPI's node job (and its launcher, the trainer job, when it runs
	// as a node). status.nodes and status.selector count and select them.
	NodeJobs []string

	// Create are children created before the JobSet is created, such as MPI's SSH key Secret
	// and hostfile ConfigMap, and never read. A ConfigMap is written again each time its JobSet
	// is built (a Secret never is).
	Create []client.Object

	trainerJob, trainerContainer int
}

// ContainerRef is a container of a replicated job's pod template, by its indexes in the JobSet
// being built, which are also its indexes in the runtime's template.
type ContainerRef struct {
	Job   int  // the replicated job
	Init  bool // an init container, not a container
	Index int  // in the pod template's containers, or init containers
}

// Trainer is the trainer container.
func (b *Draft) Trainer() ContainerRef {
	return ContainerRef{Job: b.trainerJob, Index: b.trainerContainer}
}

// Container is a container of the JobSet being built.
func (b *Draft) Container(r ContainerRef) *corev1.Container {
	return container(&b.JobSet.Spec.ReplicatedJobs[r.Job], r)
}

// RuntimeContainer is a container as the runtime has it, before any of the TrainJob's values
// were applied.
func (b *Draft) RuntimeContainer(r ContainerRef) *corev1.Container {
	return container(&b.Runtime.Spec.Template.Spec.ReplicatedJobs[r.Job], r)
}

func container(job *jobsetv1alpha2.ReplicatedJob, r ContainerRef) *corev1.Container {
	spec := &job.Template.Spec.Template.Spec
	if r.Init {
		return &spec.InitContainers[r.Index]
	}
	return &spec.Containers[r.Index]
}

// ContainerNamed finds the container, else the init container, of the given name in a replicated
// job of the JobSet being built. Kubernetes keeps the names of both lists apart.
func (b *Draft) ContainerNamed(job int, name string) (ContainerRef, bool) {
	spec := &b.JobSet.Spec.ReplicatedJobs[job].Template.Spec.Template.Spec
	named := func(c corev1.Container) bool { return c.Name == name }
	if i := slices.IndexFunc(spec.Containers, named); i >= 0 {
		return ContainerRef{Job: job, Index: i}, true
	}
	if i := slices.IndexFunc(spec.InitContainers, named); i >= 0 {
		return ContainerRef{Job: job, Init: true, Index: i}, true
	}
	return ContainerRef{}, false
}

// TrainerJob is the replicated job labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer.
func (b *Draft) TrainerJob() *jobsetv1alpha2.ReplicatedJob {
	return &b.JobSet.Spec.ReplicatedJobs[b.trainerJob]
}

// TrainerContainer is the trainer container of the trainer job's pod template: the one named
// "node", else the one named "trainer".
func (b *Draft) TrainerContainer() *corev1.Container {
	return b.Container(b.Trainer())
}

// SetTrainer records where the trainer job and container are. The pipeline calls it once.
func (b *Draft) SetTrainer(job, container int) {
	b.trainerJob, b.trainerContainer = job, container
}

// RuntimeTrainerContainer is the trainer container as the runtime has it, before any of the
// TrainJob's values were applied.
func (b *Draft) RuntimeTrainerContainer() *corev1.Container {
	return b.RuntimeContainer(b.Trainer())
}

// NumNodesError says that NumNodes does not fit, at the field it came from: the TrainJob's
// spec.trainer.numNodes, else the runtime's spec.mlPolicy.numNodes.
func (b *Draft) NumNodesError(detail string) error {
	if t := b.TrainJob.Spec.Trainer; t != nil && t.NumNodes != nil {
		return field.Invalid(TrainerPath.Child("numNodes"), b.NumNodes, detail)
	}
	return b.RuntimeError(field.Invalid(MLPolicyPath.Child("numNodes"), b.NumNodes, detail))
}

// MLPolicy returns the runtime's ML policy, or nil when it has none.
func (b *Draft) MLPolicy() *trainer.MLPolicy {
	return b.Runtime.Spec.MLPolicy
}
