package pipeline

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainjob/operator/internal/framework"
)

// checkLifetimes refuses a runtime whose JobSet template sets its own ttlSecondsAfterFinished, or
// whose Job templates set their own activeDeadlineSeconds or ttlSecondsAfterFinished: the
// TrainJob's deadline and TTL (runPolicy, and its own fields) decide when a training stops and
// when it is deleted, as a whole. The schema refuses them in a runtime written since; this refuses
// building from one stored before, which the API server keeps as it was.
func checkLifetimes(b *framework.Draft) error {
	spec := b.Runtime.Spec.Template.Spec
	if spec.TTLSecondsAfterFinished != nil {
		return b.RuntimeError(field.Forbidden(field.NewPath("spec", "template", "spec", "ttlSecondsAfterFinished"),
			"the JobSet template may not set ttlSecondsAfterFinished: set runPolicy.ttlSecondsAfterFinished, which deletes the TrainJob and all it owns"))
	}
	for i, job := range spec.ReplicatedJobs {
		path := framework.RuntimeJobsPath.Index(i).Child("template", "spec")
		if job.Template.Spec.ActiveDeadlineSeconds != nil {
			return b.RuntimeError(field.Forbidden(path.Child("activeDeadlineSeconds"),
				"a replicated job's Job template may not set activeDeadlineSeconds: set runPolicy.activeDeadlineSeconds, which the TrainJob follows"))
		}
		if job.Template.Spec.TTLSecondsAfterFinished != nil {
			return b.RuntimeError(field.Forbidden(path.Child("ttlSecondsAfterFinished"),
				"a replicated job's Job template may not set ttlSecondsAfterFinished: set runPolicy.ttlSecondsAfterFinished, which the TrainJob follows"))
		}
	}
	return nil
}
