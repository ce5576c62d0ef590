package framework

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A TrainJob that cannot be built gets an error that names the field at fault, so that an
// admission webhook can reject the right object at the right line and the TrainJob's condition
// says the same: a *field.Error with a path from the TrainJob's root ("spec.trainer.numNodes")
// when the TrainJob is wrong, a *RuntimeError with a path from the runtime's root
// ("spec.mlPolicy.torch.numProcPerNode") when its runtime is.

// RuntimeError is a field of a runtime that keeps TrainJobs from being built from it.
type RuntimeError struct {
	// Runtime names the runtime as a user would: `ClusterTrainingRuntime "torch"`.
	Runtime string
	Err     *field.Error
}

func (e *RuntimeError) Error() string { return fmt.Sprintf("%s: %s", e.Runtime, e.Err) }

// RuntimeError wraps an error of a field of the runtime being built from.
func (b *Draft) RuntimeError(err *field.Error) error {
	return &RuntimeError{Runtime: b.Runtime.String(), Err: err}
}

// Paths of fields the steps name in their errors.
var (
	// RuntimeJobsPath is the runtime's list of replicated jobs.
	RuntimeJobsPath = field.NewPath("spec", "template", "spec", "replicatedJobs")
	// TrainerPath is the TrainJob's spec.trainer.
	TrainerPath = field.NewPath("spec", "trainer")
	// MLPolicyPath is the runtime's spec.mlPolicy.
	MLPolicyPath = field.NewPath("spec", "mlPolicy")
)

// Path is the runtime's path of the container.
func (r ContainerRef) Path() *field.Path {
	list := "containers"
	if r.Init {
		list = "initContainers"
	}
	return RuntimeJobsPath.Index(r.Job).Child("template", "spec", "template", "spec", list).Index(r.Index)
}

// TrainerJobPath is the runtime's path of the trainer job.
func (b *Draft) TrainerJobPath() *field.Path {
	return RuntimeJobsPath.Index(b.trainerJob)
}

// TrainerContainerPath is the runtime's path of the trainer container.
func (b *Draft) TrainerContainerPath() *field.Path {
	return b.Trainer().Path()
}
