package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
// its content (MPI's keys, Flux's certificate) was written by someone the operator cannot vouch for.
//
// The operator may not read Secrets, so a child that exists is proven its own by the write
// itself: a JSON patch whose test operations the API server checks against the object, and
// refuses, changing nothing, when one fails. The same patch writes what is built into a child
// proven the TrainJob's (a resized PodGroup): no blind server-side apply ever takes one over.
// A JobSet, checked in the cache first, is written with its resourceVersion as a precondition.

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
	return &notOursError{kind: kindOf(c, obj), name: obj.GetName()}
}

// kindOf is the kind of obj, typed or unstructured, for messages.
func kindOf(c client.Client, obj client.Object) string {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); kind == "" && err == nil {
		kind = gvk.Kind
	}
	return kind
}

// createChild creates obj, a child of the TrainJob built with its owner reference. When an object
// of its name exists, it is used only if it is the TrainJob's own (an earlier reconcile made it),
// and gets the content built now (claim). Anything else is a notOursError.
func createChild(ctx context.Context, c client.Client, tj *trainer.TrainJob, obj client.Object, owner client.FieldOwner) error {
	err := c.Create(ctx, obj.DeepCopyObject().(client.Object), owner)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return claimOrCreate(ctx, c, tj, obj, owner)
}

// claimOrCreate claims the object of obj's name, which exists (claim), or creates obj if it is
// gone meanwhile.
func claimOrCreate(ctx context.Context, c client.Client, tj *trainer.TrainJob, obj client.Object, owner client.FieldOwner) error {
	err := claim(ctx, c, tj, obj, owner)
	if apierrors.IsNotFound(err) {
		// Gone meanwhile: make it anew.
		return c.Create(ctx, obj.DeepCopyObject().(client.Object), owner)
	}
	return err
}

// claim writes the content of obj (built now) to the object of its name, in one JSON patch whose
// test operations prove the object the TrainJob's and usable first: its first owner reference is
// the TrainJob's controller reference, with its UID, and it has no deletionTimestamp (a test for
// null passes only when the field is absent). The API server applies none of it when a test
// fails: that is a notOursError. The content is a ConfigMap's data, or a PodGroup's spec (a
// PodGroup is unstructured here); a Secret's keys and the spec of any other unstructured child (a
// ComputeDomain's, immutable) are never rewritten. A PodGroup's (or ComputeDomain's) labels and
// annotations (the label that puts it in the operator's cache, its spec hash) are then merged in
// by a patch that holds only while the PodGroup is the one just proven the TrainJob's (its
// resourceVersion): others' labels and annotations stay.
func claim(ctx context.Context, c client.Client, tj *trainer.TrainJob, obj client.Object, owner client.FieldOwner) error {
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
	// A PodGroup's and a PodDisruptionBudget's labels (the cache holds only the labelled ones) and
	// annotations are written back too.
	var relabel client.Object
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		ops = append(ops, op{"add", "/data", o.Data})
	case *policyv1.PodDisruptionBudget:
		ops = append(ops, op{"add", "/spec", o.Spec})
		relabel = o
	case *unstructured.Unstructured:
		// The gang's PodGroups (scheduler-plugins', Volcano's) follow the TrainJob's size. Any other
		// kind is only proven: a ComputeDomain's spec cannot change, and its channel's template is
		// named after the TrainJob all the same.
		if o.GetKind() == "PodGroup" {
			ops = append(ops, op{"add", "/spec", o.Object["spec"]})
		}
		relabel = o
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	proven := obj.DeepCopyObject().(client.Object)
	err = c.Patch(ctx, proven, client.RawPatch(types.JSONPatchType, data), owner)
	switch {
	case failedTest(err):
		return notOurs(c, obj)
	case err != nil || relabel == nil:
		return err
	}
	meta := map[string]any{"resourceVersion": proven.GetResourceVersion(), "labels": relabel.GetLabels()}
	if a := relabel.GetAnnotations(); a != nil {
		meta["annotations"] = a
	}
	metadata, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	return c.Patch(ctx, proven, client.RawPatch(types.MergePatchType, metadata), owner)
}

// failedTest reports whether the API server refused a JSON patch because one of its test
// operations failed: 422 without the kind of an object whose fields are invalid, which a refusal
// by the object's validation or an admission policy has. (The API server does not pass on the
// JSON patch library's words.) The operations after the tests cannot fail: they set members of
// objects that exist.
func failedTest(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details == nil || details.Kind == ""
}
