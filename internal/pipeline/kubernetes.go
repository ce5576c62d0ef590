package pipeline

import (
	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/progress"
)

// checkKubernetesRules refuses, at the TrainJob's own field, what Kubernetes would refuse once it
// is copied into the JobSet or its pods: the syntax and size of labels and annotations (the API
// server would refuse the JobSet) and env var names (the Job controller could make no pod). The
// TrainJob would otherwise be admitted and fail later, far from its cause. It also refuses the
// operator's own labels and annotations (operatorKeys).
func checkKubernetesRules(b *framework.Draft, patches []podPatch) field.ErrorList {
	tj := b.TrainJob
	spec := field.NewPath("spec")
	errs := metadataErrors(&trainer.MetadataPatch{Labels: tj.Spec.Labels, Annotations: tj.Spec.Annotations}, spec)
	for i, rp := range tj.Spec.RuntimePatches {
		if rp.TrainingRuntimeSpec == nil || rp.TrainingRuntimeSpec.Template == nil {
			continue
		}
		template := spec.Child("runtimePatches").Index(i).Child("trainingRuntimeSpec", "template")
		errs = append(errs, metadataErrors(rp.TrainingRuntimeSpec.Template.Metadata, template.Child("metadata"))...)
		if rp.TrainingRuntimeSpec.Template.Spec == nil {
			continue
		}
		for k, job := range rp.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs {
			if job.Template == nil {
				continue
			}
			path := template.Child("spec", "replicatedJobs").Index(k).Child("template")
			errs = append(errs, metadataErrors(job.Template.Metadata, path.Child("metadata"))...)
			if job.Template.Spec != nil && job.Template.Spec.Template != nil {
				errs = append(errs, metadataErrors(job.Template.Spec.Template.Metadata, path.Child("spec", "template", "metadata"))...)
			}
		}
	}
	if t := tj.Spec.Trainer; t != nil {
		errs = append(errs, envNameErrors(t.Env, framework.TrainerPath.Child("env"))...)
	}
	for _, p := range patches {
		for j, c := range p.patch.InitContainers {
			errs = append(errs, envNameErrors(c.Env, p.path.Child("initContainers").Index(j).Child("env"))...)
		}
		for j, c := range p.patch.Containers {
			errs = append(errs, envNameErrors(c.Env, p.path.Child("containers").Index(j).Child("env"))...)
		}
	}
	return errs
}

// operatorKeys are the labels and annotations the operator sets on what it builds, and a
// TrainJob may not: they place pods in a gang or a KAI queue (another TrainJob's, another team's),
// tell the operator's watches which TrainJob a Job is of, or give the trainer the CA it trusts.
var operatorKeys = []string{
	gang.CoschedulingLabel, gang.VolcanoAnnotation, gang.KAIQueueLabel, trainer.TrainJobNameLabel, framework.NodeJobsAnnotation, progress.CAAnnotation,
}

// metadataErrors checks labels and annotations as the API server checks an object's, at
// path's labels and annotations, and refuses the operator's own keys.
func metadataErrors(meta *trainer.MetadataPatch, path *field.Path) field.ErrorList {
	if meta == nil {
		return nil
	}
	errs := metav1validation.ValidateLabels(meta.Labels, path.Child("labels"))
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(meta.Annotations, path.Child("annotations"))...)
	for _, kind := range []struct {
		name    string
		entries map[string]string
	}{{"labels", meta.Labels}, {"annotations", meta.Annotations}} {
		for _, key := range operatorKeys {
			if _, ok := kind.entries[key]; ok {
				errs = append(errs, field.Forbidden(path.Child(kind.name).Key(key), "is set by the operator on what it builds, and may not be set by hand"))
			}
		}
	}
	return errs
}

// envNameErrors checks env var names as Kubernetes checks a pod's: printable ASCII but '='.
func envNameErrors(env []corev1.EnvVar, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, e := range env {
		for _, msg := range validation.IsRelaxedEnvVarName(e.Name) {
			errs = append(errs, field.Invalid(path.Index(i).Child("name"), e.Name, msg))
		}
	}
	return errs
}
