package testing

import (
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// JobSetWrapper builds the JobSet expected from a TrainJob.
type JobSetWrapper struct{ jobsetv1alpha2.JobSet }

// MakeJobSet returns the JobSet that the TrainJob tj builds from a runtime spec before any of
// the TrainJob's values are applied: the runtime's template, named and owned by tj, not
// suspended, with every job labelled as the trainer's running one pod, and JobSet's defaults
// where the template leaves them out (all jobs must succeed, they start in any order, Indexed
// jobs whose pods restart on failure, pod host names that resolve).
func MakeJobSet(tj *trainer.TrainJob, spec trainer.TrainingRuntimeSpec) *JobSetWrapper {
	w := &JobSetWrapper{jobsetv1alpha2.JobSet{
		TypeMeta: metav1.TypeMeta{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            tj.Name,
			Namespace:       tj.Namespace,
			Labels:          spec.Template.Labels,
			Annotations:     maps.Clone(spec.Template.Annotations),
			OwnerReferences: []metav1.OwnerReference{framework.OwnerReference(tj)},
		},
		Spec: spec.Template.Spec,
	}}
	w.JobSet = *w.DeepCopy()
	if w.JobSet.Annotations == nil {
		w.JobSet.Annotations = map[string]string{}
	}
	w.JobSet.Annotations[framework.SpecHashAnnotation] = framework.SpecHash(tj, spec.MLPolicy)
	w.Spec.Suspend = ptr.To(false)
	for i := range w.Spec.ReplicatedJobs {
		job := &w.Spec.ReplicatedJobs[i]
		if trainer.Ancestor(job) == trainer.AncestorTrainer {
			job.Template.Spec.Parallelism = ptr.To[int32](1)
			job.Template.Spec.Completions = ptr.To[int32](1)
		}
		if job.Template.Spec.CompletionMode == nil {
			job.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}
		if job.Template.Spec.Template.Spec.RestartPolicy == "" {
			job.Template.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		}
	}
	if w.Spec.SuccessPolicy == nil {
		w.Spec.SuccessPolicy = &jobsetv1alpha2.SuccessPolicy{Operator: jobsetv1alpha2.OperatorAll}
	}
	if w.Spec.StartupPolicy == nil {
		w.Spec.StartupPolicy = &jobsetv1alpha2.StartupPolicy{StartupPolicyOrder: jobsetv1alpha2.AnyOrder}
	}
	if w.Spec.Network == nil {
		w.Spec.Network = &jobsetv1alpha2.Network{EnableDNSHostnames: ptr.To(true), PublishNotReadyAddresses: ptr.To(true)}
	}
	return w
}

// Obj returns the JobSet, with the training's size recorded, its Jobs labelled with the
// TrainJob's name, and its containers keeping their last log lines when they fail, as the build
// does.
func (w *JobSetWrapper) Obj() *jobsetv1alpha2.JobSet {
	for i := range w.Spec.ReplicatedJobs {
		job := &w.Spec.ReplicatedJobs[i].Template
		if job.Labels == nil {
			job.Labels = map[string]string{}
		}
		job.Labels[trainer.TrainJobNameLabel] = w.Name
		pod := &job.Spec.Template.Spec
		for _, c := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
			for k := range c {
				if c[k].TerminationMessagePolicy == "" {
					c[k].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
				}
			}
		}
	}
	w.JobSet.Annotations[framework.TrainingPodsAnnotation] = framework.TrainingPods(&w.JobSet)
	w.JobSet.Annotations[framework.TrainerJobAnnotation] = framework.TrainerJobName(&w.JobSet)
	return &w.JobSet
}

// Suspend sets spec.suspend.
func (w *JobSetWrapper) Suspend(s bool) *JobSetWrapper {
	w.Spec.Suspend = &s
	return w
}

// Labels sets the JobSet's labels.
func (w *JobSetWrapper) Labels(l map[string]string) *JobSetWrapper {
	w.ObjectMeta.Labels = l
	return w
}

// Annotations sets the JobSet's annotations, besides those the build records.
func (w *JobSetWrapper) Annotations(a map[string]string) *JobSetWrapper {
	hash := w.ObjectMeta.Annotations[framework.SpecHashAnnotation]
	w.ObjectMeta.Annotations = maps.Clone(a)
	w.ObjectMeta.Annotations[framework.SpecHashAnnotation] = hash
	return w
}

// NumNodes sets the parallelism and completions of a replicated job.
func (w *JobSetWrapper) NumNodes(job string, n int32) *JobSetWrapper {
	return w.ReplicatedJob(job, func(j *jobsetv1alpha2.ReplicatedJob) {
		j.Template.Spec.Parallelism = ptr.To(n)
		j.Template.Spec.Completions = ptr.To(n)
	})
}

// ReplicatedJob changes a replicated job.
func (w *JobSetWrapper) ReplicatedJob(name string, change func(*jobsetv1alpha2.ReplicatedJob)) *JobSetWrapper {
	i := slices.IndexFunc(w.Spec.ReplicatedJobs, func(j jobsetv1alpha2.ReplicatedJob) bool { return j.Name == name })
	if i < 0 {
		panic("no replicated job " + name)
	}
	change(&w.Spec.ReplicatedJobs[i])
	return w
}

// PodSpec changes the pod template spec of a replicated job.
func (w *JobSetWrapper) PodSpec(job string, change func(*corev1.PodSpec)) *JobSetWrapper {
	return w.ReplicatedJob(job, func(j *jobsetv1alpha2.ReplicatedJob) { change(&j.Template.Spec.Template.Spec) })
}

// Container changes a container of a replicated job's pod template.
func (w *JobSetWrapper) Container(job, container string, change func(*corev1.Container)) *JobSetWrapper {
	return w.PodSpec(job, func(s *corev1.PodSpec) {
		i := slices.IndexFunc(s.Containers, func(c corev1.Container) bool { return c.Name == container })
		if i < 0 {
			panic("no container " + container + " in " + job)
		}
		change(&s.Containers[i])
	})
}

// UID gives the TrainJob a UID, as the API server would.
func (w *TrainJobWrapper) UID(uid string) *TrainJobWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}
