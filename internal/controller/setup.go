package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/framework/jax"
	"github.com/trainjob/operator/internal/framework/mpi"
	"github.com/trainjob/operator/internal/framework/plain"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/internal/framework/xgboost"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// Frameworks are the frameworks the manager runs, one controller each. Adding a framework means
// adding its package and one line here.
func Frameworks() []framework.Framework {
	return []framework.Framework{
		plain.New(),
		torch.New(),
		mpi.New(),
		xgboost.New(),
		jax.New(),
	}
}

// CacheOptions keep the manager's cache to what the controllers need: of the kinds that exist
// in large numbers in a cluster and that the operator also creates, ConfigMaps, only those the
// operator created, by their trainer.kubeflow.org/trainjob-name label.
func CacheOptions() cache.Options {
	ours := labels.SelectorFromSet(nil)
	if req, err := labels.NewRequirement(trainer.TrainJobNameLabel, selection.Exists, nil); err == nil {
		ours = ours.Add(*req)
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: ours},
	}}
}

// Options tune the TrainJob controllers.
type Options struct {
	// MaxConcurrentReconciles is the number of TrainJobs each controller reconciles at once.
	MaxConcurrentReconciles int
	// RuntimeGracePeriod is how long a new TrainJob waits for a missing runtime before it fails.
	RuntimeGracePeriod time.Duration
	// SkipNameValidation lets a process register the controllers again, in a new manager: the
	// tests restart the manager in-process.
	SkipNameValidation bool
}

// runtimeRefIndex indexes TrainJobs by "<kind>/<name>" of their runtime, so that a runtime's
// change reaches the TrainJobs that use it.
const runtimeRefIndex = "spec.runtimeRef"

// Setup registers one controller per framework with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, frameworks []framework.Framework, opts Options) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &trainer.TrainJob{}, runtimeRefIndex, func(o client.Object) []string {
		kind, name := trainingruntime.Ref(o.(*trainer.TrainJob))
		return []string{kind + "/" + name}
	}); err != nil {
		return err
	}
	for _, fw := range frameworks {
		r := &TrainJobReconciler{
			client:             mgr.GetClient(),
			recorder:           mgr.GetEventRecorder(fieldManager(fw)),
			framework:          fw,
			frameworks:         frameworks,
			runtimeGracePeriod: opts.RuntimeGracePeriod,
		}
		if err := r.setup(mgr, opts); err != nil {
			return err
		}
	}
	return nil
}

func (r *TrainJobReconciler) setup(mgr ctrl.Manager, opts Options) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return r.owns(o.(*trainer.TrainJob)) })
	return ctrl.NewControllerManagedBy(mgr).
		Named(r.framework.Name()).
		For(&trainer.TrainJob{}, builder.WithPredicates(predicate.GenerationChangedPredicate{}, ours)).
		Watches(&jobsetv1alpha2.JobSet{}, handler.EnqueueRequestsFromMapFunc(r.jobSetOwner)).
		Watches(&trainer.ClusterTrainingRuntime{}, handler.EnqueueRequestsFromMapFunc(r.runtimeUsers),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&trainer.TrainingRuntime{}, handler.EnqueueRequestsFromMapFunc(r.runtimeUsers),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			SkipNameValidation:      &opts.SkipNameValidation,
		}).
		Complete(r)
}

// owns is the event filter: whether this controller reconciles the TrainJob. That is decided by
// its runtime alone; a TrainJob whose runtime cannot be read goes to the plain controller, which
// reports it.
func (r *TrainJobReconciler) owns(tj *trainer.TrainJob) bool {
	if !managed(tj) {
		return false
	}
	var policy *trainer.MLPolicy
	if rt, err := trainingruntime.Resolve(context.Background(), r.client, tj); err == nil {
		policy = rt.Spec.MLPolicy
	}
	return framework.Select(r.frameworks, policy) == r.framework
}

// jobSetOwner queues the TrainJob that controls a JobSet, if it is this controller's.
func (r *TrainJobReconciler) jobSetOwner(ctx context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "TrainJob" || ref.APIVersion != trainer.GroupVersion.String() {
		return nil
	}
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}
	tj := &trainer.TrainJob{}
	if err := r.client.Get(ctx, key, tj); err != nil || !r.owns(tj) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// runtimeUsers queues this controller's unfinished TrainJobs that use a changed runtime, so that
// a fixed runtime rebuilds the TrainJobs that failed to build from it, and a runtime that changes
// framework hands its TrainJobs to the new framework's controller.
func (r *TrainJobReconciler) runtimeUsers(ctx context.Context, o client.Object) []reconcile.Request {
	kind := trainer.ClusterTrainingRuntimeKind
	var opts []client.ListOption
	if o.GetNamespace() != "" {
		kind = trainer.TrainingRuntimeKind
		opts = append(opts, client.InNamespace(o.GetNamespace()))
	}
	tjs := &trainer.TrainJobList{}
	opts = append(opts, client.MatchingFields{runtimeRefIndex: kind + "/" + o.GetName()})
	if err := r.client.List(ctx, tjs, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the TrainJobs of a runtime", "runtime", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range tjs.Items {
		if tj := &tjs.Items[i]; !finished(tj) && r.owns(tj) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tj)})
		}
	}
	return reqs
}
