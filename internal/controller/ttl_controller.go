package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// ttlController names the controller that deletes finished TrainJobs.
const ttlController = "ttl-after-finished"

// TTLReconciler deletes a finished TrainJob once its spec.ttlSecondsAfterFinished has passed,
// counted from its terminal condition's transition, as Kubernetes does for Jobs. The TrainJob is
// deleted in the foreground: its JobSet, Jobs and pods go first. The time is read from the
// TrainJob, never kept in memory, so a restarted manager deletes on time.
type TTLReconciler struct {
	client client.Client
}

// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=delete

// Reconcile deletes the TrainJob if its time has come, or comes back when it will.
func (r *TTLReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tj := &trainer.TrainJob{}
	if err := r.client.Get(ctx, req.NamespacedName, tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	at, ok := expiry(tj)
	if !ok || !tj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if left := time.Until(at); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	// The preconditions make sure the TrainJob deleted is the one read: if its TTL was changed
	// meanwhile, the deletion fails and the change's event brings the TrainJob back here.
	err := r.client.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationForeground),
		client.Preconditions{UID: &tj.UID, ResourceVersion: &tj.ResourceVersion})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("deleting TrainJob %s after its ttlSecondsAfterFinished: %w", klog.KObj(tj), err)
	}
	seconds, field, _ := tj.TTLAfterFinished()
	ctrl.LoggerFrom(ctx).Info("Deleted the finished TrainJob: its ttlSecondsAfterFinished passed",
		"ttlSecondsAfterFinished", seconds, "from", field)
	return ctrl.Result{}, nil
}

// expiry is when a finished TrainJob with a TTL (TTLAfterFinished) is to be deleted. ok is
// false for a TrainJob that is not to be deleted: no TTL, not finished, or someone else's.
func expiry(tj *trainer.TrainJob) (at time.Time, ok bool) {
	end := tj.FinishedCondition()
	ttl, _, ok := tj.TTLAfterFinished()
	if !ok || !tj.ManagedByOperator() || end == nil {
		return time.Time{}, false
	}
	return end.LastTransitionTime.Add(time.Duration(ttl) * time.Second), true
}

// setupTTL registers the TTL controller: it sees only the TrainJobs it may have to delete.
func setupTTL(mgr ctrl.Manager, opts Options) error {
	due := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := expiry(o.(*trainer.TrainJob))
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ttlController).
		For(&trainer.TrainJob{}, builder.WithPredicates(due)).
		WithOptions(controller.Options{SkipNameValidation: &opts.SkipNameValidation}).
		Complete(&TTLReconciler{client: mgr.GetClient()})
}
