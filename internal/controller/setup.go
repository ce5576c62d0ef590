package controller

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclient "sigs.k8s.io/jobset/client-go/clientset/versioned/typed/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/framework/flux"
	"github.com/trainjob/operator/internal/framework/jax"
	"github.com/trainjob/operator/internal/framework/mpi"
	"github.com/trainjob/operator/internal/framework/plain"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/internal/framework/xgboost"
	"github.com/trainjob/operator/internal/progress"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// Frameworks are the frameworks the manager runs, one controller each, for a cluster whose DNS
// domain is clusterDomain (empty means cluster.local). Adding a framework means adding its
// package and one line here.
func Frameworks(clusterDomain string) []framework.Framework {
	return []framework.Framework{
		plain.New(),
		torch.New(clusterDomain),
		mpi.New(),
		xgboost.New(),
		jax.New(),
		flux.New(),
	}
}

// Options tune the TrainJob controllers.
type Options struct {
	// MaxConcurrentReconciles is the number of TrainJobs each controller reconciles at once; zero
	// means DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// RuntimeGracePeriod is how long a new TrainJob waits for a missing runtime before it fails;
	// zero means DefaultRuntimeGracePeriod.
	RuntimeGracePeriod time.Duration
	// Progress is the endpoint the trainers report their progress to, or nil when the manager
	// serves none (it is served by the webhook server).
	Progress *progress.Endpoint
	// SkipNameValidation lets a process register the controllers again, in a new manager: the
	// tests restart the manager in-process.
	SkipNameValidation bool
	// Conditions is which conditions TrainJobs get; empty means UpstreamConditions.
	Conditions ConditionSet
	// Events is which events the controllers write; empty means AllEvents.
	Events EventSet
	// ProgressInterval is the least time between two writes of a TrainJob's progress by the
	// progress endpoint (its --progress-interval): a stall is counted over at least twice it, the
	// longest a report may wait to be written. Zero when the manager serves no endpoint.
	ProgressInterval time.Duration
}

// ConditionSet is a choice of the conditions the operator writes on TrainJobs. status.state,
// status.ready and the rest of the status are the same in both.
type ConditionSet string

const (
	// UpstreamConditions are upstream Kubeflow Trainer's: Suspended=True while suspended (removed
	// on resume), the terminal Complete or Failed, and Created=False while the JobSet cannot be
	// made. Upstream's Python SDK sees a TrainJob Running only while it has no condition.
	UpstreamConditions ConditionSet = "upstream"
	// AllConditions add the seed's (KEP-2170) Created=True, this operator's Running, and
	// Suspended=False with reason Resumed after a resume.
	AllConditions ConditionSet = "all"
)

// Set parses a ConditionSet, for a command-line flag.
func (c *ConditionSet) Set(value string) error {
	return choose(c, value, UpstreamConditions, AllConditions)
}

func (c *ConditionSet) String() string { return string(*c) }

// EventSet is a choice of the events the controllers write about TrainJobs.
type EventSet string

const (
	// AllEvents: every transition is told (kubectl describe, kubectl get events), one event
	// write each: the JobSet made, running, suspended and resumed, finished, resized...
	AllEvents EventSet = "all"
	// WarningEvents: only what went wrong (refusals, failures, stalls, restarts): a TrainJob that
	// runs well costs no event write. Its status says the same.
	WarningEvents EventSet = "warnings"
)

// Set parses an EventSet, for a command-line flag.
func (e *EventSet) Set(value string) error { return choose(e, value, AllEvents, WarningEvents) }

func (e *EventSet) String() string { return string(*e) }

