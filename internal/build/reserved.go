package build

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

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
	// check returns the error of the first reserved var of env, whose list is at path.
	check := func(env []corev1.EnvVar, path *field.Path) *field.Error {
		for i, e := range env {
			if slices.Contains(reserved, e.Name) {
				return field.Forbidden(path.Index(i).Child("name"),
					fmt.Sprintf("%s is set by the %s framework and may not be set by hand", e.Name, fw.Name()))
			}
		}
		return nil
	}

	if err := check(b.RuntimeTrainerContainer().Env, b.TrainerContainerPath().Child("env")); err != nil {
		return b.RuntimeError(err)
	}
	if t := b.TrainJob.Spec.Trainer; t != nil {
		if err := check(t.Env, framework.TrainerPath.Child("env")); err != nil {
			return err
		}
	}
	patches, err := podPatches(b)
	if err != nil {
		return err
	}
	container := b.TrainerContainer().Name
	for _, p := range patches {
		if !slices.Contains(p.jobs, b.TrainerJobIndex()) {
			continue
		}
		for j, c := range p.patch.Containers {
			if c.Name != container {
				continue
			}
			if err := check(c.Env, p.path.Child("containers").Index(j).Child("env")); err != nil {
				return err
			}
		}
	}
	return nil
}
