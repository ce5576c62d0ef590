// Package framework is the contract between the shared build pipeline and the ML frameworks.
// Each framework (torch, mpi, xgboost, jax, plain) is one controller in the manager and one
// package under this folder that implements Framework; the pipeline does everything else.
package framework

import (
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

	// ReservedEnv names the env vars the framework sets in the trainer container. A TrainJob or
	// runtime that sets one of them by hand cannot be built.
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

	// Create are children created before the JobSet is created, such as MPI's SSH key Secret
	// and hostfile ConfigMap, and never read. A ConfigMap is written again when its JobSet is
	// created again.
	Create []client.Object

	trainerJob, trainerContainer int
}

// TrainerJob is the replicated job labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer.
func (b *Draft) TrainerJob() *jobsetv1alpha2.ReplicatedJob {
	return &b.JobSet.Spec.ReplicatedJobs[b.trainerJob]
}

// TrainerJobIndex is the index of the trainer job in the JobSet's replicated jobs.
func (b *Draft) TrainerJobIndex() int { return b.trainerJob }

// TrainerContainer is the trainer container of the trainer job's pod template: the one named
// "node", else the one named "trainer".
func (b *Draft) TrainerContainer() *corev1.Container {
	return &b.TrainerJob().Template.Spec.Template.Spec.Containers[b.trainerContainer]
}

// SetTrainer records where the trainer job and container are. The pipeline calls it once.
func (b *Draft) SetTrainer(job, container int) {
	b.trainerJob, b.trainerContainer = job, container
}

// RuntimeTrainerContainer is the trainer container as the runtime has it, before any of the
// TrainJob's values were applied.
func (b *Draft) RuntimeTrainerContainer() *corev1.Container {
	return &b.Runtime.Spec.Template.Spec.ReplicatedJobs[b.trainerJob].Template.Spec.Template.Spec.Containers[b.trainerContainer]
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
