package pipeline

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// applyMetadata merges the TrainJob's spec.labels and spec.annotations into the JobSet, each
// replicated job's Job template and its pod template, then the labels and annotations of
// spec.runtimePatches, in order, into the objects they name. The TrainJob wins over the runtime
// on a clash, and a runtime patch over both.
func applyMetadata(b *framework.Draft) error {
	mergeEverywhere(b.JobSet, b.TrainJob.Spec.Labels, b.TrainJob.Spec.Annotations)
	for _, rp := range b.TrainJob.Spec.RuntimePatches {
		if rp.TrainingRuntimeSpec != nil && rp.TrainingRuntimeSpec.Template != nil {
			mergeMetadata(&b.JobSet.ObjectMeta, rp.TrainingRuntimeSpec.Template.Metadata)
		}
	}
	return forEachJobPatch(b, func(j int, patch *trainer.ReplicatedJobPatch, _ *field.Path) {
		if patch.Template == nil {
			return
		}
		job := &b.JobSet.Spec.ReplicatedJobs[j].Template
		mergeMetadata(&job.ObjectMeta, patch.Template.Metadata)
		if patch.Template.Spec != nil && patch.Template.Spec.Template != nil {
			mergeMetadata(&job.Spec.Template.ObjectMeta, patch.Template.Spec.Template.Metadata)
		}
	}).ToAggregate()
}

// labelJobs labels the Jobs of every replicated job with their TrainJob's name, after the
// TrainJob's labels and patches, so that nothing can change it: the operator's cache selects the
// Jobs it watches by it (for the time to a TrainJob's first running pod).
func labelJobs(b *framework.Draft) error {
	for i := range b.JobSet.Spec.ReplicatedJobs {
		job := &b.JobSet.Spec.ReplicatedJobs[i].Template
		job.Labels = merged(job.Labels, b.Labels())
	}
	return nil
}

// mergeMetadata merges a patch's labels and annotations into an object's.
func mergeMetadata(meta *metav1.ObjectMeta, patch *trainer.MetadataPatch) {
	if patch != nil {
		meta.Labels = merged(meta.Labels, patch.Labels)
		meta.Annotations = merged(meta.Annotations, patch.Annotations)
	}
}

// mergeEverywhere merges labels and annotations into the JobSet, each replicated job's Job
// template and its pod template.
func mergeEverywhere(js *jobsetv1alpha2.JobSet, labels, annotations map[string]string) {
	if len(labels) == 0 && len(annotations) == 0 {
		return
	}
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
