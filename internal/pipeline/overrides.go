package pipeline

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

// podPatch is one change the TrainJob makes to the pod templates of some replicated jobs: a
// spec.podSpecOverrides entry, or the pod spec of a job in a spec.runtimePatches entry.
type podPatch struct {
	path  *field.Path // where patch is in the TrainJob
	jobs  []int       // the replicated jobs it changes, as indexes into the JobSet's
	patch *trainer.PodSpecPatch
	// runtimePatch is true for a patch of spec.runtimePatches, whose tolerations replace the
	// pod's (a pod spec's tolerations are an atomic list, as upstream Trainer merges them), where
	// those of spec.podSpecOverrides are added (KEP-2170).
	runtimePatch bool
}

// podPatches lists the TrainJob's pod patches in the order they apply: spec.podSpecOverrides,
// then spec.runtimePatches, each in list order, and an error for each job the runtime lacks.
func podPatches(b *framework.Draft) ([]podPatch, field.ErrorList) {
	var (
		patches []podPatch
		errs    field.ErrorList
	)
	for i := range b.TrainJob.Spec.PodSpecOverrides {
		o := &b.TrainJob.Spec.PodSpecOverrides[i]
		path := field.NewPath("spec", "podSpecOverrides").Index(i)
		p := podPatch{path: path, patch: &o.PodSpecPatch}
		if len(o.TargetJobs) == 0 {
			p.jobs = make([]int, len(b.JobSet.Spec.ReplicatedJobs))
			for j := range p.jobs {
				p.jobs[j] = j
			}
		}
		for t, name := range o.TargetJobs {
			j, err := replicatedJob(b, name, path.Child("targetJobs").Index(t))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			p.jobs = append(p.jobs, j)
		}
		patches = append(patches, p)
	}
	jobErrs := forEachJobPatch(b, func(job int, patch *trainer.ReplicatedJobPatch, path *field.Path) {
		if spec := patch.PodSpec(); spec != nil {
			patches = append(patches, podPatch{
				path:         path.Child("template", "spec", "template", "spec"),
				jobs:         []int{job},
				patch:        spec,
				runtimePatch: true,
			})
		}
	})
	return patches, append(errs, jobErrs...)
}

// forEachJobPatch calls f with each replicated job patch of spec.runtimePatches, in order, and
// the index of the job it names. It returns an error for each job the runtime lacks.
func forEachJobPatch(b *framework.Draft, f func(job int, patch *trainer.ReplicatedJobPatch, path *field.Path)) field.ErrorList {
	var errs field.ErrorList
	for i, rp := range b.TrainJob.Spec.RuntimePatches {
		if rp.TrainingRuntimeSpec == nil || rp.TrainingRuntimeSpec.Template == nil || rp.TrainingRuntimeSpec.Template.Spec == nil {
			continue
		}
		path := field.NewPath("spec", "runtimePatches").Index(i).Child("trainingRuntimeSpec", "template", "spec", "replicatedJobs")
		for k := range rp.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs {
			patch := &rp.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs[k]
			job, err := replicatedJob(b, patch.Name, path.Index(k).Child("name"))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			f(job, patch, path.Index(k))
		}
	}
	return errs
}

// replicatedJob is the index of the JobSet's replicated job of the given name, which the
// TrainJob names at path.
func replicatedJob(b *framework.Draft, name string, path *field.Path) (int, *field.Error) {
	j := slices.IndexFunc(b.JobSet.Spec.ReplicatedJobs, func(job jobsetv1alpha2.ReplicatedJob) bool { return job.Name == name })
	if j < 0 {
		return 0, field.Invalid(path, name, fmt.Sprintf("%s has no replicated job of that name", b.Runtime))
	}
	return j, nil
}

// applyPodPatches applies spec.podSpecOverrides and the pod specs of spec.runtimePatches, in
// that order, to the pod templates of their jobs. They run after the framework, so they win over
// the runtime, spec.trainer and the framework. A container the runtime lacks is an error.
func applyPodPatches(b *framework.Draft) error {
	patches, errs := podPatches(b)
	if len(errs) > 0 {
		return errs.ToAggregate()
	}
	for _, p := range patches {
		for _, j := range p.jobs {
			job := &b.JobSet.Spec.ReplicatedJobs[j]
			where := fmt.Sprintf("replicated job %q of %s", job.Name, b.Runtime)
			errs = append(errs, patchPodSpec(&job.Template.Spec.Template.Spec, p, where)...)
		}
	}
	return errs.ToAggregate()
}

func patchPodSpec(spec *corev1.PodSpec, pp podPatch, where string) field.ErrorList {
	p, path := pp.patch, pp.path
	if p.ServiceAccountName != nil {
		spec.ServiceAccountName = *p.ServiceAccountName
	}
	if p.NodeSelector != nil {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		maps.Copy(spec.NodeSelector, p.NodeSelector)
	}
	if p.Affinity != nil {
		spec.Affinity = p.Affinity
	}
	if p.SecurityContext != nil {
		spec.SecurityContext = p.SecurityContext
	}
	if p.TerminationGracePeriodSeconds != nil {
		spec.TerminationGracePeriodSeconds = p.TerminationGracePeriodSeconds
	}
	if pp.runtimePatch && p.Tolerations != nil {
		spec.Tolerations = p.Tolerations
	} else {
		spec.Tolerations = append(spec.Tolerations, p.Tolerations...)
	}
	spec.Volumes = upsert.ByKey(spec.Volumes, upsert.VolumeName, p.Volumes...)
	spec.ResourceClaims = upsert.ByKey(spec.ResourceClaims, upsert.PodClaimName, p.ResourceClaims...)
	spec.SchedulingGates = upsert.ByKey(spec.SchedulingGates, upsert.GateName, p.SchedulingGates...)
	spec.ImagePullSecrets = upsert.ByKey(spec.ImagePullSecrets, upsert.ReferenceName, p.ImagePullSecrets...)
	return slices.Concat(checkPodResourceClaims(p.ResourceClaims, path.Child("resourceClaims")),
		patchContainers(spec.InitContainers, p.InitContainers, path.Child("initContainers"), "init container", where),
		patchContainers(spec.Containers, p.Containers, path.Child("containers"), "container", where))
}

func patchContainers(containers []corev1.Container, patches []trainer.ContainerPatch, path *field.Path, kind, where string) field.ErrorList {
	var errs field.ErrorList
	for i, p := range patches {
		c := containerIndex(containers, p.Name)
		if c < 0 {
			errs = append(errs, field.Invalid(path.Index(i).Child("name"), p.Name, fmt.Sprintf("%s has no %s of that name", where, kind)))
			continue
		}
		containers[c].Env = upsert.Env(containers[c].Env, p.Env...)
		containers[c].VolumeMounts = upsert.ByKey(containers[c].VolumeMounts, upsert.MountPath, p.VolumeMounts...)
		if p.SecurityContext != nil {
			containers[c].SecurityContext = p.SecurityContext
		}
	}
	return errs
}
