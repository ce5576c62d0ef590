package controller

import (
	"context"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

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

// podGroupKinds are the PodGroups the gang controller writes. Their CRDs may be missing.
func podGroupKinds() []client.Object {
	return []client.Object{&schedulerpluginsv1alpha1.PodGroup{}, &volcanov1beta1.PodGroup{}}
}

// CacheOptions keep the manager's cache to what the controllers need: of PodGroups, a kind that
// may exist in large numbers in a cluster, only those the operator created, by their
// trainer.kubeflow.org/trainjob-name label. ConfigMaps (MPI hostfiles) are only written, never
// read, so they are not cached at all. The cache
// cannot be configured for a kind the cluster does not serve, so it asks which PodGroup CRDs
// are installed.
func CacheOptions(cfg *rest.Config, scheme *runtime.Scheme) (cache.Options, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return cache.Options{}, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return cache.Options{}, err
	}
	podGroups, err := installedPodGroupKinds(mapper, scheme)
	if err != nil {
		return cache.Options{}, err
	}
	ours := labels.NewSelector()
	if req, err := labels.NewRequirement(trainer.TrainJobNameLabel, selection.Exists, nil); err == nil {
		ours = ours.Add(*req)
	}
	byObject := map[client.Object]cache.ByObject{}
	for _, pg := range podGroups {
		byObject[pg] = cache.ByObject{Label: ours}
	}
	return cache.Options{ByObject: byObject}, nil
}

// Options tune the TrainJob controllers.
type Options struct {
	// MaxConcurrentReconciles is the number of TrainJobs each controller reconciles at once; zero
	// means DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// RuntimeGracePeriod is how long a new TrainJob waits for a missing runtime before it fails;
	// zero means DefaultRuntimeGracePeriod.
	RuntimeGracePeriod time.Duration
	// SkipNameValidation lets a process register the controllers again, in a new manager: the
	// tests restart the manager in-process.
	SkipNameValidation bool
}

// Defaults for a manager that keeps up with thousands of TrainJobs: a TrainJob costs about one
// JobSet apply and one status write, so the client's rate and the number of TrainJobs reconciled
// at once bound the throughput.
const (
	DefaultKubeAPIQPS              = 500
	DefaultKubeAPIBurst            = 500
	DefaultMaxConcurrentReconciles = 16
)

// DefaultRuntimeGracePeriod is long enough for a runtime applied together with its TrainJob, in
// any order, to reach the manager's cache.
const DefaultRuntimeGracePeriod = 10 * time.Second

// runtimeRefIndex indexes TrainJobs by "<kind>/<name>" of their runtime, so that a runtime's
// change reaches the TrainJobs that use it.
const runtimeRefIndex = "spec.runtimeRef"

// Setup registers one controller per framework, and the gang controller, with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, frameworks []framework.Framework, opts Options) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &trainer.TrainJob{}, runtimeRefIndex, func(o client.Object) []string {
		kind, name := trainingruntime.Ref(o.(*trainer.TrainJob))
		return []string{kind + "/" + name}
	}); err != nil {
		return err
	}
	if opts.RuntimeGracePeriod == 0 {
		opts.RuntimeGracePeriod = DefaultRuntimeGracePeriod
	}
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	podGroups, err := installedPodGroupKinds(mgr.GetRESTMapper(), mgr.GetScheme())
	if err != nil {
		return err
	}
	for _, pg := range podGroups {
		gvk, _ := apiutil.GVKForObject(pg, mgr.GetScheme())
		mgr.GetLogger().Info("PodGroup CRD found: gang scheduling with it is on", "kind", gvk.String())
	}
	for _, fw := range frameworks {
		r := &TrainJobReconciler{
			client:             mgr.GetClient(),
			apiReader:          mgr.GetAPIReader(),
			recorder:           mgr.GetEventRecorder(fieldManager(fw)),
			framework:          fw,
			frameworks:         frameworks,
			runtimeGracePeriod: opts.RuntimeGracePeriod,
		}
		owns := ownsTrainJob(r.client, r.ownsRuntime)
		b := newController(mgr, fw.Name(), owns, r.ownsRuntime, opts).
			Watches(&jobsetv1alpha2.JobSet{}, handler.EnqueueRequestsFromMapFunc(namesake(r.client, owns)))
		// The first JobSet of a gang waits for its PodGroup: its creation queues the TrainJob.
		for _, pg := range podGroups {
			b = b.Watches(pg, handler.EnqueueRequestsFromMapFunc(namesake(r.client, owns)))
		}
		if err := b.Complete(r); err != nil {
			return err
		}
	}
	g := &GangReconciler{client: mgr.GetClient(), frameworks: frameworks}
	owns := ownsTrainJob(g.client, g.ownsRuntime)
	b := newController(mgr, gangController, owns, g.ownsRuntime, opts)
	for _, pg := range podGroups {
		b = b.Watches(pg, handler.EnqueueRequestsFromMapFunc(namesake(g.client, owns)))
	}
	return b.Complete(g)
}