// choose sets a flag's choice to value, one of two.
func choose[T ~string](choice *T, value string, one, other T) error {
	if T(value) != one && T(value) != other {
		return fmt.Errorf("must be %s or %s", one, other)
	}
	*choice = T(value)
	return nil
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

// Setup registers one controller per framework, the gang controller, the disruption controller
// and the TTL controller with the manager.
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
	if opts.Conditions == "" {
		opts.Conditions = UpstreamConditions
	}
	podGroups, err := installedPodGroupKinds(mgr.GetRESTMapper(), mgr.GetScheme())
	if err != nil {
		return err
	}
	// The manager's informers run on every replica, its controllers on the leader only: what the
	// informers' handlers tell (events, metrics) is told by the leader alone.
	leading := func() bool {
		select {
		case <-mgr.Elected():
			return true
		default:
			return false
		}
	}
	recorders, err := newEventRecorders(mgr, opts.Events == WarningEvents)
	if err != nil {
		return err
	}
	var podGroupInformers []cache.Informer
	for _, pg := range podGroups {
		gvk, _ := apiutil.GVKForObject(pg, mgr.GetScheme())
		mgr.GetLogger().Info("PodGroup CRD found: gang scheduling with it is on", "kind", gvk.String())
		informer, err := mgr.GetCache().GetInformer(ctx, pg)
		if err != nil {
			return err
		}
		if err := watchGangs(informer, recorders.For("trainer.kubeflow.org/"+gangController), leading); err != nil {
			return err
		}
		podGroupInformers = append(podGroupInformers, informer)
	}
	jobInformer, err := mgr.GetCache().GetInformer(ctx, &batchv1.Job{})
	if err != nil {
		return err
	}
	trainJobInformer, err := mgr.GetCache().GetInformer(ctx, &trainer.TrainJob{})
	if err != nil {
		return err
	}
	if err := watchFirstPods(jobInformer, trainJobInformer, mgr.GetCache(), frameworks, leading); err != nil {
		return err
	}
	failures, err := newPodFailures(jobInformer, mgr.GetAPIReader(), mgr.GetCache(), mgr.GetClient(),
		recorders.For(trainer.TrainJobControllerName), frameworks, leading)
	if err != nil {
		return err
	}
	if err := mgr.Add(failures); err != nil {
		return err
	}
	if err := trainJobs.use(trainJobInformer, podGroupInformers, mgr.GetCache(), frameworks, leading); err != nil {
		return err
	}
	jobSets, err := jobsetclient.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	trainJobs, err := apiutil.RESTClientForGVK(trainer.GroupVersion.WithKind(trainer.TrainJobKind), false, false,
		mgr.GetConfig(), serializer.NewCodecFactory(mgr.GetScheme()), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	reports := newGangReports()
	for _, fw := range frameworks {
		r := &TrainJobReconciler{
			client:             mgr.GetClient(),
			apiReader:          mgr.GetAPIReader(),
			jobSets:            jobSets.RESTClient(),
			trainJobs:          trainJobs,
			recorder:           recorders.For(fieldManager(fw)),
			framework:          fw,
			frameworks:         frameworks,
			runtimeGracePeriod: opts.RuntimeGracePeriod,
			progress:           opts.Progress,
			gangReports:        reports,
			conditions:         opts.Conditions,
			started:            time.Now(),
			minStallWindow:     2 * opts.ProgressInterval,
		}
		owns := ownsTrainJob(r.client, r.ownsRuntime)
		// A new JobSet needs nothing more of its TrainJob: the controller created it and wrote so
		// in the TrainJob's status in one go (reconciling again then would only race that
		// write), and the create of a JobSet that was someone else's first was refused. Its
		// changes and its deletion do, and so does a JobSet the cache first sees with a status:
		// it changed while the watch was down (the API server restarting) and came back in a
		// relist, as a creation.
		// Its TrainJobs' spec changes, and the progress reports that the stall rule needs.
		changes := predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, progressMoved())
		b := newController(mgr, fw.Name(), owns, r.ownsRuntime, changes, opts).
			Watches(&jobsetv1alpha2.JobSet{}, handler.EnqueueRequestsFromMapFunc(namesake(r.client, owns)),
				builder.WithPredicates(predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool { return hasStatus(e.Object) }}))
		// The first JobSet of a gang waits for its PodGroup: its creation queues the TrainJob, and
		// so does the gang controller's report of what keeps it from writing it.
		for _, pg := range podGroups {
			b = b.Watches(pg, handler.EnqueueRequestsFromMapFunc(namesake(r.client, owns)))
		}
		// An elastic TrainJob's autoscaler, changed or deleted by someone else, is set right.
		b = b.Watches(&autoscalingv2.HorizontalPodAutoscaler{}, handler.EnqueueRequestsFromMapFunc(namesake(r.client, owns)),
			builder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}))
		if len(podGroups) > 0 {
			b = b.WatchesRawSource(reports.source(owns))
		}
		if err := b.Complete(r); err != nil {
			return err
		}
	}
	g := &GangReconciler{client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), frameworks: frameworks, reports: reports}
	owns := ownsTrainJob(g.client, g.ownsRuntime)
	// Its TrainJobs' spec changes, and each copy of the runtime their PodGroup is built from.
	changes := predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, snapshotRecorded())
	b := newController(mgr, gangController, owns, g.ownsRuntime, changes, opts)
	// A new PodGroup is the gang controller's own doing, or a restarted manager's listing, which
	// lists its TrainJobs too: only a PodGroup's change or deletion needs it again.
	for _, pg := range podGroups {
		b = b.Watches(pg, handler.EnqueueRequestsFromMapFunc(namesake(g.client, owns)),
			builder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}))
	}
	// A JobSet the operator suspends without a change of its TrainJob (a stall's restart, a
	// change it did not see) is resumed only once its gang's PodGroup is right: if it is not (a
	// neighbour stripped it), it is rebuilt then.
	b = b.Watches(&jobsetv1alpha2.JobSet{}, handler.EnqueueRequestsFromMapFunc(namesake(g.client, owns)),
		builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !ptr.Deref(e.ObjectOld.(*jobsetv1alpha2.JobSet).Spec.Suspend, false) && ptr.Deref(e.ObjectNew.(*jobsetv1alpha2.JobSet).Spec.Suspend, false)
			},
		}))
	if err := b.Complete(g); err != nil {
		return err
	}
	// A standby's caches are the leader's: the informers of every kind the controllers watch run
	// on every replica (the TrainJobs', Jobs' and PodGroups' are above), so a replica that takes
	// the lead starts its workers on synced caches, and lists nothing at size.
	for _, obj := range []client.Object{&jobsetv1alpha2.JobSet{}, &autoscalingv2.HorizontalPodAutoscaler{}, &policyv1.PodDisruptionBudget{},
		&trainer.ClusterTrainingRuntime{}, &trainer.TrainingRuntime{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return err
		}
	}
	if err := setupDisruption(mgr, recorders.For("trainer.kubeflow.org/"+disruptionController), opts); err != nil {
		return err
	}
	return setupTTL(mgr, opts)
}

