package controller

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// ownsTrainJob is a controller's event filter: whether it reconciles a TrainJob. Only TrainJobs
// this operator manages, and whose runtime ownsRuntime takes: the snapshot the TrainJob was built
// from, once it has one (its policies, recorded in its status); a runtime that cannot be read is
// passed as no policies. Every event of every TrainJob and its children passes each controller's
// filter: it reads the cache in place and copies nothing.
func ownsTrainJob(c client.Reader, ownsRuntime func(trainingruntime.Policies) bool) func(*trainer.TrainJob) bool {
	return func(tj *trainer.TrainJob) bool {
		if !tj.ManagedByOperator() {
			return false
		}
		p, _ := trainingruntime.PoliciesOf(context.Background(), c, tj)
		return ownsRuntime(p)
	}
}

// ownsRuntime tells whether a framework controller reconciles the TrainJobs of a runtime: that
// is decided by its ML policy alone. TrainJobs whose runtime cannot be read (no policies) go to
// the plain controller, which reports them.
func (r *TrainJobReconciler) ownsRuntime(p trainingruntime.Policies) bool {
	return framework.Select(r.frameworks, p.ML) == r.framework
}

// namesake queues the TrainJob a child is named after, if owns says it is the controller's. Its
// JobSet and PodGroup are named after it; so is a JobSet someone else made first, whose deletion
// lets the TrainJob go on. The TrainJob is read in the cache, not copied: owns only reads it.
func namesake(c client.Client, owns func(*trainer.TrainJob) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		key := client.ObjectKeyFromObject(o)
		tj := &trainer.TrainJob{}
		if err := c.Get(ctx, key, tj, client.UnsafeDisableDeepCopy); err != nil || !owns(tj) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: key}}
	}
}

// runtimeUsers queues the unfinished TrainJobs that use a changed runtime, if ownsRuntime takes
// it, so that a fixed runtime rebuilds the TrainJobs that failed to build from it, and a runtime
// that changes framework hands its TrainJobs to the new framework's controller. The runtime is
// at hand: it is judged once, not read again for each of its TrainJobs.
func runtimeUsers(c client.Client, ownsRuntime func(trainingruntime.Policies) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		kind := trainer.ClusterTrainingRuntimeKind
		var spec *trainer.TrainingRuntimeSpec
		var opts []client.ListOption
		switch rt := o.(type) {
		case *trainer.ClusterTrainingRuntime:
			spec = &rt.Spec
		case *trainer.TrainingRuntime:
			kind, spec = trainer.TrainingRuntimeKind, &rt.Spec
			opts = append(opts, client.InNamespace(rt.Namespace))
		}
		if spec == nil || !ownsRuntime(trainingruntime.Policies{ML: spec.MLPolicy, PodGroup: spec.PodGroupPolicy}) {
			return nil
		}
		// Read in place: a runtime's users may be tens of thousands.
		tjs := &trainer.TrainJobList{}
		opts = append(opts, client.MatchingFields{runtimeRefIndex: kind + "/" + o.GetName()}, client.UnsafeDisableDeepCopy)
		if err := c.List(ctx, tjs, opts...); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the TrainJobs of a runtime", "runtime", o.GetName())
			return nil
		}
		var reqs []reconcile.Request
		for i := range tjs.Items {
			if tj := &tjs.Items[i]; tj.ManagedByOperator() && !tj.Finished() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tj)})
			}
		}
		return reqs
	}
}
