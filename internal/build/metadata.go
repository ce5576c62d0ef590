package build

import (
	"maps"

	"github.com/trainjob/operator/internal/framework"
)

// applyMetadata merges the TrainJob's spec.labels and spec.annotations into the JobSet, each
// replicated job's Job template and its pod template. The TrainJob wins on a clash.
func applyMetadata(b *framework.Build) error {
	labels, annotations := b.TrainJob.Spec.Labels, b.TrainJob.Spec.Annotations
	if len(labels) == 0 && len(annotations) == 0 {
		return nil
	}
	js := b.JobSet
	js.Labels = merged(js.Labels, labels)
	js.Annotations = merged(js.Annotations, annotations)
	for i := range js.Spec.ReplicatedJobs {
		job := &js.Spec.ReplicatedJobs[i].Template
		job.Labels = merged(job.Labels, labels)
		job.Annotations = merged(job.Annotations, annotations)
		pod := &job.Spec.Template
		pod.Labels = merged(pod.Labels, labels)
		pod.Annotations = merged(pod.Annotations, annotations)
	}
	return nil
}

// merged returns dst with src's entries added over it.
func merged(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]string, len(src))
	}
	maps.Copy(dst, src)
	return dst
}
