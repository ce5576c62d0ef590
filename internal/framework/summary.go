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

// summaryMark starts the annotation's value, and the TrainJob's resourceVersion follows it, so
// that no value a user gives the annotation is taken for the cache's: the mark is drawn anew at
// each start of the manager, and a user cannot know the resourceVersion of their own write. (The
// value may leave the process, in the body of a status write, which the API server ignores but
// for the status.)
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
// were built from it; but only when what it drops outweighs the annotation it adds (summaryCost):
// a TrainJob of a few fields stays whole. Summarizing a summary changes nothing. A TrainJob to be
// built again must be read whole from the API server first (Summarized).
func Summarize(tj *trainer.TrainJob) {
	if Summarized(tj) {
		return
	}
	plain, size := hashOf(&tj.Spec, false)
	elastic, _ := hashOf(&tj.Spec, true)
	summary := tj.Spec // ForgetBuild replaces fields, and changes nothing they point to.
	ForgetBuild(&summary)
	if _, left := hashOf(&summary, false); size-left < summaryCost {
		return
	}
	tj.Spec = summary
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[summaryAnnotation] = strings.Join([]string{summaryMark, tj.ResourceVersion, plain, elastic}, " ")
}

// summaryCost is about what a summary adds to a cached TrainJob, in bytes: a map for its
// annotations, when it had none, and the annotation's value. What it drops is counted as its
// JSON, which is about what it holds in memory.
const summaryCost = 512

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

// Whole gives a summary's TrainJob back the spec of the whole one, live, read from the API server:
// the summary's own status, the whole spec. It does so only for the same TrainJob (UID) at the
// same generation, so the same spec, and reports whether it did.
func Whole(summary, live *trainer.TrainJob) bool {
	if summary.UID != live.UID || summary.Generation != live.Generation {
		return false
	}
	summary.Spec = live.Spec
	delete(summary.Annotations, summaryAnnotation)
	return true
}

// summaryHash is the hash of a summarized TrainJob's spec as it was, for an elastic runtime or
// not; ok is false for a TrainJob that is not a summary.
func summaryHash(tj *trainer.TrainJob, elastic bool) (hash string, ok bool) {
	fields := strings.Fields(tj.Annotations[summaryAnnotation])
	if len(fields) != 4 || fields[0] != summaryMark || fields[1] != tj.ResourceVersion {
		return "", false
	}
	if elastic {
		return fields[3], true
	}
	return fields[2], true
}
