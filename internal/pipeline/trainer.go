package pipeline

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// Names the trainer container may have, in order of preference: "node" (KEP-2598), then
// "trainer" (KEP-2170).
var trainerContainerNames = []string{"node", "trainer"}

// applyTrainer finds the trainer job and container, applies spec.trainer to them, and sets the
// trainer job's parallelism and completions to the number of nodes.
func applyTrainer(b *framework.Draft) error {
	if err := checkAncestors(b); err != nil {
		return err
	}
	jobs := ancestorJobs(b, trainer.AncestorTrainer)
	label := trainer.AncestorStepLabel + "=" + trainer.AncestorTrainer
	switch len(jobs) {
	case 0:
		return b.RuntimeError(field.Required(framework.RuntimeJobsPath,
			fmt.Sprintf("the Job template or pod template of one replicated job must be labelled %s: that job runs the trainer", label)))
	case 1:
	default:
		return b.RuntimeError(field.Invalid(ancestorPath(b, jobs[1]), label, "only one replicated job may run the trainer"))
	}
	job := &b.JobSet.Spec.ReplicatedJobs[jobs[0]]
	if job.Replicas > 1 {
		// Ranks are pod indexes within one Job, and every framework's addresses name Job 0.
		return b.RuntimeError(field.Invalid(framework.RuntimeJobsPath.Index(jobs[0]).Child("replicas"), job.Replicas,
			"the trainer job must have 1 replica: its numNodes pods are one Job, whose pod indexes are the ranks"))
	}
	container := trainerContainer(job.Template.Spec.Template.Spec.Containers)
	if container < 0 {
		return b.RuntimeError(field.Required(framework.RuntimeJobsPath.Index(jobs[0]).Child("template", "spec", "template", "spec", "containers"),
			fmt.Sprintf("the trainer job %q needs a container named %q or %q", job.Name, trainerContainerNames[0], trainerContainerNames[1])))
	}
	b.SetTrainer(jobs[0], container)

	job.Template.Spec.Parallelism = ptr.To(b.NumNodes)
	job.Template.Spec.Completions = ptr.To(b.NumNodes)

	t := b.TrainJob.Spec.Trainer
	if t == nil {
		return nil
	}
	c := b.TrainerContainer()
	if t.Image != nil {
		c.Image = *t.Image
	}
	if t.Command != nil {
		c.Command = t.Command
	}
	if t.Args != nil {
		c.Args = t.Args
	}
	c.Env = upsert.Env(c.Env, t.Env...)
	return b.ApplyResourcesPerNode(c)
}

// checkNumProcPerNode refuses spec.trainer.numProcPerNode for a framework that does not read it
// (torch, mpi and flux do): jax runs one process per node, xgboost sizes its workers itself,
// plain passes nothing on.
func checkNumProcPerNode(b *framework.Draft, fw framework.Framework) *field.Error {
	t := b.TrainJob.Spec.Trainer
	if _, reads := fw.(framework.ProcessesPerNode); reads || t == nil || t.NumProcPerNode == nil {
		return nil
	}
	return field.Forbidden(framework.TrainerPath.Child("numProcPerNode"),
		fmt.Sprintf("%s runs the %s framework, which does not use it (torch, mpi and flux do)", b.Runtime, fw.Name()))
}

// checkAncestors refuses a replicated job whose Job template and pod template both carry the
// ancestor label with different values: which part of the TrainJob it runs would be a guess.
func checkAncestors(b *framework.Draft) error {
	for i, job := range b.JobSet.Spec.ReplicatedJobs {
		onJob, jobOK := job.Template.Labels[trainer.AncestorStepLabel]
		onPod, podOK := job.Template.Spec.Template.Labels[trainer.AncestorStepLabel]
		if jobOK && podOK && onJob != onPod {
			return b.RuntimeError(field.Invalid(
				framework.RuntimeJobsPath.Index(i).Child("template", "spec", "template", "metadata", "labels").Key(trainer.AncestorStepLabel),
				onPod, fmt.Sprintf("the Job template says %s=%s: the two labels must agree", trainer.AncestorStepLabel, onJob)))
		}
	}
	return nil
}

// ancestorPath is where the runtime labels replicated job i with its ancestor step: its Job
// template, else its pod template.
func ancestorPath(b *framework.Draft, i int) *field.Path {
	job := framework.RuntimeJobsPath.Index(i).Child("template")
	if _, ok := b.JobSet.Spec.ReplicatedJobs[i].Template.Labels[trainer.AncestorStepLabel]; !ok {
		job = job.Child("spec", "template")
	}
	return job.Child("metadata", "labels")
}

// ancestorJobs returns the indexes of the replicated jobs labelled as the given part of the
// TrainJob.
func ancestorJobs(b *framework.Draft, ancestor string) []int {
	var jobs []int
	for i := range b.JobSet.Spec.ReplicatedJobs {
		if trainer.Ancestor(&b.JobSet.Spec.ReplicatedJobs[i]) == ancestor {
			jobs = append(jobs, i)
		}
	}
	return jobs
}

// trainerContainer is the index of the trainer container among a pod's containers (the first of
// trainerContainerNames it has), or -1.
func trainerContainer(containers []corev1.Container) int {
	for _, name := range trainerContainerNames {
		if i := containerIndex(containers, name); i >= 0 {
			return i
		}
	}
	return -1
}

func containerIndex(containers []corev1.Container, name string) int {
	return slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == name })
}
