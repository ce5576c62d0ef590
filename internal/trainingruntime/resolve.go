// Package trainingruntime resolves a TrainJob's spec.runtimeRef to the runtime it names.
package trainingruntime

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// ErrNotFound is returned, wrapped with the runtime's kind and name, when the referenced runtime
// does not exist.
var ErrNotFound = errors.New("not found")

// Runtime is a resolved training runtime: what a TrainJob is built from.
type Runtime struct {
	// Kind is TrainingRuntime or ClusterTrainingRuntime.
	Kind string
	Name string
	Spec *trainer.TrainingRuntimeSpec
	// snapshot is the TrainJob's record of the runtime's snapshot when Spec comes from it.
	snapshot *trainer.RuntimeSnapshot
	// summary says that Spec holds the policies the record holds only, not the template: Load
	// reads the rest.
	summary bool
	// version is the object's, when Spec is a runtime object's as the API server has it: its
	// copy is encoded once per version (copies).
	version version
}

// String names the runtime as a user would, for messages: `ClusterTrainingRuntime "torch"`.
func (r *Runtime) String() string { return fmt.Sprintf("%s %q", r.Kind, r.Name) }

// Ref returns the kind and name the TrainJob refers to, with the schema's default kind applied
// in case the object did not come through the API server.
func Ref(tj *trainer.TrainJob) (kind, name string) {
	return ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind), tj.Spec.RuntimeRef.Name
}

// Resolve reads the runtime a TrainJob refers to: a TrainingRuntime in the TrainJob's namespace
// or a ClusterTrainingRuntime. The reader is normally the manager's cache, which shares its own
// copy: the runtime's spec is read, never changed.
func Resolve(ctx context.Context, c client.Reader, tj *trainer.TrainJob) (*Runtime, error) {
	kind, name := Ref(tj)
	var (
		spec *trainer.TrainingRuntimeSpec
		meta *metav1.ObjectMeta
		err  error
	)
	switch kind {
	case trainer.ClusterTrainingRuntimeKind:
		rt := &trainer.ClusterTrainingRuntime{}
		err = c.Get(ctx, client.ObjectKey{Name: name}, rt)
		spec, meta = &rt.Spec, &rt.ObjectMeta
	case trainer.TrainingRuntimeKind:
		rt := &trainer.TrainingRuntime{}
		err = c.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: name}, rt)
		spec, meta = &rt.Spec, &rt.ObjectMeta
	default:
		return nil, fmt.Errorf("runtime kind %q: %w", kind, ErrNotFound)
	}
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %q: %w", kind, name, err)
	}
	return &Runtime{Kind: kind, Name: name, Spec: spec, version: version{meta.UID, meta.Generation}}, nil
}
