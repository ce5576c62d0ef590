package pipeline

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// StorageURIEnv carries an initializer's spec.initializer.*.storageUri into its container.
const StorageURIEnv = "STORAGE_URI"

// initializer is what the TrainJob says about one initializer; both kinds have the same fields.
type initializer struct {
	field      string
	ancestor   string
	storageURI *string
	env        []corev1.EnvVar
	secretRef  *corev1.LocalObjectReference
}

// applyInitializers sets STORAGE_URI, the env and the secret (as envFrom) of the TrainJob's
// dataset and model initializers on the containers named like their step
// ("dataset-initializer", "model-initializer") in the jobs labelled with that step.
func applyInitializers(b *framework.Draft) error {
	init := b.TrainJob.Spec.Initializer
	if init == nil {
		return nil
	}
	var inits []initializer
	if d := init.Dataset; d != nil {
		inits = append(inits, initializer{"dataset", trainer.AncestorDatasetInitializer, d.StorageUri, d.Env, d.SecretRef})
	}
	if m := init.Model; m != nil {
		inits = append(inits, initializer{"model", trainer.AncestorModelInitializer, m.StorageUri, m.Env, m.SecretRef})
	}
	var errs field.ErrorList
	for _, in := range inits {
		path := field.NewPath("spec", "initializer", in.field)
		if ptr.Deref(in.storageURI, "") != "" {
			for i, e := range in.env {
				if e.Name == StorageURIEnv {
					errs = append(errs, field.Forbidden(path.Child("env").Index(i).Child("name"),
						fmt.Sprintf("%s is set from %s: set one or the other", StorageURIEnv, path.Child("storageUri"))))
				}
			}
		}
		jobs := ancestorJobs(b, in.ancestor)
		if len(jobs) == 0 {
			errs = append(errs, field.Forbidden(path,
				fmt.Sprintf("%s has no %s: no replicated job is labelled %s=%s", b.Runtime, in.ancestor, trainer.AncestorStepLabel, in.ancestor)))
		}
		for _, j := range jobs {
			job := &b.JobSet.Spec.ReplicatedJobs[j]
			containers := job.Template.Spec.Template.Spec.Containers
			i := containerIndex(containers, in.ancestor)
			if i < 0 {
				return b.RuntimeError(field.Required(framework.RuntimeJobsPath.Index(j).Child("template", "spec", "template", "spec", "containers"),
					fmt.Sprintf("the %s job %q needs a container named %q", in.ancestor, job.Name, in.ancestor)))
			}
			c := &containers[i]
			if ptr.Deref(in.storageURI, "") != "" {
				c.Env = upsert.Env(c.Env, corev1.EnvVar{Name: StorageURIEnv, Value: *in.storageURI})
			}
			c.Env = upsert.Env(c.Env, in.env...)
			if in.secretRef != nil {
				c.EnvFrom = upsert.ByKey(c.EnvFrom, upsert.EnvFromSource, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *in.secretRef}})
			}
		}
	}
	return errs.ToAggregate()
}
