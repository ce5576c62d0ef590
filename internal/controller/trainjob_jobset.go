package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetac "sigs.k8s.io/jobset/client-go/applyconfiguration/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/pipeline"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// The TrainJob's JobSet: reading it, and writing it only as the ownership rules allow.

// setJobSetSuspend sets the JobSet's spec.suspend, and nothing else of it (applySuspend).
func (r *TrainJobReconciler) setJobSetSuspend(ctx context.Context, js *jobsetv1alpha2.JobSet, suspend bool) error {
	return r.applySuspend(ctx, js, suspend, 0)
}

// stopAndFail fails the TrainJob for reason after suspending its JobSet, if it has one: a
// TrainJob is never Failed, and so final, with its pods still running. Once the status says why
// (the reconcile's write), the JobSet is deleted (deleteStoppedJobSet), as upstream deletes it at
// the deadline.
func (r *TrainJobReconciler) stopAndFail(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet, reason, message string) error {
	if js != nil {
		if err := r.setJobSetSuspend(ctx, js, true); err != nil {
			return err
		}
	}
	setCondition(tj, trainer.TrainJobFailed, metav1.ConditionTrue, reason, message)
	setRunning(tj, 0, 0)
	// No counts of pods that are being stopped, of a JobSet that is deleted next.
	tj.Status.JobsStatus, tj.Status.Ready = nil, ""
	return nil
}

// stoppedByTheOperator says whether the operator failed the TrainJob itself, stopping its pods
// (stopAndFail): its deadline passed, or it stalled under a Fail stall policy.
func stoppedByTheOperator(tj *trainer.TrainJob) bool {
	failed := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed)
	return failed != nil && failed.Status == metav1.ConditionTrue &&
		(failed.Reason == trainer.TrainJobDeadlineExceededReason || failed.Reason == trainer.TrainJobProgressDeadlineExceededReason)
}

// deleteStoppedJobSet deletes the JobSet of a TrainJob the operator stopped, now that its status
// holds the failure and its cause: upstream deletes it at the deadline, and its e2e tests wait
// for that. Only that JobSet, by its UID; its Jobs and pods go with it (background deletion).
func (r *TrainJobReconciler) deleteStoppedJobSet(ctx context.Context, js *jobsetv1alpha2.JobSet) error {
	if js.DeletionTimestamp != nil {
		return nil
	}
	err := r.client.Delete(ctx, js, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &js.UID})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting JobSet %s of the stopped TrainJob: %w", klog.KObj(js), err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted the JobSet of the TrainJob the operator stopped", "jobSet", klog.KObj(js))
	return nil
}

// deleteComputeDomain deletes the NVIDIA ComputeDomain of a finished TrainJob whose runtime gave
// it one (hasComputeDomain), once none of its JobSet's pods still runs: not even one stopping,
// whose grace period may be a checkpoint's collective over the channel. Until then it says when to
// look again. Its IMEX daemons keep their nodes until it goes. Only the TrainJob's own, by its
// UID. It is read from the API server, not a cache (the operator watches no ComputeDomain), until
// it is known gone: then never again for this TrainJob while the manager runs.
func (r *TrainJobReconciler) deleteComputeDomain(ctx context.Context, tj *trainer.TrainJob) (time.Duration, error) {
	if _, gone := r.computeDomainGone.load(tj); gone || !r.hasComputeDomain(ctx, tj) {
		return 0, nil
	}
	pods := &corev1.PodList{}
	if err := r.apiReader.List(ctx, pods, client.InNamespace(tj.Namespace), client.MatchingLabels{jobsetv1alpha2.JobSetNameKey: tj.Name}); err != nil {
		return 0, fmt.Errorf("listing the pods of the finished TrainJob, before deleting its ComputeDomain: %w", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return computeDomainRetry, nil
		}
	}
	cd := &metav1.PartialObjectMetadata{}
	cd.SetGroupVersionKind(pipeline.ComputeDomainGVK)
	err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(tj), cd)
	switch {
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err) || err == nil && !ours(cd, tj):
		// None, or someone else's, or one being deleted: nothing to do, now or later.
		r.computeDomainGone.store(tj, struct{}{})
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the ComputeDomain of the finished TrainJob: %w", err)
	}
	err = r.client.Delete(ctx, cd, client.Preconditions{UID: &cd.UID})
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("Deleted the ComputeDomain of the finished TrainJob", "computeDomain", klog.KObj(cd))
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
		return 0, fmt.Errorf("deleting the ComputeDomain of the finished TrainJob: %w", err)
	}
	r.computeDomainGone.store(tj, struct{}{})
	return 0, nil
}

