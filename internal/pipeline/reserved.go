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
// hand, Kubernetes' rules for what it copies into the JobSet, numProcPerNode), and returns every error they find, so that admission lists them all. A
// fault of the runtime's own is returned alone: the TrainJob cannot fix it.
func checkTrainJob(b *framework.Draft, fw framework.Framework) error {
	patches, targetErrs := podPatches(b)
	errs, err := checkReservedEnv(b, fw, patches)
	if err != nil {
		return err
	}
	errs = append(errs, targetErrs...)
	errs = append(errs, checkKubernetesRules(b, patches)...)
	if err := checkNumProcPerNode(b, fw); err != nil {
		errs = append(errs, err)
	}
	return errs.ToAggregate()
}

// checkReservedEnv refuses a TrainJob or runtime that sets, on the trainer container, an env var
// the framework, or the operator's progress reporting, sets itself: the operator's value would
// silently replace it, or it would silently replace the operator's and break the distributed
// setup. The TrainJob's are errors of the list; the runtime's is a *framework.RuntimeError.
func checkReservedEnv(b *framework.Draft, fw framework.Framework, patches []podPatch) (field.ErrorList, error) {
	// setBy says who sets an env var on the trainer container, or "" when nobody does.
	setBy := func(name string) string {
		switch {
		case slices.Contains(fw.ReservedEnv(), name):
			return "the " + fw.Name() + " framework"
		case slices.Contains(progress.ReservedEnv, name):
			return "the operator (for progress reports)"
		}
		return ""
	}
	// check returns the errors of the reserved vars of env, whose list is at path.
	check := func(env []corev1.EnvVar, path *field.Path) field.ErrorList {
		var errs field.ErrorList
		for i, e := range env {
			if by := setBy(e.Name); by != "" {
				errs = append(errs, field.Forbidden(path.Index(i).Child("name"),
					fmt.Sprintf("%s is set by %s and may not be set by hand", e.Name, by)))
			}
		}
		return errs
	}

	if errs := check(b.RuntimeTrainerContainer().Env, b.TrainerContainerPath().Child("env")); len(errs) > 0 {
		return nil, b.RuntimeError(errs[0])
	}
	var errs field.ErrorList
	if t := b.TrainJob.Spec.Trainer; t != nil {
		errs = append(errs, check(t.Env, framework.TrainerPath.Child("env"))...)
	}
	container := b.TrainerContainer().Name
	for _, p := range patches {
		if !slices.Contains(p.jobs, b.TrainerJobIndex()) {
			continue
		}
		for j, c := range p.patch.Containers {
			if c.Name == container {
				errs = append(errs, check(c.Env, p.path.Child("containers").Index(j).Child("env"))...)
			}
		}
	}
	return errs, nil
}
