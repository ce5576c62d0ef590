package build

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// StorageURIEnv carries an initializer's spec.initializer.*.storageUri into its container.
const StorageURIEnv = "STORAGE_URI"

// initializer is what the TrainJob says about one initializer; both kinds have the same fields.
type initializer struct {
	ancestor   string
	storageURI *string
	env        []corev1.EnvVar
	secretRef  *corev1.LocalObjectReference
}

// applyInitializers sets STORAGE_URI, the env and the secret (as envFrom) of the TrainJob's
// dataset and model initializers on the containers named like their step
// ("dataset-initializer", "model-initializer") in the jobs labelled with that step.
func applyInitializers(b *framework.Build) error {
	init := b.TrainJob.Spec.Initializer
	if init == nil {
		return nil
	}
	var inits []initializer
	if d := init.Dataset; d != nil {
		inits = append(inits, initializer{trainer.AncestorDatasetInitializer, d.StorageUri, d.Env, d.SecretRef})
	}
	if m := init.Model; m != nil {
		inits = append(inits, initializer{trainer.AncestorModelInitializer, m.StorageUri, m.Env, m.SecretRef})
	}
	for _, in := range inits {
		jobs := ancestorJobs(b, in.ancestor)
		if len(jobs) == 0 {
			return fmt.Errorf("spec.initializer sets the %s, but %s has no replicated job labelled %s=%s",
				in.ancestor, b.Runtime, trainer.AncestorStepLabel, in.ancestor)
		}
		for _, j := range jobs {
			job := &b.JobSet.Spec.ReplicatedJobs[j]
			containers := job.Template.Spec.Template.Spec.Containers
			i := containerIndex(containers, in.ancestor)
			if i < 0 {
				return fmt.Errorf("%s: replicated job %q has no container named %q", b.Runtime, job.Name, in.ancestor)
			}
			c := &containers[i]
			if in.storageURI != nil {
				c.Env = upsert.Env(c.Env, corev1.EnvVar{Name: StorageURIEnv, Value: *in.storageURI})
			}
			c.Env = upsert.Env(c.Env, in.env...)
			if in.secretRef != nil {
				c.EnvFrom = upsert.ByKey(c.EnvFrom, upsert.EnvFromSource, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *in.secretRef}})
			}
		}
	}
	return nil
}
