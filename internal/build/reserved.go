package build

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainjob/operator/internal/framework"
)

// checkReservedEnv refuses a TrainJob or runtime that sets, on the trainer container, an env var
// the framework sets itself: the framework's value would silently replace it, or it would
// silently replace the framework's and break the distributed setup.
func checkReservedEnv(b *framework.Build, fw framework.Framework) error {
	reserved := fw.ReservedEnv()
	if len(reserved) == 0 {
		return nil
	}
	check := func(env []corev1.EnvVar, where func(i int) string) error {
		for i, e := range env {
			if slices.Contains(reserved, e.Name) {
				return fmt.Errorf("%s: %s is set by the %s framework and may not be set by hand", where(i), e.Name, fw.Name())
			}
		}
		return nil
	}

	job, container := b.TrainerJob().Name, b.TrainerContainer().Name
	runtimeJob := b.Runtime.Spec.Template.Spec.ReplicatedJobs[slices.IndexFunc(b.Runtime.Spec.Template.Spec.ReplicatedJobs,
		func(j jobsetv1alpha2.ReplicatedJob) bool { return j.Name == job })]
	runtimeContainers := runtimeJob.Template.Spec.Template.Spec.Containers
	if err := check(runtimeContainers[containerIndex(runtimeContainers, container)].Env, func(int) string {
		return fmt.Sprintf("%s: container %q of replicated job %q", b.Runtime, container, job)
	}); err != nil {
		return err
	}
	if t := b.TrainJob.Spec.Trainer; t != nil {
		if err := check(t.Env, func(i int) string { return fmt.Sprintf("spec.trainer.env[%d].name", i) }); err != nil {
			return err
		}
	}
	for i, o := range b.TrainJob.Spec.PodSpecOverrides {
		if len(o.TargetJobs) > 0 && !slices.Contains(o.TargetJobs, job) {
			continue
		}
		for j, c := range o.Containers {
			if c.Name != container {
				continue
			}
			if err := check(c.Env, func(k int) string {
				return fmt.Sprintf("spec.podSpecOverrides[%d].containers[%d].env[%d].name", i, j, k)
			}); err != nil {
				return err
			}
		}
	}
	return nil
}