// computeDomainRetry is how often a finished TrainJob's pods are looked at again while one still
// runs, before its ComputeDomain is deleted.
const computeDomainRetry = 5 * time.Second

// hasComputeDomain says whether the TrainJob's runtime gave it a ComputeDomain: its status's
// snapshot says, or, for a TrainJob that finished before it recorded one (its JobSet refused, or
// in someone else's way), the runtime as it is.
func (r *TrainJobReconciler) hasComputeDomain(ctx context.Context, tj *trainer.TrainJob) bool {
	if trainingruntime.SnapshotRecorded(tj) {
		return tj.Status.RuntimeSnapshot.ComputeDomain != nil
	}
	rt, err := trainingruntime.Resolve(ctx, r.client, tj)
	return err == nil && rt.Spec.ComputeDomain != nil
}

// applySuspend sets the JobSet's spec.suspend with server-side apply like every write of the
// JobSet, under a field manager of its own: an apply by the builder's manager that held only
// spec.suspend would remove every other field that manager applied. A restart for a stall also
// numbers itself in stallRestartsAnnotation (restart > 0), which an apply without it removes. The
// apply carries the JobSet's resourceVersion, so that it changes the JobSet that was read and
// never creates one (an apply of a JobSet deleted meanwhile would create an empty one): a JobSet
// changed meanwhile is a conflict, and the TrainJob is reconciled again.
func (r *TrainJobReconciler) applySuspend(ctx context.Context, js *jobsetv1alpha2.JobSet, suspend bool, restart int32) error {
	if ptr.Deref(js.Spec.Suspend, false) == suspend {
		return nil
	}
	ac := jobsetac.JobSet(js.Name, js.Namespace).WithResourceVersion(js.ResourceVersion).
		WithSpec(jobsetac.JobSetSpec().WithSuspend(suspend))
	if restart > 0 {
		ac.WithAnnotations(map[string]string{stallRestartsAnnotation: strconv.Itoa(int(restart))})
	}
	if err := r.client.Apply(ctx, ac, client.FieldOwner(fieldManager(r.framework)+"-suspend"), client.ForceOwnership); err != nil {
		return fmt.Errorf("setting suspend of JobSet %s to %t: %w", klog.KObj(js), suspend, err)
	}
	// The rest of the reconcile sees the JobSet as it now is: a step that suspends it again
	// after one resumed it (a stall whose status write had failed) must not take it for
	// suspended still, and skip the write.
	js.Spec.Suspend = ptr.To(suspend)
	ctrl.LoggerFrom(ctx).V(2).Info("Set JobSet suspend", "jobSet", klog.KObj(js), "suspend", suspend)
	return nil
}

// jobSet reads the TrainJob's JobSet from the cache, or nil when the cache has none. The cache
// may not have seen a JobSet created a moment ago, by the operator or by someone else: the first
// write of a JobSet is a create, which the API server refuses if one exists, so that a JobSet
// that is not the TrainJob's is never taken over.
func (r *TrainJobReconciler) jobSet(ctx context.Context, tj *trainer.TrainJob) (*jobsetv1alpha2.JobSet, error) {
	js := &jobsetv1alpha2.JobSet{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(tj), js)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return js, err
}

// jobSetType is a JobSet's type, to read its metadata alone.
var jobSetType = metav1.TypeMeta{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: "JobSet"}

