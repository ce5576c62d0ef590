package controller

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/gang"
)

// disruptionController names the disruption controller and its field manager.
const disruptionController = "disruption"

// DisruptionReconciler keeps a PodDisruptionBudget for each running gang TrainJob, so that a node
// drain, or anything else that evicts pods through the eviction API, does not take part of a
// training that runs only whole: it selects every pod of the training (every replicated job but
// the initializers: the gang, and an MPI launcher that starts after it) and its minAvailable is
// all of them, at the training's current size, so no eviction passes while the training is whole.
// It is made when the TrainJob's JobSet runs and removed when the TrainJob is suspended or
// finished; the TrainJob owns it, so it goes with the TrainJob.
type DisruptionReconciler struct {
	client   client.Client
	recorder events.EventRecorder
	// warned holds, by TrainJob UID, the last warning told: each is told once, not at each retry.
	warned sync.Map
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete

// Reconcile makes, corrects or removes the TrainJob's PodDisruptionBudget. A budget of its name
// that is not the TrainJob's is never touched: the TrainJob goes without one, and says so in a
// Warning event.
func (r *DisruptionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tj := &trainer.TrainJob{}
	if err := r.client.Get(ctx, req.NamespacedName, tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	want, err := r.budget(ctx, tj)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The cache holds the budgets the operator made (labelled with their TrainJob's name): a
	// budget of the name that is not in it is someone else's, which creating proves.
	have := &policyv1.PodDisruptionBudget{}
	err = r.client.Get(ctx, req.NamespacedName, have)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	case err == nil && ours(have, tj) && want == nil:
		err := r.client.Delete(ctx, have, client.Preconditions{UID: &have.UID})
		if err == nil {
			ctrl.LoggerFrom(ctx).V(2).Info("Deleted the PodDisruptionBudget of a gang that does not run", "podDisruptionBudget", req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	case want == nil:
		return ctrl.Result{}, nil
	case err == nil && ours(have, tj) && apiequality.Semantic.DeepEqual(have.Spec, want.Spec) && have.Labels[trainer.TrainJobNameLabel] == tj.Name:
		return ctrl.Result{}, nil
	}
	owner := client.FieldOwner("trainer.kubeflow.org/" + disruptionController)
	write := createChild
	if err == nil {
		write = claimOrCreate
	}
	err = write(ctx, r.client, tj, want, owner)
	switch {
	case isNotOurs(err):
		r.warnOnce(tj, trainer.TrainJobObjectNotOwnedReason, fmt.Sprintf("%v: the gang has no PodDisruptionBudget, and a node drain may evict part of it", err))
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	case permanent(err) || apierrors.IsForbidden(err):
		r.warnOnce(tj, "PodDisruptionBudgetFailed", fmt.Sprintf("Writing the gang's PodDisruptionBudget %q was refused: %v", want.Name, err))
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("writing the PodDisruptionBudget of %s: %w", klog.KObj(tj), err)
	}
	r.warned.Delete(tj.UID)
	ctrl.LoggerFrom(ctx).V(2).Info("Wrote the gang's PodDisruptionBudget", "podDisruptionBudget", req.NamespacedName, "minAvailable", want.Spec.MinAvailable.IntValue())
	return ctrl.Result{}, nil
}

// warnOnce tells a Warning event about the TrainJob, unless it was the last one told of it.
func (r *DisruptionReconciler) warnOnce(tj *trainer.TrainJob, reason, message string) {
	if last, ok := r.warned.Load(tj.UID); ok && last == reason+message {
		return
	}
	r.warned.Store(tj.UID, reason+message)
	r.recorder.Eventf(tj, nil, corev1.EventTypeWarning, reason, "Protect", "%s", message)
}

// budget is the PodDisruptionBudget the TrainJob should have now, or nil for none: a gang
// TrainJob that runs (the operator's, not being deleted, not finished nor suspended, whose JobSet
// is its own and runs) has one for its training's pods, which its JobSet records
// (framework.TrainingPodsAnnotation, kept at its current size).
func (r *DisruptionReconciler) budget(ctx context.Context, tj *trainer.TrainJob) (*policyv1.PodDisruptionBudget, error) {
	if !tj.ManagedByOperator() || !tj.DeletionTimestamp.IsZero() || tj.Finished() || ptr.Deref(tj.Spec.Suspend, false) || !isGang(tj) {
		return nil, nil
	}
	js := &jobsetv1alpha2.JobSet{}
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(tj), js); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(js, tj) || ptr.Deref(js.Spec.Suspend, false) || js.Status.TerminalState != "" {
		return nil, nil
	}
	var jobs []string
	var pods int64
	for name, size := range recordedSizes(js) {
		jobs, pods = append(jobs, name), pods+int64(size.replicas)*int64(size.perJob)
	}
	if pods <= 0 || pods > math.MaxInt32 {
		return nil, nil // No training pods recorded (or a record someone mangled): nothing to keep.
	}
	slices.Sort(jobs)
	return &policyv1.PodDisruptionBudget{
		TypeMeta: metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{
			Name: tj.Name, Namespace: tj.Namespace,
			Labels:          map[string]string{trainer.TrainJobNameLabel: tj.Name},
			OwnerReferences: []metav1.OwnerReference{framework.OwnerReference(tj)},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(int32(pods))),
			Selector: &metav1.LabelSelector{
				MatchLabels: map[string]string{jobsetv1alpha2.JobSetNameKey: js.Name},
				MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: jobsetv1alpha2.ReplicatedJobNameKey, Operator: metav1.LabelSelectorOpIn, Values: jobs,
				}},
			},
		},
	}, nil
}

// isGang reports whether the TrainJob ran with a gang policy: its runtime as its first JobSet
// was built from it (status.runtimeSnapshot), for the gang of a running TrainJob.
func isGang(tj *trainer.TrainJob) bool {
	return tj.Status.RuntimeSnapshot != nil && gang.Ganged(tj.Status.RuntimeSnapshot.PodGroupPolicy)
}

// setupDisruption registers the disruption controller: it sees the gang TrainJobs (their
// suspension, resumption and end), their JobSets (made, suspended, resumed, finished) and the
// budgets the operator made (changed or deleted by someone else).
func setupDisruption(mgr ctrl.Manager, recorder events.EventRecorder, opts Options) error {
	r := &DisruptionReconciler{client: mgr.GetClient(), recorder: recorder}
	gangs := func(tj *trainer.TrainJob) bool { return tj.ManagedByOperator() && isGang(tj) }
	return ctrl.NewControllerManagedBy(mgr).
		Named(disruptionController).
		For(&trainer.TrainJob{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return gangs(o.(*trainer.TrainJob))
		}))).
		Watches(&jobsetv1alpha2.JobSet{}, handler.EnqueueRequestsFromMapFunc(namesake(mgr.GetClient(), gangs))).
		Owns(&policyv1.PodDisruptionBudget{}).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			SkipNameValidation:      &opts.SkipNameValidation,
			RateLimiter:             retryLimiter(),
		}).
		Complete(r)
}
