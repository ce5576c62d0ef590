package pipeline

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/progress"
)

// checkTrainJob runs the checks of the TrainJob's fields against its runtime and framework that
// need nothing built yet (the jobs its overrides and patches name, the framework's env vars set by
// hand, the init containers, volumes and mounts it adds, Kubernetes' rules for what it copies into
// the JobSet, numProcPerNode), and returns every error they find, so that admission lists them
// all. A fault of the runtime's own is returned alone: the TrainJob cannot fix it.
func checkTrainJob(b *framework.Draft, fw framework.Framework) error {
	patches, targetErrs := podPatches(b)
	errs, err := checkReservedEnv(b, fw, patches)
	if err != nil {
		return err
	}
	partErrs, err := checkReservedPodParts(b, fw, patches)
	if err != nil {
		return err
	}
	errs = append(errs, partErrs...)
	errs = append(errs, targetErrs...)
	errs = append(errs, checkKubernetesRules(b, patches)...)
	if err := checkNumProcPerNode(b, fw); err != nil {
		errs = append(errs, err)
	}
	if err := framework.CheckElasticBounds(b.TrainJob, b.MLPolicy(), b.Runtime.String()); err != nil {
		errs = append(errs, err)
	}
	return errs.ToAggregate()
}

// checkReservedEnv refuses a TrainJob or runtime that sets, on the trainer container, an env var
// the framework, or the operator's progress reporting, sets itself, and on the other containers
// the framework sets its env vars in (framework.EnvTargets), one the framework sets: the
// operator's value would silently replace it, or it would silently replace the operator's and
// break the distributed setup. The TrainJob's are errors of the list; the runtime's is a
// *framework.RuntimeError.
func checkReservedEnv(b *framework.Draft, fw framework.Framework, patches []podPatch) (field.ErrorList, error) {
	containers := []framework.ContainerRef{b.Trainer()}
	if targets, ok := fw.(framework.EnvTargets); ok {
		more, err := targets.EnvTargets(b)
		if err != nil {
			return nil, err
		}
		containers = append(containers, more...)
	}
	// setBy says who sets an env var on container c, or "" when nobody does.
	setBy := func(c framework.ContainerRef, name string) string {
		switch {
		case slices.Contains(fw.ReservedEnv(), name):
			return "the " + fw.Name() + " framework"
		case c == b.Trainer() && slices.Contains(progress.ReservedEnv, name):
			return "the operator (for progress reports)"
		case c == b.Trainer() && slices.Contains(RecoveryEnv, name):
			return "the operator (for restarts)"
		}
		return ""
	}
	// check returns the errors of the reserved vars of env, container c's, whose list is at path.
	check := func(c framework.ContainerRef, env []corev1.EnvVar, path *field.Path) field.ErrorList {
		var errs field.ErrorList
		for i, e := range env {
			if by := setBy(c, e.Name); by != "" {
				errs = append(errs, field.Forbidden(path.Index(i).Child("name"),
					fmt.Sprintf("%s is set by %s and may not be set by hand", e.Name, by)))
			}
		}
		return errs
	}

	for _, c := range containers {
		if errs := check(c, b.RuntimeContainer(c).Env, c.Path().Child("env")); len(errs) > 0 {
			return nil, b.RuntimeError(errs[0])
		}
	}
	var errs field.ErrorList
	if t := b.TrainJob.Spec.Trainer; t != nil {
		errs = append(errs, check(b.Trainer(), t.Env, framework.TrainerPath.Child("env"))...)
	}
	for _, p := range patches {
		for _, c := range containers {
			if !slices.Contains(p.jobs, c.Job) {
				continue
			}
			list, path := p.patch.Containers, p.path.Child("containers")
			if c.Init {
				list, path = p.patch.InitContainers, p.path.Child("initContainers")
			}
			name := b.Container(c).Name
			for j, patch := range list {
				if patch.Name == name {
					errs = append(errs, check(c, patch.Env, path.Index(j).Child("env"))...)
				}
			}
		}
	}
	return errs, nil
}

// checkReservedPodParts refuses a runtime whose trainer job's pods have, and a TrainJob whose pod
// patches of the trainer job add or change, an init container, volume or trainer container mount
// that the framework adds there itself (framework.PodParts): the pod would have two of them, which
// Kubernetes refuses, or the TrainJob's would silently replace the framework's. The TrainJob's are
// errors of the list; the runtime's is a *framework.RuntimeError.
func checkReservedPodParts(b *framework.Draft, fw framework.Framework, patches []podPatch) (field.ErrorList, error) {
	parts, ok := fw.(framework.PodParts)
	if !ok {
		return nil, nil
	}
	reserved := parts.ReservedPodParts()
	containerMsg := func(name string) string {
		return fmt.Sprintf("the %s framework adds an init container named %s to the trainer's pods: no other container may have that name", fw.Name(), name)
	}
	volumeMsg := func(name string) string {
		return fmt.Sprintf("the %s framework adds a volume named %s to the trainer's pods: no other volume may have that name", fw.Name(), name)
	}
	mountMsg := func(path string) string {
		return fmt.Sprintf("the %s framework mounts a volume at %s in the trainer container: nothing else may be mounted there", fw.Name(), path)
	}

	trainerJob := b.Trainer().Job
	pod := &b.Runtime.Spec.Template.Spec.ReplicatedJobs[trainerJob].Template.Spec.Template.Spec
	podPath := b.TrainerJobPath().Child("template", "spec", "template", "spec")
	for _, list := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", pod.InitContainers}, {"containers", pod.Containers}} {
		for i, c := range list.containers {
			if slices.Contains(reserved.InitContainers, c.Name) {
				return nil, b.RuntimeError(field.Forbidden(podPath.Child(list.name).Index(i).Child("name"), containerMsg(c.Name)))
			}
		}
	}
	for i, v := range pod.Volumes {
		if slices.Contains(reserved.Volumes, v.Name) {
			return nil, b.RuntimeError(field.Forbidden(podPath.Child("volumes").Index(i).Child("name"), volumeMsg(v.Name)))
		}
	}
	for i, m := range b.RuntimeTrainerContainer().VolumeMounts {
		if slices.Contains(reserved.MountPaths, m.MountPath) {
			return nil, b.RuntimeError(field.Forbidden(b.TrainerContainerPath().Child("volumeMounts").Index(i).Child("mountPath"), mountMsg(m.MountPath)))
		}
	}

	var errs field.ErrorList
	trainerName := b.TrainerContainer().Name
	for _, p := range patches {
		if !slices.Contains(p.jobs, trainerJob) {
			continue
		}
		for i, v := range p.patch.Volumes {
			if slices.Contains(reserved.Volumes, v.Name) {
				errs = append(errs, field.Forbidden(p.path.Child("volumes").Index(i).Child("name"), volumeMsg(v.Name)))
			}
		}
		for i, c := range p.patch.InitContainers {
			if slices.Contains(reserved.InitContainers, c.Name) {
				errs = append(errs, field.Forbidden(p.path.Child("initContainers").Index(i).Child("name"), containerMsg(c.Name)))
			}
		}
		for i, c := range p.patch.Containers {
			if c.Name != trainerName {
				continue
			}
			for k, m := range c.VolumeMounts {
				if slices.Contains(reserved.MountPaths, m.MountPath) {
					errs = append(errs, field.Forbidden(p.path.Child("containers").Index(i).Child("volumeMounts").Index(k).Child("mountPath"), mountMsg(m.MountPath)))
				}
			}
		}
	}
	return errs, nil
}