// jobSetNotSeen handles a JobSet that exists but that the cache has not seen yet, read past the
// cache once: the TrainJob's own, created a moment ago, is seen soon; someone else's is reported.
func (r *TrainJobReconciler) jobSetNotSeen(ctx context.Context, tj *trainer.TrainJob) (ctrl.Result, error) {
	js := &jobsetv1alpha2.JobSet{}
	err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(tj), js)
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{RequeueAfter: conflictRetry}, nil // Gone meanwhile: create it again.
	case err != nil:
		return ctrl.Result{}, err
	case !metav1.IsControlledBy(js, tj):
		setNotOurs(tj, notOurs(r.client, js))
		return ctrl.Result{}, nil
	default:
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
}

// jobSetGone handles a TrainJob whose pods may have run and whose JobSet the cache does not have.
// The cache may lag (the JobSet was created a moment ago, or the manager just started): the API
// server says. A JobSet that is gone was deleted before the TrainJob saw it finish: the TrainJob
// fails, as its outcome is unknown, rather than run a second time.
func (r *TrainJobReconciler) jobSetGone(ctx context.Context, tj *trainer.TrainJob) (ctrl.Result, error) {
	js := &jobsetv1alpha2.JobSet{}
	err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(tj), js)
	switch {
	case err == nil:
		return ctrl.Result{RequeueAfter: conflictRetry}, nil // The cache has not seen it yet.
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	setCondition(tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobJobSetDeletedReason,
		fmt.Sprintf("JobSet %q was deleted before it finished, after its pods may have run: the training is not run a second time. "+
			"Create the TrainJob again to run it again", tj.Name))
	// Nothing runs: no counts of a JobSet that is gone.
	tj.Status.JobsStatus, tj.Status.Ready = nil, ""
	setRunning(tj, 0, 0)
	return ctrl.Result{}, nil
}

// recreate deletes a suspended JobSet that cannot take the TrainJob's changes, or that failed
// after its suspension, so that it is created again as the TrainJob now says. Its Jobs go first (foreground deletion): the new
// JobSet's Jobs take their names. Its deletion queues the TrainJob. The TrainJob's status says
// first that it is suspended while its JobSet is made anew: a JobSet that is gone once the
// TrainJob's pods may have run fails the TrainJob (mayHaveRun), and a TrainJob resumed meanwhile
// would look so.
func (r *TrainJobReconciler) recreate(ctx context.Context, tj *trainer.TrainJob, before *trainer.TrainJobStatus, js *jobsetv1alpha2.JobSet, refusal error) (ctrl.Result, error) {
	if !apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobSuspended) {
		setCondition(tj, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobRebuildingReason,
			"The TrainJob's JobSet is suspended and made anew: "+refusal.Error())
		if result, err := r.commit(ctx, tj, before); err != nil || !result.IsZero() {
			return result, err
		}
	}
	err := r.client.Delete(ctx, js, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &js.UID})
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting JobSet %s to create it again: %w", klog.KObj(js), err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleting the suspended JobSet to create it again",
		"jobSet", klog.KObj(js), "because", refusal.Error())
	return ctrl.Result{}, nil
}

// createChildren creates the children beside the JobSet (createChild: an object of a child's name
// is used only if it is the TrainJob's own).
func (r *TrainJobReconciler) createChildren(ctx context.Context, tj *trainer.TrainJob, children *pipeline.Children) error {
	for _, obj := range children.Create {
		if err := createChild(ctx, r.client, tj, obj, client.FieldOwner(fieldManager(r.framework))); err != nil {
			if isNotOurs(err) {
				return err
			}
			if apimeta.IsNoMatchError(err) {
				return &notServedError{gvk: obj.GetObjectKind().GroupVersionKind()}
			}
			return fmt.Errorf("creating %s %q: %w", kindOf(r.client, obj), obj.GetName(), err)
		}
	}
	return nil
}

// notServedError says that the cluster does not serve the kind of a child the runtime asks for
// (a ComputeDomain without NVIDIA's driver).
type notServedError struct{ gvk schema.GroupVersionKind }

