package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// The ownership rules, in one place. The operator changes, mounts or deletes only the objects it
// made for a TrainJob: an object is the TrainJob's when its controller owner reference carries
// the TrainJob's UID, and usable only while it is not being deleted. Anything else of a child's
// name, a user's object, a leftover of an earlier TrainJob of the same name (its owner has
// another UID), or a dying one, is left alone, and the TrainJob waits and says so: the garbage
// collector deletes a leftover once its old owner is gone, and the TrainJob then makes its own.
// A leftover is never taken over: the garbage collector may be deleting it at that moment, and
// its content (MPI's keys, a CA) was written by someone the operator cannot vouch for.
//
// The operator may not read Secrets, so a child that exists is proven its own by the write
// itself: a JSON patch whose test operations the API server checks against the object, and
// refuses, changing nothing, when one fails. Objects the operator caches (JobSets, PodGroups) are
// checked in the cache first and then written with their resourceVersion as a precondition.

// ours reports whether obj, read from the cache or the API server, is the TrainJob's and usable.
func ours(obj metav1.Object, tj *trainer.TrainJob) bool {
	return metav1.IsControlledBy(obj, tj) && obj.GetDeletionTimestamp() == nil
}

// notOursError says that an object of a child's name exists that is not the TrainJob's to use.
type notOursError struct {
	kind, name string
}

func (e *notOursError) Error() string {
	return fmt.Sprintf("%s %q exists and is not this TrainJob's (it has another controller, or is being deleted); "+
		"the TrainJob waits for it to go. One left by an earlier TrainJob of this name is deleted by the garbage collector "+
		"shortly; any other, delete or rename it", e.kind, e.name)
}

// isNotOurs reports whether err is a notOursError.
func isNotOurs(err error) bool {
	var e *notOursError
	return errors.As(err, &e)
}

// notOurs is the notOursError of obj.
func notOurs(c client.Client, obj client.Object) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); kind == "" && err == nil {
		kind = gvk.Kind
	}
	return &notOursError{kind: kind, name: obj.GetName()}
}

// createChild creates obj, a child of the TrainJob built with its owner reference. When an object
// of its name exists, it is used only if it is the TrainJob's own (an earlier reconcile made it),
// and then claimed is true: a ConfigMap gets the data built now. Anything else is a
// notOursError.
func createChild(ctx context.Context, c client.Client, tj *trainer.TrainJob, obj client.Object, owner client.FieldOwner) (claimed bool, err error) {
	err = c.Create(ctx, obj.DeepCopyObject().(client.Object), owner)
	if !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	patch, err := claimPatch(tj, obj)
	if err != nil {
		return false, err
	}
	err = c.Patch(ctx, obj.DeepCopyObject().(client.Object), patch, owner)
	switch {
	case apierrors.IsNotFound(err):
		// Gone meanwhile: make it anew.
		return false, c.Create(ctx, obj.DeepCopyObject().(client.Object), owner)
	case apierrors.IsInvalid(err):
		// A test operation failed: it is not the TrainJob's, or it is being deleted.
		return false, notOurs(c, obj)
	}
	return err == nil, err
}

// claimPatch is the JSON patch that proves an existing object is the TrainJob's and usable, and
// for a ConfigMap writes the data built now: its first owner reference is the TrainJob's
// controller reference, with its UID, and it has no deletionTimestamp (a JSON patch test for
// null passes only when the field is absent).
func claimPatch(tj *trainer.TrainJob, obj client.Object) (client.Patch, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{
		{"test", "/metadata/ownerReferences/0/uid", tj.UID},
		{"test", "/metadata/ownerReferences/0/controller", true},
		{"test", "/metadata/deletionTimestamp", nil},
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		ops = append(ops, op{"add", "/data", cm.Data})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.JSONPatchType, data), nil
}
