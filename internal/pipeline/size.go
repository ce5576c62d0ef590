package pipeline

import (
	"fmt"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// maxMetadataBytes bounds the labels and annotations of a JobSet and its Job and pod templates,
// all together. etcd stores an object of at most 1.5 MiB (its default --max-request-bytes), and a
// JobSet holds each label and annotation of the TrainJob once for itself and once in each Job and
// pod template: 256 KiB of annotations, what the API server lets one object have, with a runtime
// of three replicated jobs, make 1.75 MiB. The rest of the JobSet (its containers) needs room too.
const maxMetadataBytes = 1 << 20

// checkSize refuses a TrainJob whose JobSet could not be stored: it would be refused on every
// write, never with a reason that tells what to change.
func checkSize(b *framework.Draft) error {
	js := b.JobSet
	metas := []*metav1.ObjectMeta{&js.ObjectMeta}
	for i := range js.Spec.ReplicatedJobs {
		t := &js.Spec.ReplicatedJobs[i].Template
		metas = append(metas, &t.ObjectMeta, &t.Spec.Template.ObjectMeta)
	}
	total, tooManyAnnotations := 0, false
	for _, m := range metas {
		total += mapBytes(m.Labels) + mapBytes(m.Annotations)
		tooManyAnnotations = tooManyAnnotations || apivalidation.ValidateAnnotationsSize(m.Annotations) != nil
	}
	copies := len(metas)
	var detail string
	switch {
	case tooManyAnnotations:
		detail = fmt.Sprintf("the JobSet, a Job or a pod would have more than the %d KiB of annotations Kubernetes lets an object have, "+
			"the TrainJob's and the runtime's together", apivalidation.TotalAnnotationSizeLimitB>>10)
	case total > maxMetadataBytes:
		detail = fmt.Sprintf("the JobSet would hold %d KiB of labels and annotations, more than the %d KiB it may (etcd stores at most 1.5 MiB of an object): "+
			"each of the TrainJob's is copied into the JobSet and each of its Job and pod templates, %d times", total>>10, maxMetadataBytes>>10, copies)
	default:
		return nil
	}
	spec := field.NewPath("spec")
	tj := b.TrainJob
	annotations, labels := mapBytes(tj.Spec.Annotations)*copies, mapBytes(tj.Spec.Labels)*copies
	switch {
	case annotations > 0 && annotations >= labels && (tooManyAnnotations || annotations > total/2):
		return field.Invalid(spec.Child("annotations"), fmt.Sprintf("%d KiB", mapBytes(tj.Spec.Annotations)>>10), detail)
	case labels > total/2:
		return field.Invalid(spec.Child("labels"), fmt.Sprintf("%d KiB", mapBytes(tj.Spec.Labels)>>10), detail)
	}
	return b.RuntimeError(field.Invalid(field.NewPath("spec", "template"), fmt.Sprintf("%d KiB", total>>10), detail))
}

// maxObjectBytes bounds the JobSet as JSON. etcd stores at most 1.5 MiB of an object (its default
// --max-request-bytes, which counts the request around it too), and the JobSet stored also holds
// its managed fields and status, and JobSet's defaults; its Jobs and pods hold the pod templates
// again, each within the same bound.
const maxObjectBytes = 1536<<10 - 128<<10

// checkObjectSize refuses a TrainJob whose JobSet, specBytes of spec as JSON, could not be
// stored: the trainer's command and args, up to 1 MiB an item as upstream allows, make most of a
// large one.
func checkObjectSize(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, specBytes int) error {
	total := specBytes + mapBytes(js.Labels) + mapBytes(js.Annotations)
	if total <= maxObjectBytes {
		return nil
	}
	detail := fmt.Sprintf("the JobSet built from it would take %d KiB, more than the %d KiB it may (etcd stores at most 1.5 MiB of an object)",
		total>>10, maxObjectBytes>>10)
	if t := tj.Spec.Trainer; t != nil {
		command, args := listBytes(t.Command), listBytes(t.Args)
		switch {
		case args >= command && args > total/2:
			return field.Invalid(framework.TrainerPath.Child("args"), fmt.Sprintf("%d KiB", args>>10), detail)
		case command > total/2:
			return field.Invalid(framework.TrainerPath.Child("command"), fmt.Sprintf("%d KiB", command>>10), detail)
		}
	}
	return field.Invalid(field.NewPath("spec"), fmt.Sprintf("%d KiB", total>>10),
		detail+": the TrainJob's and its runtime's pod templates together")
}

// listBytes is about what a list of strings takes as JSON.
func listBytes(items []string) int {
	n := 0
	for _, s := range items {
		n += len(s) + 3
	}
	return n
}

// mapBytes is about what a map takes as JSON: its keys and values, quoted, with their separators.
func mapBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v) + 6
	}
	return n
}
