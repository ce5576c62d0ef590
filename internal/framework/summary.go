package framework

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// summaryAnnotation marks a TrainJob that the manager's cache keeps without what builds its
// children (Summarize), and holds the hashes of its spec as it was (SpecHash). It exists only in
// the cache's memory: the controllers never write a TrainJob's metadata.
const summaryAnnotation = "trainer.kubeflow.org/cached-summary"

// summaryMark starts the annotation's value, so that the value a user may give the annotation on
// a TrainJob is never taken for the cache's: it is drawn anew at each start of the manager.
var summaryMark = func() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // Never fails (crypto/rand).
	return hex.EncodeToString(b)
}()

// ForgetBuild drops from a TrainJob's spec what only builds its children, for a cache that keeps
// the TrainJob when no build needs them: its trainer but its size, its initializer, overrides,
// patches, and the labels and annotations of its pods. They can be most of a TrainJob's size (the
// SDK puts a training function's whole source in spec.trainer.args). What the controllers read
// of it stays: its runtime, managedBy, suspend, deadlines and TTL.
func ForgetBuild(spec *trainer.TrainJobSpec) {
	if t := spec.Trainer; t != nil {
		spec.Trainer = &trainer.Trainer{NumNodes: t.NumNodes}
	}
	spec.Initializer, spec.PodSpecOverrides, spec.RuntimePatches, spec.Labels, spec.Annotations = nil, nil, nil, nil, nil
}

// Summarize keeps of a TrainJob what its controllers read while no build needs the rest
// (ForgetBuild), and the hashes its spec had, so that Built still tells whether its children
// were built from it. Summarizing a summary changes nothing. A TrainJob to be built again must
// be read whole from the API server first (Summarized).
func Summarize(tj *trainer.TrainJob) {
	if Summarized(tj) {
		return
	}
	hashes := summaryMark + " " + specHash(&tj.Spec, false) + " " + specHash(&tj.Spec, true)
	ForgetBuild(&tj.Spec)
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[summaryAnnotation] = hashes
}

// Unsummarized drops an annotation of the summary's name that does not come from Summarize: one
// a user wrote.
func Unsummarized(tj *trainer.TrainJob) {
	if _, ok := tj.Annotations[summaryAnnotation]; ok && !Summarized(tj) {
		delete(tj.Annotations, summaryAnnotation)
	}
}

// Summarized tells whether the TrainJob is a cache's summary (Summarize), which cannot be built.
func Summarized(tj *trainer.TrainJob) bool {
	_, ok := summaryHash(tj, false)
	return ok
}

// Whole is a summary's TrainJob given back the spec of the whole one, live, read from the API
// server at the same generation: the summary's own status, the whole spec.
func Whole(summary, live *trainer.TrainJob) {
	summary.Spec = live.Spec
	delete(summary.Annotations, summaryAnnotation)
}

// summaryHash is the hash of a summarized TrainJob's spec as it was, for an elastic runtime or
// not; ok is false for a TrainJob that is not a summary.
func summaryHash(tj *trainer.TrainJob, elastic bool) (hash string, ok bool) {
	fields := strings.Fields(tj.Annotations[summaryAnnotation])
	if len(fields) != 3 || fields[0] != summaryMark {
		return "", false
	}
	if elastic {
		return fields[2], true
	}
	return fields[1], true
}
