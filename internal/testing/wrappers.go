// Package testing has small builders that keep test cases to a few lines:
//
//	utiltesting.MakeTrainJob("a", "ns").RuntimeRef(trainer.TrainingRuntimeKind, "torch").NumNodes(2).Obj()
package testing

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// TrainJobWrapper builds a TrainJob.
type TrainJobWrapper struct{ trainer.TrainJob }

// MakeTrainJob returns a TrainJob that runs from the ClusterTrainingRuntime "runtime".
func MakeTrainJob(name, namespace string) *TrainJobWrapper {
	return &TrainJobWrapper{trainer.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: "runtime"},
		},
	}}
}

// Obj returns the TrainJob.
func (w *TrainJobWrapper) Obj() *trainer.TrainJob { return &w.TrainJob }

// RuntimeRef points the TrainJob at a runtime of the given kind.
func (w *TrainJobWrapper) RuntimeRef(kind, name string) *TrainJobWrapper {
	w.Spec.RuntimeRef = trainer.RuntimeRef{Name: name, Kind: ptr.To(kind), APIGroup: ptr.To(trainer.GroupVersion.Group)}
	return w
}

// Trainer sets spec.trainer.
func (w *TrainJobWrapper) Trainer(t *trainer.Trainer) *TrainJobWrapper {
	w.Spec.Trainer = t
	return w
}

// NumNodes sets spec.trainer.numNodes.
func (w *TrainJobWrapper) NumNodes(n int32) *TrainJobWrapper {
	w.trainer().NumNodes = &n
	return w
}

// NumProcPerNode sets spec.trainer.numProcPerNode.
func (w *TrainJobWrapper) NumProcPerNode(n intstr.IntOrString) *TrainJobWrapper {
	w.trainer().NumProcPerNode = &n
	return w
}

// Initializer sets spec.initializer.
func (w *TrainJobWrapper) Initializer(i *trainer.Initializer) *TrainJobWrapper {
	w.Spec.Initializer = i
	return w
}

// PodSpecOverrides sets spec.podSpecOverrides.
func (w *TrainJobWrapper) PodSpecOverrides(o ...trainer.PodSpecOverride) *TrainJobWrapper {
	w.Spec.PodSpecOverrides = o
	return w
}

// RuntimePatches sets spec.runtimePatches.
func (w *TrainJobWrapper) RuntimePatches(p ...trainer.RuntimePatch) *TrainJobWrapper {
	w.Spec.RuntimePatches = p
	return w
}

// JobPatch is a runtime patch by manager of the replicated jobs' pod templates: their metadata
// and spec.
func JobPatch(manager string, jobs ...trainer.ReplicatedJobPatch) trainer.RuntimePatch {
	return trainer.RuntimePatch{Manager: manager, TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: jobs}},
	}}
}

// PodPatch patches the pod template of the replicated job name.
func PodPatch(name string, meta *trainer.MetadataPatch, spec *trainer.PodSpecPatch) trainer.ReplicatedJobPatch {
	return trainer.ReplicatedJobPatch{Name: name, Template: &trainer.JobTemplatePatch{
		Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Metadata: meta, Spec: spec}},
	}}
}

// Suspend sets spec.suspend.
func (w *TrainJobWrapper) Suspend(s bool) *TrainJobWrapper {
	w.Spec.Suspend = &s
	return w
}

// TTLSecondsAfterFinished sets spec.ttlSecondsAfterFinished.
func (w *TrainJobWrapper) TTLSecondsAfterFinished(seconds int32) *TrainJobWrapper {
	w.Spec.TTLSecondsAfterFinished = &seconds
	return w
}

// ProgressDeadlineSeconds sets spec.progressDeadlineSeconds.
func (w *TrainJobWrapper) ProgressDeadlineSeconds(seconds int32) *TrainJobWrapper {
	w.Spec.ProgressDeadlineSeconds = &seconds
	return w
}

// ManagedBy sets spec.managedBy.
func (w *TrainJobWrapper) ManagedBy(m string) *TrainJobWrapper {
	w.Spec.ManagedBy = &m
	return w
}

func (w *TrainJobWrapper) trainer() *trainer.Trainer {
	if w.Spec.Trainer == nil {
		w.Spec.Trainer = &trainer.Trainer{}
	}
	return w.Spec.Trainer
}

// RuntimeSpecWrapper builds a TrainingRuntimeSpec.
type RuntimeSpecWrapper struct{ trainer.TrainingRuntimeSpec }

