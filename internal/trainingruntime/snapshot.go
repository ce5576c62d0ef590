package trainingruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// A TrainJob is built from its runtime as it was when the TrainJob's JobSet was first made: the
// runtime's copy, its snapshot, is kept in a ConfigMap the TrainJob owns, named and keyed as upstream
// Kubeflow Trainer keeps its own (KEP-2599). The JobSet made from it records the copy's digest
// (DigestAnnotation), and the status write that says the JobSet is made records the digest and
// the runtime's framework, gang and stall policies, which the controllers read on every event
// without reading the copy: the copy is read only to build, or to record it again when that
// write was lost (Recover).

// SnapshotKey is the key of the snapshot ConfigMap's data that holds the runtime, as YAML.
const SnapshotKey = "runtime"

// DigestAnnotation on a TrainJob's JobSet and PodGroup is the digest of the runtime copy they were
// built from: the JobSet's says which copy the TrainJob runs from before its status says so, and
// the PodGroup's that it was sized from the copy the JobSet is built from.
const DigestAnnotation = "trainer.kubeflow.org/runtime-digest"

// ErrSnapshotUnusable is returned, wrapped with the reason, when a TrainJob's snapshot is gone or
// was changed by someone else: the TrainJob can no longer be built as it was.
var ErrSnapshotUnusable = errors.New("the runtime snapshot cannot be used")

// SnapshotName is the name of a TrainJob's snapshot ConfigMap.
func SnapshotName(trainJob string) string { return trainJob + "-runtime-snapshot" }

// snapshotObject is what a snapshot holds of a runtime: its kind, name and spec, not its status
// or the rest of its metadata.
type snapshotObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec trainer.TrainingRuntimeSpec `json:"spec"`
}

// MaxSnapshotSize is the most a runtime's copy may take: a ConfigMap holds at most 1 MiB, its
// metadata included.
const MaxSnapshotSize = 1<<20 - 16<<10

// encode is a runtime's copy, as its snapshot holds it, and its digest.
func encode(rt *Runtime) (string, string, error) {
	if c, ok := copies.get(rt.version); ok {
		return c.data, c.digest, nil
	}
	obj := snapshotObject{TypeMeta: metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: rt.Kind}, Spec: *rt.Spec}
	obj.Metadata.Name = rt.Name
	data, err := yaml.Marshal(obj)
	if err != nil {
		return "", "", fmt.Errorf("writing the snapshot of %s: %w", rt, err)
	}
	e := encoded{data: string(data), digest: digest(data)}
	if len(data) <= MaxSnapshotSize { // One too large is refused, not kept.
		copies.put(rt.version, e)
	}
	return e.data, e.digest, nil
}

// version names a runtime object's spec: its UID and generation, which a change of its spec
// raises.
type version struct {
	uid        types.UID
	generation int64
}

// encoded is a runtime's copy and its digest.
type encoded struct {
	data   string // Shared by the ConfigMaps of the runtime's TrainJobs: strings are immutable.
	digest string
}

// copyCache keeps the copy of the latest version seen of each runtime object: every TrainJob of a
// runtime is copied, and its gang sized, from the same runtime, which is encoded once instead of
// two or three times per TrainJob. Runtimes are few; past maxCopies (runtimes deleted and made
// anew) it starts over.
type copyCache struct {
	mu    sync.Mutex
	byUID map[types.UID]encodedVersion
}

type encodedVersion struct {
	generation int64
	encoded
}

const maxCopies = 1024

var copies = &copyCache{byUID: map[types.UID]encodedVersion{}}

