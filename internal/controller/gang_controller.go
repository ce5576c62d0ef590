package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/pipeline"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// gangController names the gang controller and its field manager.
const gangController = "gang"

// GangReconciler writes the PodGroups of gang-scheduled TrainJobs: it is their only writer. The
// framework controllers wait for the PodGroup before they let the JobSet's pods exist, and say in
// the TrainJob's Created condition, with a Warning event, what keeps it from being written
// (reports).
type GangReconciler struct {
	client client.Client
	// apiReader reads from the API server what the cache does not hold: runtime snapshots.
	apiReader  client.Reader
	frameworks []framework.Framework
	reports    *gangReports
}

// refusedRetry is how soon a PodGroup the API server refused, or whose name is taken, is tried
// again: the cause (a closed queue, a quota, someone's PodGroup) goes away without any event the
// operator sees.
const refusedRetry = 10 * time.Second

// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=scheduling.volcano.sh,resources=podgroups,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=workloads,verbs=get;create;patch;delete

// Reconcile writes a TrainJob's PodGroup, sized from the JobSet the TrainJob builds. Missing CRDs
// are reported by the framework controller, in the TrainJob's status; so are a TrainJob that
// cannot be built and a PodGroup that cannot be written, from the report this leaves.
func (r *GangReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tj, err := managedTrainJob(ctx, r.client, req)
	if tj == nil || tj.Finished() {
		r.reports.clear(req.NamespacedName)
		return ctrl.Result{}, err
	}
	rt, err := trainingruntime.ForTrainJob(ctx, r.client, tj)
	if errors.Is(err, trainingruntime.ErrNotFound) {
		r.reports.clear(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	pg := gang.PodGroupObject(rt.Spec.PodGroupPolicy)
	if pg == nil {
		r.reports.clear(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	result, err := r.reconcile(ctx, tj, rt, pg)
	var refused *refusedError
	var unbuilt *buildError
	switch {
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	case isNotOurs(err):
		r.reports.set(tj, trainer.TrainJobObjectNotOwnedReason, err.Error())
		return ctrl.Result{RequeueAfter: refusedRetry}, nil
	case errors.As(err, &refused):
		r.reports.set(tj, trainer.TrainJobPodGroupCreationFailedReason, err.Error())
		return ctrl.Result{RequeueAfter: refusedRetry}, nil
	case errors.As(err, &unbuilt):
		// A change of the TrainJob or its runtime queues it again; a report not taken is told again.
		if !r.reports.set(tj, trainer.TrainJobJobsBuildFailedReason, err.Error()) {
			return ctrl.Result{RequeueAfter: refusedRetry}, nil
		}
		return ctrl.Result{}, nil
	case err == nil:
		r.reports.clear(req.NamespacedName)
	}
	return result, err
}

// reconcile writes the TrainJob's PodGroup, pg, if it needs to. The PodGroup is built with the
// JobSet's rule: from the TrainJob as it is now, while its JobSet is suspended or not there yet,
// or about to be stopped to be built again (changedUnseen), and from the runtime copy the JobSet
// is, or will be, built from (podGroupCopy). A running gang whose JobSet was not built from the
// TrainJob as it is now is settled (but its PodGroup is put back if someone deleted it).
func (r *GangReconciler) reconcile(ctx context.Context, tj *trainer.TrainJob, rt *trainingruntime.Runtime, pg client.Object) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(tj)
	js := &jobsetv1alpha2.JobSet{}
	if err := r.client.Get(ctx, key, js); apierrors.IsNotFound(err) {
		js = nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	err := r.client.Get(ctx, key, pg)
	found := err == nil
	switch {
	case err == nil && gang.Immutable(pg) && metav1.IsControlledBy(pg, tj) && pg.GetDeletionTimestamp() != nil:
		// Its own, going to be made anew: Kubernetes keeps it while a pod that names it has not
		// finished. Its deletion queues the TrainJob again; said meanwhile.
		return ctrl.Result{}, &refusedError{fmt.Errorf("the PodGroup of %s is being deleted, to be made anew at the TrainJob's size: "+
			"it goes once no unfinished pod names it in schedulingGroup (its scheduling.k8s.io/podgroup-protection finalizer)", klog.KObj(tj))}
	case err == nil && !ours(pg, tj):
		return ctrl.Result{}, notOurs(r.client, pg)
	case err == nil && framework.Built(pg, tj, rt.Spec.MLPolicy):
		// Built from this spec: from the right copy too?
	case err == nil && js != nil && !ptr.Deref(js.Spec.Suspend, false) && !changedUnseen(tj, js):
		return ctrl.Result{}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, ignoreNoMatch(err)
	}
	digest, fromJobSet, err := podGroupCopy(tj, rt, js)
	if err != nil {
		return ctrl.Result{}, nil // The framework controller reports it.
	}
	if found && gang.Built(pg, tj, rt.Spec.MLPolicy, digest) {
		return ctrl.Result{}, nil
	}
	if fromJobSet && digest != "" {
		// The JobSet's copy, once the TrainJob records it (a lost status write recorded again
		// queues it).
		if recorded := tj.Status.RuntimeSnapshot; recorded == nil || recorded.Digest != digest {
			return ctrl.Result{}, nil
		}
		rt = trainingruntime.Recorded(tj)
	}

	// Built from the runtime as the TrainJob was first built from it, or, before its first JobSet,
	// as it is now (which the framework controller copies, and builds the JobSet from); an
	// unusable snapshot is the framework controller's to report.
	if rt, err = rt.Load(ctx, r.apiReader, tj); errors.Is(err, trainingruntime.ErrSnapshotUnusable) {
		return ctrl.Result{}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if whole, err := readWhole(ctx, r.apiReader, tj); err != nil || !whole {
		return ctrl.Result{}, err
	}
	children, err := pipeline.Build(tj, rt, framework.Select(r.frameworks, rt.Spec.MLPolicy))
	if err != nil {
		// The framework controller builds the JobSet only once the PodGroup is there; this
		// report has it build the JobSet all the same, for the build's own error.
		return ctrl.Result{}, &buildError{err}
	}
	owner := client.FieldOwner("trainer.kubeflow.org/" + gangController)
	if gang.Immutable(pg) {
		// Kubernetes' own PodGroup and Workload cannot change: made anew from this build.
		if found {
			return ctrl.Result{}, r.remove(ctx, pg) // Its deletion queues the TrainJob again.
		}
		if err := r.writeWorkload(ctx, tj, rt.Spec.MLPolicy, children.Workload, digest, owner); err != nil {
			return ctrl.Result{}, refusal(err)
		}
	}
	obj, err := asObject(children.PodGroup)
	if err != nil {
		return ctrl.Result{}, err
	}
	annotations := obj.GetAnnotations()
	annotations[trainingruntime.DigestAnnotation] = digest
	obj.SetAnnotations(annotations)
	// Not in the cache: created, never applied blind, so that someone else's PodGroup of the
	// name, which the cache does not hold, is not taken over. The TrainJob's own is rewritten
	// only by a patch that proves it the TrainJob's first.
	write, verb := createChild, "creating"
	if found {
		write, verb = claim, "resizing"
	}
	if err := write(ctx, r.client, tj, obj, owner); err != nil {
		return ctrl.Result{}, ignoreNoMatch(refusal(fmt.Errorf("%s the PodGroup of %s: %w", verb, klog.KObj(tj), err)))
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Wrote PodGroup", "podGroup", key, "resized", found)
	return ctrl.Result{}, nil
}

// writeWorkload creates the Workload that Kubernetes' own PodGroup names as its template, built
// from the same TrainJob and runtime copy (digest) as the PodGroup, with the same gang. One built
// otherwise is deleted first, and waited for: a Workload cannot change. Someone else's of the name
// is never touched. Read from the API server: Workloads are not cached, as they are read only when
// a PodGroup is made. An error is a reason to wait, told on the TrainJob and tried again in a
// while (refusal).
func (r *GangReconciler) writeWorkload(ctx context.Context, tj *trainer.TrainJob, policy *trainer.MLPolicy, ac runtime.ApplyConfiguration, digest string, owner client.FieldOwner) error {
	obj, err := asObject(ac)
	if err != nil {
		return err
	}
	want := &schedulingv1alpha2.Workload{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, want); err != nil {
		return err
	}
	workload := &schedulingv1alpha2.Workload{}
	switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(tj), workload); {
	case err == nil && metav1.IsControlledBy(workload, tj) && workload.DeletionTimestamp != nil:
		return &refusedError{fmt.Errorf("the Workload of %s is being deleted, to be made anew at the TrainJob's size", klog.KObj(tj))}
	case err == nil && !ours(workload, tj):
		return notOurs(r.client, workload)
	case err == nil && gang.Built(workload, tj, policy, digest) && sameGang(workload, want):
		return nil
	case err == nil:
		if err := r.remove(ctx, workload); err != nil {
			return err
		}
		return &refusedError{fmt.Errorf("the Workload of %s was built for another size: deleted, to be made anew", klog.KObj(tj))}
	case !apierrors.IsNotFound(err):
		return err
	}
	annotations := obj.GetAnnotations()
	annotations[trainingruntime.DigestAnnotation] = digest
	obj.SetAnnotations(annotations)
	if err := createChild(ctx, r.client, tj, obj, owner); err != nil {
		return fmt.Errorf("creating the Workload of %s: %w", klog.KObj(tj), err)
	}
	return nil
}

// sameGang reports whether two Workloads have the same PodGroup templates' policies: the gang that
// the PodGroup made with them will have (an operator that sized gangs otherwise built the other).
func sameGang(a, b *schedulingv1alpha2.Workload) bool {
	policies := func(w *schedulingv1alpha2.Workload) map[string]schedulingv1alpha2.PodGroupSchedulingPolicy {
		m := map[string]schedulingv1alpha2.PodGroupSchedulingPolicy{}
		for _, t := range w.Spec.PodGroupTemplates {
			m[t.Name] = t.SchedulingPolicy
		}
		return m
	}
	return apiequality.Semantic.DeepEqual(policies(a), policies(b))
}

// remove deletes the TrainJob's Kubernetes PodGroup or Workload, the one read (its UID), to make it
// anew.
func (r *GangReconciler) remove(ctx context.Context, obj client.Object) error {
	uid := obj.GetUID()
	if err := r.client.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %T %s to make it anew: %w", obj, klog.KObj(obj), err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Deleted to make it anew", "object", klog.KObj(obj))
	return nil
}

// snapshotRecorded passes the TrainJob updates that record another copy of its runtime than it
// did: the status write after its first JobSet, or after a lost one (Recover). A PodGroup built
// from another copy (the runtime edited meanwhile) is put right then; otherwise the look costs
// reads of the cache only.
func snapshotRecorded() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*trainer.TrainJob)
			tj, ok2 := e.ObjectNew.(*trainer.TrainJob)
			return ok1 && ok2 && tj.Status.RuntimeSnapshot != nil &&
				(old.Status.RuntimeSnapshot == nil || old.Status.RuntimeSnapshot.Digest != tj.Status.RuntimeSnapshot.Digest)
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// buildError is a TrainJob that cannot be built from its runtime: nor can its PodGroup.
type buildError struct{ err error }

func (e *buildError) Error() string { return e.err.Error() }
func (e *buildError) Unwrap() error { return e.err }

// refusedError is a PodGroup write that the API server refused for what it is (a webhook's or a
// policy's denial, a quota, an invalid field): writing it again succeeds only once the cause is
// gone.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// refusal wraps err as a refusedError when the API server refused the write; any other error
// (unreachable, busy, a conflict) is returned as it is and retried with backoff.
func refusal(err error) error {
	if err == nil || isNotOurs(err) {
		return err
	}
	if permanent(err) || apierrors.IsForbidden(err) {
		return &refusedError{err: err}
	}
	return err
}

// asObject is a PodGroup apply configuration as an object to create or apply.
func asObject(ac runtime.ApplyConfiguration) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(ac)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return obj, nil
}

// ownsRuntime is the gang controller's filter: runtimes whose gang policy needs a PodGroup.
func (r *GangReconciler) ownsRuntime(p trainingruntime.Policies) bool {
	return gang.NeedsPodGroup(p.PodGroup)
}

// ignoreNoMatch drops the error of a PodGroup kind whose CRD is not installed: retrying cannot
// help, and the framework controller reports it in the TrainJob's status.
func ignoreNoMatch(err error) error {
	if apimeta.IsNoMatchError(err) {
		return nil
	}
	return err
}

// watchGangs follows the scheduler's progress on each PodGroup: it tells the TrainJob, in an
// event, when its gang waits to be placed and when it is running, and adds the wait to the gang
// wait histogram, while leading. It sees updates only: the PodGroups a restarted manager lists
// are not counted, nor told, again.
func watchGangs(informer cache.Informer, recorder events.EventRecorder, leading func() bool) error {
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(oldObj, newObj any) {
		was, is := gang.StateOf(oldObj), gang.StateOf(newObj)
		if (was.Running == is.Running && was.Waiting == is.Waiting) || !leading() {
			return
		}
		pg := newObj.(client.Object)
		owner := metav1.GetControllerOf(pg)
		if owner == nil || owner.Kind != trainer.TrainJobKind {
			return
		}
		tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: owner.Name, Namespace: pg.GetNamespace(), UID: owner.UID}}
		tj.SetGroupVersionKind(trainer.GroupVersion.WithKind(trainer.TrainJobKind))
		waited := time.Since(pg.GetCreationTimestamp().Time)
		switch {
		case is.Running && !was.Running:
			gangWait.WithLabelValues(is.Scheduler).Observe(waited.Seconds())
			recorder.Eventf(tj, pg, corev1.EventTypeNormal, "GangScheduled", "Schedule",
				"The %s scheduler placed the gang of PodGroup %q at once, after %s: its pods run", is.Scheduler, pg.GetName(), waited.Round(time.Second))
		case !is.Running && is.Waiting != "":
			recorder.Eventf(tj, pg, corev1.EventTypeNormal, "GangWaiting", "Schedule", "%s", is.Waiting)
		}
	}})
	return err
}