// installedPodGroupKinds returns the PodGroup kinds whose CRDs the cluster serves. Without them
// the manager still runs; TrainJobs that need a missing kind are told so in their status. A CRD
// installed later is picked up when the manager restarts.
func installedPodGroupKinds(mapper apimeta.RESTMapper, scheme *runtime.Scheme) ([]client.Object, error) {
	var installed []client.Object
	for _, pg := range podGroupKinds() {
		gvk, err := apiutil.GVKForObject(pg, scheme)
		if err != nil {
			return nil, err
		}
		switch _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); {
		case err == nil:
			installed = append(installed, pg)
		case !apimeta.IsNoMatchError(err):
			return nil, err
		}
	}
	return installed, nil
}

// newController starts a TrainJob controller named name that sees only the TrainJobs for which
// owns is true: their own events, and the events of the runtimes they use, for the runtimes
// ownsRuntime takes.
func newController(mgr ctrl.Manager, name string, owns func(*trainer.TrainJob) bool,
	ownsRuntime func(*trainer.TrainingRuntimeSpec) bool, opts Options) *builder.Builder {
	c := mgr.GetClient()
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return owns(o.(*trainer.TrainJob)) })
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&trainer.TrainJob{}, builder.WithPredicates(predicate.GenerationChangedPredicate{}, ours)).
		Watches(&trainer.ClusterTrainingRuntime{}, handler.EnqueueRequestsFromMapFunc(runtimeUsers(c, ownsRuntime)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&trainer.TrainingRuntime{}, handler.EnqueueRequestsFromMapFunc(runtimeUsers(c, ownsRuntime)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			SkipNameValidation:      &opts.SkipNameValidation,
		})
}

// ownsTrainJob is a controller's event filter: whether it reconciles a TrainJob. Only TrainJobs
// this operator manages, and whose runtime ownsRuntime takes; a runtime that cannot be read is
// passed as nil.
func ownsTrainJob(c client.Reader, ownsRuntime func(*trainer.TrainingRuntimeSpec) bool) func(*trainer.TrainJob) bool {
	return func(tj *trainer.TrainJob) bool {
		if !Managed(tj) {
			return false
		}
		rt, err := trainingruntime.Resolve(context.Background(), c, tj)
		if err != nil {
			return ownsRuntime(nil)
		}
		return ownsRuntime(rt.Spec)
	}
}

// ownsRuntime tells whether a framework controller reconciles the TrainJobs of a runtime: that
// is decided by its ML policy alone. TrainJobs whose runtime cannot be read (nil) go to the
// plain controller, which reports them.
func (r *TrainJobReconciler) ownsRuntime(spec *trainer.TrainingRuntimeSpec) bool {
	var policy *trainer.MLPolicy
	if spec != nil {
		policy = spec.MLPolicy
	}
	return framework.Select(r.frameworks, policy) == r.framework
}

// namesake queues the TrainJob a child is named after, if owns says it is the controller's. Its
// JobSet and PodGroup are named after it; so is a JobSet someone else made first, whose deletion
// lets the TrainJob go on.
func namesake(c client.Client, owns func(*trainer.TrainJob) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		key := client.ObjectKeyFromObject(o)
		tj := &trainer.TrainJob{}
		if err := c.Get(ctx, key, tj); err != nil || !owns(tj) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: key}}
	}
}

// runtimeUsers queues the unfinished TrainJobs that use a changed runtime, if ownsRuntime takes
// it, so that a fixed runtime rebuilds the TrainJobs that failed to build from it, and a runtime
// that changes framework hands its TrainJobs to the new framework's controller. The runtime is
// at hand: it is judged once, not read again for each of its TrainJobs.
func runtimeUsers(c client.Client, ownsRuntime func(*trainer.TrainingRuntimeSpec) bool) handler.MapFunc {
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
		if spec == nil || !ownsRuntime(spec) {
			return nil
		}
		tjs := &trainer.TrainJobList{}
		opts = append(opts, client.MatchingFields{runtimeRefIndex: kind + "/" + o.GetName()})
		if err := c.List(ctx, tjs, opts...); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the TrainJobs of a runtime", "runtime", o.GetName())
			return nil
		}
		var reqs []reconcile.Request
		for i := range tjs.Items {
			if tj := &tjs.Items[i]; Managed(tj) && !finished(tj) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tj)})
			}
		}
		return reqs
	}
}