func (c *copyCache) get(v version) (encoded, bool) {
	if v.uid == "" {
		return encoded{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byUID[v.uid]
	return e.encoded, ok && e.generation == v.generation
}

func (c *copyCache) put(v version, e encoded) {
	if v.uid == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.byUID[v.uid]
	if ok && old.generation > v.generation {
		return
	}
	if !ok && len(c.byUID) >= maxCopies {
		clear(c.byUID)
	}
	c.byUID[v.uid] = encodedVersion{generation: v.generation, encoded: e}
}

// CheckSnapshotSize refuses a runtime too large for its TrainJobs to keep a copy of.
func CheckSnapshotSize(rt *Runtime) error {
	data, _, err := encode(rt)
	if err != nil {
		return err
	}
	if len(data) > MaxSnapshotSize {
		return fmt.Errorf("it takes %d bytes as YAML, and its TrainJobs keep a copy of it in a ConfigMap, which holds at most %d", len(data), MaxSnapshotSize)
	}
	return nil
}

// Snapshot is a runtime's snapshot for a TrainJob: the ConfigMap to create, and its record for
// the TrainJob's status.
func Snapshot(tj *trainer.TrainJob, rt *Runtime, labels map[string]string, owner metav1.OwnerReference) (*corev1.ConfigMap, *trainer.RuntimeSnapshot, error) {
	data, d, err := encode(rt)
	if err != nil {
		return nil, nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: SnapshotName(tj.Name), Namespace: tj.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Data: map[string]string{SnapshotKey: data},
	}
	return cm, record(cm.Name, d, rt.Spec), nil
}

// record is the record of a snapshot a TrainJob's status keeps: its ConfigMap and digest, and the
// runtime's policies, which choose its controllers and say when it stops, stalls and is deleted,
// and whether it has a ComputeDomain to delete once finished.
func record(configMap, digest string, spec *trainer.TrainingRuntimeSpec) *trainer.RuntimeSnapshot {
	return &trainer.RuntimeSnapshot{ConfigMap: configMap, Digest: digest, MLPolicy: spec.MLPolicy.DeepCopy(),
		PodGroupPolicy: spec.PodGroupPolicy.DeepCopy(), StallPolicy: spec.StallPolicy.DeepCopy(), RunPolicy: spec.RunPolicy.DeepCopy(),
		ComputeDomain: spec.ComputeDomain.DeepCopy()}
}

// summary is the runtime spec of a snapshot's record: its policies, without a template.
func summary(snap *trainer.RuntimeSnapshot) *trainer.TrainingRuntimeSpec {
	return &trainer.TrainingRuntimeSpec{MLPolicy: snap.MLPolicy, PodGroupPolicy: snap.PodGroupPolicy, StallPolicy: snap.StallPolicy, RunPolicy: snap.RunPolicy,
		ComputeDomain: snap.ComputeDomain}
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ForTrainJob is the runtime a TrainJob runs with: once its JobSet was made from its snapshot,
// the snapshot's summary (its framework, gang and stall policies, no template: Load reads the whole of
// it); until then, its runtime as it is now, so that a runtime fixed before the TrainJob could be
// built from it is the one it is built from. (Earlier releases recorded the copy before the
// first JobSet: such a record, with no JobSet made, is not one yet.)
func ForTrainJob(ctx context.Context, c client.Reader, tj *trainer.TrainJob) (*Runtime, error) {
	if !SnapshotRecorded(tj) {
		return Resolve(ctx, c, tj)
	}
	return Recorded(tj), nil
}

// SnapshotRecorded reports whether the TrainJob's status records the snapshot its JobSet was
// made from: a snapshot, and a JobSet made (status.observedGeneration, which admission keeps at
// 0 or more).
func SnapshotRecorded(tj *trainer.TrainJob) bool {
	return tj.Status.RuntimeSnapshot != nil && tj.Status.ObservedGeneration > 0
}

// Policies are the parts of a runtime that decide which controllers reconcile its TrainJobs.
type Policies struct {
	ML       *trainer.MLPolicy
	PodGroup *trainer.PodGroupPolicy
}

// PoliciesOf are the policies of the runtime a TrainJob runs with (ForTrainJob): its snapshot's,
// once it records one, else the runtime's as it is, or none when that cannot be read. It copies
// and allocates nothing for a recorded snapshot: every event of every TrainJob asks it, once per
// controller.
func PoliciesOf(ctx context.Context, c client.Reader, tj *trainer.TrainJob) (Policies, error) {
	if SnapshotRecorded(tj) {
		snap := tj.Status.RuntimeSnapshot
		return Policies{ML: snap.MLPolicy, PodGroup: snap.PodGroupPolicy}, nil
	}
	rt, err := Resolve(ctx, c, tj)
	if err != nil {
		return Policies{}, err
	}
	return Policies{ML: rt.Spec.MLPolicy, PodGroup: rt.Spec.PodGroupPolicy}, nil
}

// Recorded is the runtime of the snapshot a TrainJob's status records (its summary: Load reads
// the whole of it), or nil when it records none.
func Recorded(tj *trainer.TrainJob) *Runtime {
	snap := tj.Status.RuntimeSnapshot
	if snap == nil {
		return nil
	}
	kind, name := Ref(tj)
	return &Runtime{Kind: kind, Name: name, snapshot: snap, summary: true,
		Spec: summary(snap)}
}

// Snapshotted reports whether the runtime is a TrainJob's snapshot.
func (r *Runtime) Snapshotted() bool { return r.snapshot != nil }

// Digest is the digest of the runtime's copy: its snapshot's, or the one a snapshot taken now
// would have.
func (r *Runtime) Digest() (string, error) {
	if r.snapshot != nil {
		return r.snapshot.Digest, nil
	}
	_, d, err := encode(r)
	return d, err
}

// From is the runtime as the snapshot just taken of it (Snapshot), to build from: its Digest is the
// snapshot's.
func (r *Runtime) From(snapshot *trainer.RuntimeSnapshot) *Runtime {
	return &Runtime{Kind: r.Kind, Name: r.Name, Spec: r.Spec, snapshot: snapshot}
}

// Recover is the record of a TrainJob's snapshot of digest d, read from its ConfigMap (through c,
// past any cache), for a TrainJob whose JobSet was made from it but whose status does not say so
// (the operator stopped between the two writes).
func Recover(ctx context.Context, c client.Reader, tj *trainer.TrainJob, d string) (*trainer.RuntimeSnapshot, error) {
	kind, name := Ref(tj)
	copied, err := read(ctx, c, tj, &Runtime{Kind: kind, Name: name, snapshot: &trainer.RuntimeSnapshot{ConfigMap: SnapshotName(tj.Name), Digest: d}})
	if err != nil {
		return nil, err
	}
	return record(SnapshotName(tj.Name), d, &copied.Spec), nil
}

// Load returns the whole runtime, to build from: a snapshot's summary is read in full from its
// ConfigMap (through c, past any cache), which must match its digest and the TrainJob's
// runtimeRef.
func (r *Runtime) Load(ctx context.Context, c client.Reader, tj *trainer.TrainJob) (*Runtime, error) {
	if !r.summary {
		return r, nil
	}
	copied, err := read(ctx, c, tj, r)
	if err != nil {
		return nil, err
	}
	// The policies the status records (which chose the controllers, and say what a stall does)
	// are the copy's.
	if !equality.Semantic.DeepEqual(summary(r.snapshot), summary(record("", "", &copied.Spec))) {
		return nil, fmt.Errorf("%w: status.runtimeSnapshot's policies are not those of the copy in ConfigMap %q", ErrSnapshotUnusable, r.snapshot.ConfigMap)
	}
	return &Runtime{Kind: r.Kind, Name: r.Name, Spec: &copied.Spec, snapshot: r.snapshot}, nil
}

// read reads the copy of r's snapshot from its ConfigMap, which must be the TrainJob's, hold r's
// digest and be a copy of r.
func read(ctx context.Context, c client.Reader, tj *trainer.TrainJob, r *Runtime) (*snapshotObject, error) {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: r.snapshot.ConfigMap}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: ConfigMap %q, which holds %s as the TrainJob was first built from it, was deleted", ErrSnapshotUnusable, r.snapshot.ConfigMap, r)
	case err != nil:
		return nil, fmt.Errorf("reading the runtime snapshot %q: %w", r.snapshot.ConfigMap, err)
	}
	data := cm.Data[SnapshotKey]
	if !metav1.IsControlledBy(cm, tj) || digest([]byte(data)) != r.snapshot.Digest {
		return nil, fmt.Errorf("%w: ConfigMap %q, which holds %s as the TrainJob was first built from it, was changed or replaced by someone else", ErrSnapshotUnusable, r.snapshot.ConfigMap, r)
	}
	var obj snapshotObject
	if err := yaml.UnmarshalStrict([]byte(data), &obj); err != nil {
		return nil, fmt.Errorf("%w: ConfigMap %q: %v", ErrSnapshotUnusable, r.snapshot.ConfigMap, err)
	}
	if obj.Kind != r.Kind || obj.Metadata.Name != r.Name {
		return nil, fmt.Errorf("%w: ConfigMap %q holds %s %q, not %s", ErrSnapshotUnusable, r.snapshot.ConfigMap, obj.Kind, obj.Metadata.Name, r)
	}
	return &obj, nil
}