// MakeRuntimeSpec returns a runtime with one replicated job, "node", whose pod runs the trainer
// container "node".
func MakeRuntimeSpec() *RuntimeSpecWrapper {
	return &RuntimeSpecWrapper{trainer.TrainingRuntimeSpec{
		Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
			ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{ReplicatedJob("node", trainer.AncestorTrainer, "node")},
		}},
	}}
}

// ReplicatedJob returns one replica of a Job whose pod template, labelled with the ancestor step
// (none when empty), runs one container of the given name.
func ReplicatedJob(name, ancestor, container string) jobsetv1alpha2.ReplicatedJob {
	var labels map[string]string
	if ancestor != "" {
		labels = map[string]string{trainer.AncestorStepLabel: ancestor}
	}
	return jobsetv1alpha2.ReplicatedJob{
		Name:     name,
		Replicas: 1,
		Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyOnFailure,
					Containers:    []corev1.Container{{Name: container, Image: "busybox"}},
				},
			},
		}},
	}
}

// Obj returns the spec.
func (w *RuntimeSpecWrapper) Obj() trainer.TrainingRuntimeSpec { return w.TrainingRuntimeSpec }

// ReplicatedJobs replaces the JobSet template's replicated jobs.
func (w *RuntimeSpecWrapper) ReplicatedJobs(jobs ...jobsetv1alpha2.ReplicatedJob) *RuntimeSpecWrapper {
	w.Template.Spec.ReplicatedJobs = jobs
	return w
}

// NumNodes sets mlPolicy.numNodes.
func (w *RuntimeSpecWrapper) NumNodes(n int32) *RuntimeSpecWrapper {
	w.mlPolicy().NumNodes = &n
	return w
}

// Torch sets mlPolicy.torch.
func (w *RuntimeSpecWrapper) Torch(p *trainer.TorchMLPolicySource) *RuntimeSpecWrapper {
	w.mlPolicy().Torch = p
	return w
}

// MPI sets mlPolicy.mpi.
func (w *RuntimeSpecWrapper) MPI(p *trainer.MPIMLPolicySource) *RuntimeSpecWrapper {
	w.mlPolicy().MPI = p
	return w
}

// XGBoost sets mlPolicy.xgboost.
func (w *RuntimeSpecWrapper) XGBoost(p *trainer.XGBoostMLPolicySource) *RuntimeSpecWrapper {
	w.mlPolicy().XGBoost = p
	return w
}

// JAX sets mlPolicy.jax.
func (w *RuntimeSpecWrapper) JAX() *RuntimeSpecWrapper {
	w.mlPolicy().JAX = &trainer.JAXMLPolicySource{}
	return w
}

// Flux sets mlPolicy.flux.
func (w *RuntimeSpecWrapper) Flux(p *trainer.FluxMLPolicySource) *RuntimeSpecWrapper {
	w.mlPolicy().Flux = p
	return w
}

// PodGroupPolicy sets podGroupPolicy.
func (w *RuntimeSpecWrapper) PodGroupPolicy(p trainer.PodGroupPolicySource) *RuntimeSpecWrapper {
	w.TrainingRuntimeSpec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: p}
	return w
}

// RunPolicy sets the runtime's run policy.
func (w *RuntimeSpecWrapper) RunPolicy(p *trainer.RunPolicy) *RuntimeSpecWrapper {
	w.TrainingRuntimeSpec.RunPolicy = p
	return w
}

// StallPolicy sets the runtime's stall policy.
func (w *RuntimeSpecWrapper) StallPolicy(p *trainer.StallPolicy) *RuntimeSpecWrapper {
	w.TrainingRuntimeSpec.StallPolicy = p
	return w
}

func (w *RuntimeSpecWrapper) mlPolicy() *trainer.MLPolicy {
	if w.MLPolicy == nil {
		w.MLPolicy = &trainer.MLPolicy{}
	}
	return w.MLPolicy
}

// ClusterTrainingRuntime wraps a spec in a ClusterTrainingRuntime.
func ClusterTrainingRuntime(name string, spec trainer.TrainingRuntimeSpec) *trainer.ClusterTrainingRuntime {
	return &trainer.ClusterTrainingRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: trainer.ClusterTrainingRuntimeKind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       spec,
	}
}

// TrainingRuntime wraps a spec in a namespaced TrainingRuntime.
func TrainingRuntime(name, namespace string, spec trainer.TrainingRuntimeSpec) *trainer.TrainingRuntime {
	return &trainer.TrainingRuntime{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainingRuntimeKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       spec,
	}
}