// newController starts a TrainJob controller named name that sees only the TrainJobs for which
// owns is true: those of their events that changes passes, and the events of the runtimes they
// use, for the runtimes ownsRuntime takes.
func newController(mgr ctrl.Manager, name string, owns func(*trainer.TrainJob) bool,
	ownsRuntime func(trainingruntime.Policies) bool, changes predicate.Predicate, opts Options) *builder.Builder {
	c := mgr.GetClient()
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return owns(o.(*trainer.TrainJob)) })
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&trainer.TrainJob{}, builder.WithPredicates(changes, ours)).
		Watches(&trainer.ClusterTrainingRuntime{}, handler.EnqueueRequestsFromMapFunc(runtimeUsers(c, ownsRuntime)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&trainer.TrainingRuntime{}, handler.EnqueueRequestsFromMapFunc(runtimeUsers(c, ownsRuntime)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			SkipNameValidation:      &opts.SkipNameValidation,
			RateLimiter:             retryLimiter(),
		})
}

// MaxRetryDelay is the longest a TrainJob waits to be reconciled again after a failed reconcile.
// The API server's passing errors (a throttled request, a 500, a timeout) are retried after 5 ms,
// then twice as long each time up to this: client-go's default goes on to 1,000 s, which would
// leave a TrainJob unbuilt for a quarter of an hour after a bad minute of its API server.
const MaxRetryDelay = time.Minute

// retryLimiter is controller-runtime's default limiter of a controller's retries with its
// backoff capped at MaxRetryDelay: the same bucket of 10 a second (a burst of 100) over all of them.
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// hasStatus tells whether JobSet's controller wrote anything in a JobSet's status.
func hasStatus(obj client.Object) bool {
	js, ok := obj.(*jobsetv1alpha2.JobSet)
	return ok && (js.Status.TerminalState != "" || len(js.Status.Conditions) > 0 || len(js.Status.ReplicatedJobsStatus) > 0)
}