func (e *notServedError) Error() string {
	return fmt.Sprintf("the runtime asks for a %s, which the cluster does not serve (%s): install its CRD (for a ComputeDomain, NVIDIA's DRA driver for GPUs), or run the TrainJob from a runtime that does not need it",
		e.gvk.Kind, e.gvk.GroupVersion())
}

// writeJobSet writes the JobSet. The first time (js is nil: the cache has no JobSet), it is
// created, which fails with errJobSetExists if there is one after all. It is written again, with
// server-side apply, only to rebuild it.
func (r *TrainJobReconciler) writeJobSet(ctx context.Context, tj *trainer.TrainJob, children *pipeline.Children, js *jobsetv1alpha2.JobSet) error {
	if js == nil {
		return r.create(ctx, children.JobSet)
	}
	owner := client.FieldOwner(fieldManager(r.framework))
	version, err := r.takeOverCreatedFields(ctx, tj, js)
	if err != nil {
		return err
	}
	// The apply carries the resourceVersion of the JobSet proven the TrainJob's: it never creates
	// a JobSet (one deleted meanwhile) nor changes one made meanwhile by someone else.
	if err := r.client.Apply(ctx, children.JobSet.WithResourceVersion(version), owner, client.ForceOwnership); err != nil {
		return fmt.Errorf("applying JobSet %q: %w", *children.JobSet.Name, err)
	}
	return nil
}

// create creates the JobSet from its apply configuration, so that it holds exactly the fields an
// apply would have set. The request is sent as the apply configuration encodes it, and the
// JobSet the API server answers with is not decoded: nothing reads it, and decoding a whole
// JobSet is most of a create's cost to the manager.
func (r *TrainJobReconciler) create(ctx context.Context, ac *jobsetac.JobSetApplyConfiguration) error {
	body, err := json.Marshal(ac)
	if err != nil {
		return err
	}
	err = r.jobSets.Post().Namespace(*ac.Namespace).Resource("jobsets").
		Param("fieldManager", fieldManager(r.framework)).
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).
		Do(ctx).Error()
	if apierrors.IsAlreadyExists(err) {
		return errJobSetExists
	}
	if err != nil {
		return fmt.Errorf("creating JobSet %q: %w", *ac.Name, err)
	}
	return nil
}

// takeOverCreatedFields hands the fields the JobSet's create set over from the create's entry of
// the JobSet's managed fields to the controller's server-side apply entry, so that an apply
// which no longer sets a field removes it, as if the JobSet had been applied from the start.
// client-go's csaupgrade does exactly this for client-side apply. The cache holds no managed
// fields: the JobSet is read from the API server, in this rare step only. It returns the
// resourceVersion of the JobSet, still the TrainJob's, after the change.
func (r *TrainJobReconciler) takeOverCreatedFields(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) (string, error) {
	live := &jobsetv1alpha2.JobSet{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(js), live); err != nil {
		return "", fmt.Errorf("reading JobSet %s: %w", klog.KObj(js), err)
	}
	if !ours(live, tj) {
		return "", apierrors.NewConflict(jobsetv1alpha2.Resource("jobsets"), js.Name, errors.New("the JobSet changed hands or is being deleted"))
	}
	manager := fieldManager(r.framework)
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(manager), manager)
	if err != nil || patch == nil {
		return live.ResourceVersion, err
	}
	if err := r.client.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return "", fmt.Errorf("taking over the fields of JobSet %s: %w", klog.KObj(js), err)
	}
	return live.ResourceVersion, nil
}

// permanent reports whether the API server refused a write for what was written, so that the
// same write can never succeed: invalid, malformed, too large, or denied by an admission webhook
// (JobSet's refuses what it will never accept that way). Anything else (conflicts, quota,
// throttling, timeouts, a webhook that cannot be reached) may pass later and is retried.
func permanent(err error) bool {
	var notServed *notServedError
	return errors.As(err, &notServed) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err) ||
		(apierrors.IsForbidden(err) && strings.Contains(err.Error(), "denied the request"))
}
