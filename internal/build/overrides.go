package build

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// applyPodSpecOverrides applies spec.podSpecOverrides in order to the pod templates of their
// target jobs (all jobs when targetJobs is empty). They run last, so they win over the runtime,
// spec.trainer and the framework. A target job or container the runtime lacks is an error.
func applyPodSpecOverrides(b *framework.Build) error {
	jobs := b.JobSet.Spec.ReplicatedJobs
	for i, o := range b.TrainJob.Spec.PodSpecOverrides {
		path := field.NewPath("spec", "podSpecOverrides").Index(i)
		targets := o.TargetJobs
		if len(targets) == 0 {
			for _, job := range jobs {
				targets = append(targets, job.Name)
			}
		}
		for t, name := range targets {
			j := slices.IndexFunc(jobs, func(job jobsetv1alpha2.ReplicatedJob) bool { return job.Name == name })
			if j < 0 {
				return field.Invalid(path.Child("targetJobs").Index(t), name, fmt.Sprintf("%s has no replicated job of that name", b.Runtime))
			}
			where := fmt.Sprintf("replicated job %q of %s", name, b.Runtime)
			if err := overridePodSpec(&jobs[j].Template.Spec.Template.Spec, &o, path, where); err != nil {
				return err
			}
		}
	}
	return nil
}

func overridePodSpec(spec *corev1.PodSpec, o *trainer.PodSpecOverride, path *field.Path, where string) error {
	if o.ServiceAccountName != nil {
		spec.ServiceAccountName = *o.ServiceAccountName
	}
	if o.NodeSelector != nil {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		maps.Copy(spec.NodeSelector, o.NodeSelector)
	}
	if o.Affinity != nil {
		spec.Affinity = o.Affinity
	}
	spec.Tolerations = append(spec.Tolerations, o.Tolerations...)
	spec.Volumes = upsert.ByKey(spec.Volumes, upsert.VolumeName, o.Volumes...)
	spec.SchedulingGates = upsert.ByKey(spec.SchedulingGates, upsert.GateName, o.SchedulingGates...)
	spec.ImagePullSecrets = upsert.ByKey(spec.ImagePullSecrets, upsert.ReferenceName, o.ImagePullSecrets...)
	if err := overrideContainers(spec.InitContainers, o.InitContainers, path.Child("initContainers"), "init container", where); err != nil {
		return err
	}
	return overrideContainers(spec.Containers, o.Containers, path.Child("containers"), "container", where)
}

func overrideContainers(containers []corev1.Container, overrides []trainer.ContainerOverride, path *field.Path, kind, where string) error {
	for i, o := range overrides {
		c := containerIndex(containers, o.Name)
		if c < 0 {
			return field.Invalid(path.Index(i).Child("name"), o.Name, fmt.Sprintf("%s has no %s of that name", where, kind))
		}
		containers[c].Env = upsert.Env(containers[c].Env, o.Env...)
		containers[c].VolumeMounts = upsert.ByKey(containers[c].VolumeMounts, upsert.MountPath, o.VolumeMounts...)
	}
	return nil
}
