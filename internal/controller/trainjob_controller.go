// Package controller runs one TrainJob controller per ML framework. Every controller is the same
// reconciler around a different framework.Framework: it resolves the runtime, builds the JobSet
// through the shared pipeline, applies it, and reports the JobSet's progress in the TrainJob's
// status.
package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/pipeline"
	"github.com/trainjob/operator/internal/progress"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// conflictRetry is how soon a TrainJob whose status write lost a race is reconciled again.
const conflictRetry = 100 * time.Millisecond

// TrainJobReconciler reconciles the TrainJobs whose runtime selects its framework.
type TrainJobReconciler struct {
	client client.Client
	// apiReader reads from the API server, past the cache: what the cache leaves out.
	apiReader client.Reader
	// jobSets and trainJobs are REST clients of JobSets and TrainJobs, for the requests whose
	// answer is not read.
	jobSets, trainJobs rest.Interface
	recorder           events.EventRecorder
	framework          framework.Framework
	// frameworks are all the frameworks the manager runs, to tell whose a TrainJob is.
	frameworks []framework.Framework
	// runtimeGracePeriod is how long a new TrainJob waits for its runtime to appear before it is
	// Failed: a runtime applied together with the TrainJob may reach the cache a moment later.
	runtimeGracePeriod time.Duration
	// progress is the endpoint whose wiring every JobSet gets, or nil.
	progress *progress.Endpoint
	// gangReports say why the gang controller could not write a TrainJob's PodGroup.
	gangReports *gangReports
	// conditions is which conditions the TrainJobs get.
	conditions ConditionSet
	// started is when the manager started, and with it the progress endpoint: a stall is never
	// counted from earlier.
	started time.Time
	// minStallWindow is the least time a trainer's progress may stay the same before it is
	// called stalled, whatever its deadline: twice the progress endpoint's write interval.
	minStallWindow time.Duration
	// refusals are the resizes JobSets refused (elastic.go).
	refusals memo[resizeRefusal]
	// warned is the last message of each Warning told once, by reason (warnOnce).
	warned memo[map[string]string]
	// refusedBuilds counts the TrainJob's children the API server refused in a row, for the
	// back-off of their next write (refusalBackoff).
	refusedBuilds memo[refusedBuild]
	// autoscalerHeld is the autoscaler not written, refused or someone else's (autoscale).
	autoscalerHeld memo[heldAutoscaler]
	// computeDomainGone are the finished TrainJobs whose ComputeDomain is known gone
	// (deleteComputeDomain): not looked for again.
	computeDomainGone memo[struct{}]
}

// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs/status,verbs=update
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainingruntimes;clustertrainingruntimes,verbs=get;list;watch
// +kubebuilder:rbac:groups=jobset.x-k8s.io,resources=jobsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;patch
// +kubebuilder:rbac:groups=resource.nvidia.com,resources=computedomains,verbs=get;create;patch;delete

// Reconcile brings one TrainJob's children in line with it and writes its status once.
func (r *TrainJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tj, err := managedTrainJob(ctx, r.client, req)
	if tj == nil {
		if err == nil { // Gone, going, or another controller's now.
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if tj.Finished() {
		return r.followFinished(ctx, tj)
	}
	before := tj.Status.DeepCopy()
	result, err := r.reconcile(ctx, tj, before)
	if err == nil {
		err = r.autoscale(ctx, tj)
	}
	if wait := r.autoscalerRetry(tj); wait > 0 && (result.RequeueAfter == 0 || wait < result.RequeueAfter) {
		result.RequeueAfter = wait // Someone's autoscaler may be gone by then, or a policy lifted.
	}
	recordCreationFailure(r.framework, tj)
	if left, ok := timeLeft(tj, time.Now()); ok && !tj.Finished() && (result.RequeueAfter == 0 || left < result.RequeueAfter) {
		result.RequeueAfter = max(left, time.Millisecond) // Check the deadline when it passes: at once when it has.
	}
	reason, all := settle(tj, before, r.conditions)
	if !apiequality.Semantic.DeepEqual(before, &tj.Status) {
		if werr := r.writeStatus(ctx, tj); werr != nil {
			if apierrors.IsConflict(werr) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("writing status: %w", werr))
		}
		r.told(ctx, tj, before, reason, all)
		if stoppedByTheOperator(tj) || tj.Finished() && r.hasComputeDomain(ctx, tj) {
			// Its JobSet, or its ComputeDomain, is deleted next (followFinished), whether or not
			// the JobSet changes.
			result = ctrl.Result{RequeueAfter: conflictRetry}
		}
	}
	if err == nil {
		// Once the status says the size: admission lets the operator write down only that one.
		err = r.recordSize(ctx, tj)
	}
	return result, err
}

// forget drops what the reconciler keeps of the TrainJob of that name (memo).
func (r *TrainJobReconciler) forget(key types.NamespacedName) {
	r.refusals.forget(key)
	r.warned.forget(key)
	r.refusedBuilds.forget(key)
	r.autoscalerHeld.forget(key)
	r.computeDomainGone.forget(key)
}

// followFinished keeps a finished TrainJob's jobsStatus and READY in step with its JobSet, whose
// Jobs may still wind down after its terminal state (MPI's workers stop after the launcher
// succeeded), and deletes the JobSet of one the operator stopped. Nothing else of it changes: its
// conditions are final.
func (r *TrainJobReconciler) followFinished(ctx context.Context, tj *trainer.TrainJob) (ctrl.Result, error) {
	result, err := r.followFinishedJobSet(ctx, tj)
	// Whatever became of the JobSet: one step's failure does not hold the other back.
	wait, cdErr := r.deleteComputeDomain(ctx, tj)
	if wait > 0 && (result.RequeueAfter == 0 || wait < result.RequeueAfter) {
		result.RequeueAfter = wait
	}
	return result, errors.Join(err, cdErr)
}

func (r *TrainJobReconciler) followFinishedJobSet(ctx context.Context, tj *trainer.TrainJob) (ctrl.Result, error) {
	if err := r.autoscale(ctx, tj); err != nil {
		return ctrl.Result{}, err
	}
	js, err := r.jobSet(ctx, tj)
	if err != nil || js == nil || !metav1.IsControlledBy(js, tj) {
		return ctrl.Result{}, err
	}
	if stoppedByTheOperator(tj) {
		return ctrl.Result{}, r.deleteStoppedJobSet(ctx, js)
	}
	before := tj.Status.DeepCopy()
	setJobSetCounts(tj, js)
	tj.Status.State = statusState(&tj.Status) // Finished by an operator that kept no state.
	if apiequality.Semantic.DeepEqual(before, &tj.Status) {
		return ctrl.Result{}, nil
	}
	if err := r.writeStatus(ctx, tj); apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	} else if err != nil {
		return ctrl.Result{}, fmt.Errorf("writing status: %w", err)
	}
	return ctrl.Result{}, nil
}

// reconcile runs the steps for a TrainJob that is neither finished nor someone else's, and sets
// its status in memory. A step that must not happen before the status says so writes it first
// (commit), and before becomes what was written.
func (r *TrainJobReconciler) reconcile(ctx context.Context, tj *trainer.TrainJob, before *trainer.TrainJobStatus) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)

	// 1. Read the JobSet the TrainJob already has, if any. A JobSet that finished decides how
	// the TrainJob ends, whatever its deletion state, and is never written again. A TrainJob
	// whose JobSet is gone after its pods may have run is not run again.
	js, err := r.jobSet(ctx, tj)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case js != nil && !metav1.IsControlledBy(js, tj):
		// Someone else's JobSet is never touched; the TrainJob's deadline still holds: it never
		// ran, and fails when its time is up.
		setNotOurs(tj, notOurs(r.client, js))
		if left, ok := timeLeft(tj, time.Now()); ok && left <= 0 {
			setCondition(tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobDeadlineExceededReason,
				fmt.Sprintf("TrainJob passed %s waiting for JobSet %q, which is not its own: it never ran", deadlineText(tj), js.Name))
		}
		return ctrl.Result{}, nil
	case js != nil && js.Status.TerminalState != "" && ptr.Deref(tj.Spec.Suspend, false) && failedSuspended(js):
		// The pods the suspension stopped failed as its failure policy counts failures (a Job's
		// pod failure policy does not tell a stopped pod from a failed one): not the training's
		// failure. The JobSet is made anew, as a suspended JobSet that cannot take an edit is.
		return r.recreate(ctx, tj, before, js, errors.New("it failed after it was suspended: its pods stopped for the suspension met its failure policy"))
	case js != nil && js.Status.TerminalState != "":
		if js.Status.TerminalState == string(jobsetv1alpha2.JobSetFailed) {
			r.readFailure(ctx, tj, js, js.Status.Restarts)
		}
		setJobSetStatus(tj, js)
		return ctrl.Result{}, nil
	case js == nil && mayHaveRun(tj):
		return r.jobSetGone(ctx, tj)
	}

	jobSetWasSuspended := js != nil && ptr.Deref(js.Spec.Suspend, false)
	// A JobSet the operator suspended to restart the TrainJob after a stall: the TrainJob was not
	// suspended, and is not resumed when its JobSet is.
	restarting := restartingForStall(tj, js)

	// 2. Stop a TrainJob that ran past its deadline: its JobSet first, so that a TrainJob is
	// never Failed (and so final) with its pods still running.
	if left, ok := timeLeft(tj, time.Now()); ok && left <= 0 && (js == nil || js.Status.TerminalState == "") {
		message := fmt.Sprintf("TrainJob ran longer than %s: its pods are stopped", deadlineText(tj))
		if js != nil {
			// Its pods say why it took so long (one that cannot pull its image, one that
			// failed), until the JobSet's suspension deletes them.
			r.readFailure(ctx, tj, js, js.Status.Restarts)
			message = withFailure(message, tj, js.Status.Restarts)
		}
		return ctrl.Result{}, r.stopAndFail(ctx, tj, js, trainer.TrainJobDeadlineExceededReason, message)
	}

	// 3. Resolve the runtime. Without a JobSet, a runtime missing from the TrainJob's creation to
	// the end of the grace period fails the TrainJob. With one, the runtime was deleted while in
	// use: runtimes are blueprints, so the TrainJob goes on as it was built, and can still be
	// suspended and resumed.
	rt, err := r.runtimeOf(ctx, tj, js)
	switch {
	case errors.Is(err, trainingruntime.ErrNotFound) && js != nil:
		rt = nil
	case errors.Is(err, trainingruntime.ErrNotFound) && (jobSetMade(tj) || apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated) != nil):
		// The runtime was there (the TrainJob was built, or tried to be) and went before the
		// JobSet was made: it was not mistyped. Wait for it rather than fail.
		setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason,
			fmt.Sprintf("The runtime was deleted before the TrainJob's JobSet was created: %v; restore it, or delete the TrainJob", err))
		return ctrl.Result{}, nil
	case errors.Is(err, trainingruntime.ErrNotFound):
		if wait := r.runtimeGracePeriod - time.Since(tj.CreationTimestamp.Time); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		setCondition(tj, trainer.TrainJobFailed, metav1.ConditionTrue, trainer.TrainJobRuntimeNotFoundReason,
			fmt.Sprintf("The runtime of spec.runtimeRef cannot be found: %v", err))
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, err
	case framework.Select(r.frameworks, rt.Spec.MLPolicy) != r.framework:
		// The runtime changed framework since the event was queued: the controller of the new
		// framework, which the runtime's event queued as well, takes the TrainJob, and this one
		// forgets it.
		r.forget(client.ObjectKeyFromObject(tj))
		return ctrl.Result{}, nil
	}

	// 4. Write the JobSet. It is built when it is first created, and built again only when the
	// TrainJob changed while suspended: a runtime's change alone never reaches it. Otherwise only
	// its suspend flag follows the TrainJob's. A JobSet whose pods may start waits for its gang's
	// PodGroup, built from the same spec.
	suspend := ptr.Deref(tj.Spec.Suspend, false)
	built := false
	switch {
	case js != nil && js.DeletionTimestamp != nil:
		// Being deleted: to be created again (below) if its pods never ran. Its deletion queues
		// the TrainJob.
		return ctrl.Result{}, nil
	case restarting:
		// Resumed once its pods are gone (stall.go).
		if wait, err := r.resumeRestarted(ctx, tj, js, rt); err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	case js != nil && !jobSetWasSuspended && changedUnseen(tj, js):
		// The suspension the operator did not see is made now: the JobSet's pods stop, and the
		// JobSet is built again from the TrainJob's spec (its update queues the TrainJob). The
		// status says so first: until it is built again, the TrainJob is in fact suspended, and
		// its pods known not to run (mayHaveRun).
		setCondition(tj, trainer.TrainJobSuspended, metav1.ConditionTrue, trainer.TrainJobRebuildingReason,
			"The TrainJob was suspended, changed and resumed while the operator could not see it: its JobSet, which still ran the previous spec, is stopped and built again from this one")
		setRunning(tj, 0, 0)
		if result, err := r.commit(ctx, tj, before); err != nil || !result.IsZero() {
			return result, err
		}
		if err := r.setJobSetSuspend(ctx, js, true); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("The TrainJob was suspended, changed and resumed unseen: suspended its JobSet to build it again", "jobSet", klog.KObj(js))
		return ctrl.Result{}, nil
	case js == nil || (jobSetWasSuspended && !framework.Built(js, tj, policyOf(rt, tj))):
		if rt == nil {
			setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason,
				"The TrainJob changed while suspended, but its runtime is gone: restore the runtime, or undo the change")
			return ctrl.Result{}, nil
		}
		if whole, err := readWhole(ctx, r.apiReader, tj); err != nil || !whole {
			return ctrl.Result{}, err
		}
		// The TrainJob is built from its runtime as it was when its JobSet was first made: a copy
		// is kept before the JobSet is written, which records its digest, and the status write
		// that says the JobSet is made records it. Until a JobSet is made from it, the copy
		// follows the runtime.
		var snapshot *corev1.ConfigMap
		var recorded *trainer.RuntimeSnapshot
		if !rt.Snapshotted() {
			snapshot, recorded, err = trainingruntime.Snapshot(tj, rt, map[string]string{trainer.TrainJobNameLabel: tj.Name}, framework.OwnerReference(tj))
			if err != nil {
				setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason, err.Error())
				return ctrl.Result{}, nil
			}
			rt = rt.From(recorded)
		} else if rt, err = rt.Load(ctx, r.apiReader, tj); errors.Is(err, trainingruntime.ErrSnapshotUnusable) {
			setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason,
				err.Error()+": the TrainJob cannot be built again as it was; create it anew to build it from the runtime as it is now")
			return ctrl.Result{}, nil
		} else if err != nil {
			return ctrl.Result{}, err
		}
		// A JobSet whose pods may start waits for its gang's PodGroup, which the gang controller
		// builds from the same copy: the JobSet is built once it is there. When the gang
		// controller could not build it, the TrainJob's own build says why (or, built from the
		// copy this controller holds, it waits on).
		waitForGang := false
		if !suspend {
			wait, err := r.waitForPodGroup(ctx, tj, rt, js)
			if err != nil || (wait && !r.gangCannotBuild(tj)) {
				return ctrl.Result{}, err
			}
			waitForGang = wait
		}
		// Progress reporting is optional: a TrainJob whose trainer cannot be wired to the
		// endpoint (its CA cannot be read) is built without it, and told so once it is written.
		var extra []pipeline.Step
		var progressOff error
		if r.progress != nil {
			step, err := r.progress.Step()
			if err != nil {
				progressOff = err
			} else {
				extra = append(extra, step)
			}
		}
		children, err := pipeline.Build(tj, rt, r.framework, extra...)
		if err != nil {
			setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason, err.Error())
			return ctrl.Result{}, nil
		}
		if waitForGang {
			return ctrl.Result{}, nil
		}
		digest, _ := rt.Digest() // A snapshot's: it cannot fail.
		children.JobSet.WithAnnotations(map[string]string{trainingruntime.DigestAnnotation: digest})
		if snapshot != nil {
			if stop, result, err := r.keepSnapshot(ctx, tj, rt, snapshot, js); stop {
				return result, err
			}
		}
		// The children beside the JobSet follow its size and processes (MPI's hostfile, Flux's
		// scripts): written each time it is built (unchanged, they are not written again).
		// Before a JobSet that may start pods, so that they find what they mount; after a
		// rebuild that stays suspended, so that a refused rebuild leaves them as the JobSet it
		// leaves is.
		childrenFirst := js == nil || !ptr.Deref(children.JobSet.Spec.Suspend, false)
		if childrenFirst {
			err = r.createChildren(ctx, tj, children)
		}
		if err == nil {
			err = r.writeJobSet(ctx, tj, children, js)
		}
		if err == nil && !childrenFirst {
			err = r.createChildren(ctx, tj, children)
		}
		switch {
		case errors.Is(err, errJobSetExists):
			return r.jobSetNotSeen(ctx, tj)
		case isNotOurs(err):
			// Not watched (the operator may not read Secrets): looked at again shortly.
			setNotOurs(tj, err)
			return ctrl.Result{RequeueAfter: notOursRetry}, nil
		case js != nil && apierrors.IsInvalid(err):
			// JobSet lets a suspended JobSet change only its pods' labels, annotations, node
			// selector, tolerations and scheduling gates. Other changes make a new one.
			return r.recreate(ctx, tj, before, js, err)
		case permanent(err):
			// The same write may pass later (a policy lifted, a webhook fixed, a quota freed):
			// tried again after a back-off that grows to refusalRetryCap, and at once when the
			// TrainJob or its runtime changes.
			refused, _ := r.refusedBuilds.load(tj)
			if refused.generation != tj.Generation {
				refused = refusedBuild{generation: tj.Generation} // Changed: from 2 s again.
			}
			wait := refusalBackoff(refused.count)
			wait += rand.N(wait/10 + 1) // Apart, the TrainJobs refused together.
			refused.count++
			r.refusedBuilds.store(tj, refused)
			setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsCreationFailedReason,
				fmt.Sprintf("%v; tried again with a back-off of up to %s", err, refusalRetryCap))
			log.Info("The API server refused the TrainJob's children; trying again", "error", err.Error(), "after", wait)
			return ctrl.Result{RequeueAfter: wait}, nil
		case err != nil:
			setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsCreationFailedReason, err.Error())
			return ctrl.Result{}, fmt.Errorf("writing the children of %s: %w", klog.KObj(tj), err)
		}
		built = true
		if recorded != nil {
			tj.Status.RuntimeSnapshot = recorded
		}
		r.refusedBuilds.delete(tj)
		log.V(2).Info("Wrote JobSet", "jobSet", klog.KObj(tj), "suspend", suspend)
		if progressOff != nil {
			log.Info("Built the JobSet without progress reporting", "error", progressOff.Error())
			r.recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainer.TrainJobProgressUnavailableReason, "Build",
				"The trainer cannot report its progress: %v. The training runs; status.trainerStatus stays empty", progressOff)
		}
		if js == nil {
			// The JobSet just created: its size, and no progress yet. Its creation does not queue
			// the TrainJob, so this is the status until the JobSet changes.
			js = &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Annotations: children.JobSet.Annotations}}
			// Its attempts count from the first again: the failures of one made before are past.
			tj.Status.Failure = nil
		}
	case ptr.Deref(js.Spec.Suspend, false) != suspend && (suspend || !failingForStall(tj, rt)):
		// A JobSet is never resumed before its gang's PodGroup exists at the TrainJob's size,
		// nor when the operator suspended it to fail a stalled TrainJob (stall.go).
		if !suspend && rt != nil {
			if wait, err := r.waitForPodGroup(ctx, tj, rt, js); wait || err != nil {
				return ctrl.Result{}, err
			}
		}
		if err := r.setJobSetSuspend(ctx, js, suspend); err != nil {
			return ctrl.Result{}, err
		}
	}
	// An elastic TrainJob's size follows spec.trainer.numNodes, running or not (elastic.go).
	var resizeWait time.Duration
	if !built {
		if js, resizeWait, err = r.resize(ctx, tj, js); err != nil {
			return ctrl.Result{}, err
		}
	}
	setCreated(tj)

	// 5. Report suspension and the JobSet's progress.
	now := time.Now()
	if !suspend && tj.Status.StartTime == nil {
		tj.Status.StartTime = ptr.To(startedAt(tj))
	}
	setSuspended(tj, jobSetWasSuspended && !restarting, now)
	if js.Status.Restarts > tj.Status.Restarts {
		// JobSet restarted the pods after a failure the pod failure reports may not have read.
		r.readFailure(ctx, tj, js, js.Status.Restarts-1)
	}
	setJobSetStatus(tj, js)
	setReadyTime(tj, now)

	// 6. Catch a training that stalled: its trainer's progress did not advance for its deadline
	// while its pods ran (stall.go).
	if suspend || restarting {
		return ctrl.Result{RequeueAfter: resizeWait}, nil
	}
	result, err := r.catchStall(ctx, tj, js, rt, before)
	if resizeWait > 0 && (result.RequeueAfter == 0 || resizeWait < result.RequeueAfter) {
		result.RequeueAfter = resizeWait
	}
	return result, err
}

// changedUnseen reports whether a TrainJob whose JobSet runs was suspended, changed and resumed
// while the operator did not see it (it was down, failing over, or its cache lagged). Admission
// lets a running TrainJob change nothing its JobSet is built from (framework.BuiltFrom), and each
// update of the spec is a generation: a spec unlike the JobSet's, two or more generations after
// the one its JobSet was last made from or brought in line with (status.observedGeneration), went
// through a suspension. One generation is an edit admission did not check (webhooks off): the
// running JobSet is left alone, as documented. A JobSet running the TrainJob's previous spec is
// then stopped and built again, as the suspension and resume would have done.
func changedUnseen(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) bool {
	observed := observedGeneration(tj)
	return observed > 0 && tj.Generation-observed >= 2 && !framework.Built(js, tj, framework.SnapshotPolicy(tj))
}

// policyOf is the ML policy of the TrainJob's runtime: rt's, else (its runtime gone) the one its
// snapshot records.
func policyOf(rt *trainingruntime.Runtime, tj *trainer.TrainJob) *trainer.MLPolicy {
	if rt != nil {
		return rt.Spec.MLPolicy
	}
	return framework.SnapshotPolicy(tj)
}

// setNotOurs says that the TrainJob waits for an object of a child's name that is not its own.
func setNotOurs(tj *trainer.TrainJob, err error) {
	setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobObjectNotOwnedReason, err.Error())
}

// notOursRetry is how soon a TrainJob that waits for an object of a child's name that is not its
// own, and that the operator does not watch, looks again.
const notOursRetry = 2 * time.Second

// A TrainJob's children that the API server refused are written again after refusalRetryBase,
// then after twice as long each time, up to refusalRetryCap: as the Job controller does with a
// pod that keeps failing.
const (
	refusalRetryBase = 2 * time.Second
	refusalRetryCap  = 5 * time.Minute
)

// refusedBuild counts the refusals in a row of a TrainJob of that generation's children.
type refusedBuild struct {
	generation int64
	count      int
}

// refusalBackoff is how long to wait before writing again children refused `refused` times
// before this refusal.
func refusalBackoff(refused int) time.Duration {
	if refused >= 8 { // 2 s << 8 is past the cap already; no overflow.
		return refusalRetryCap
	}
	return min(refusalRetryBase<<refused, refusalRetryCap)
}

// podGroupCopy is the digest of the runtime copy a gang's PodGroup is built from: that of its
// JobSet js, fromJobSet, when js was built from the TrainJob as it is now (the status's record
// once there is one; empty for a JobSet built before snapshots, as its PodGroup); otherwise that
// of the copy the next build takes of rt.
func podGroupCopy(tj *trainer.TrainJob, rt *trainingruntime.Runtime, js *jobsetv1alpha2.JobSet) (digest string, fromJobSet bool, _ error) {
	if js != nil && framework.Built(js, tj, rt.Spec.MLPolicy) {
		digest := js.Annotations[trainingruntime.DigestAnnotation]
		if digest != "" && trainingruntime.SnapshotRecorded(tj) {
			digest = tj.Status.RuntimeSnapshot.Digest // What the JobSet was built from; its annotation may have been changed since.
		}
		return digest, true, nil
	}
	digest, err := rt.Digest()
	return digest, false, err
}

// runtimeOf is the runtime the TrainJob runs with (trainingruntime.ForTrainJob). A JobSet made
// from a copy its status does not record (the operator stopped between the JobSet's write and
// the status's) has it recorded from the copy, which must still have the JobSet's digest; one
// that no longer has it (deleted or changed in between) leaves the TrainJob as one built before
// snapshots: a later build takes a new copy of the runtime as it is then.
func (r *TrainJobReconciler) runtimeOf(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) (*trainingruntime.Runtime, error) {
	var digest string
	if js != nil {
		digest = js.Annotations[trainingruntime.DigestAnnotation]
	}
	if digest == "" || trainingruntime.SnapshotRecorded(tj) {
		// A recorded copy is the one: a JobSet's annotation, which its writers may change, never
		// replaces it.
		return trainingruntime.ForTrainJob(ctx, r.client, tj)
	}
	recorded, err := trainingruntime.Recover(ctx, r.apiReader, tj, digest)
	switch {
	case errors.Is(err, trainingruntime.ErrSnapshotUnusable):
		ctrl.LoggerFrom(ctx).Info("The runtime copy the JobSet was built from cannot be recorded", "error", err.Error())
		return trainingruntime.ForTrainJob(ctx, r.client, tj)
	case err != nil:
		return nil, err
	}
	// Recorded with the JobSet's creation, which the lost write said, so that the copy is the
	// TrainJob's whichever controller its policies now choose.
	tj.Status.RuntimeSnapshot = recorded
	setCreated(tj)
	return trainingruntime.Recorded(tj), nil
}

// setCreated says that the TrainJob's JobSet is made.
func setCreated(tj *trainer.TrainJob) {
	kind, name := trainingruntime.Ref(tj)
	setCondition(tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason,
		fmt.Sprintf("JobSet %q is created from %s %q", tj.Name, kind, name))
}

// failedSuspended reports whether a JobSet failed after it was suspended: its Failed condition
// is no older than its Suspended one, which is True.
func failedSuspended(js *jobsetv1alpha2.JobSet) bool {
	if js.Status.TerminalState != string(jobsetv1alpha2.JobSetFailed) || !ptr.Deref(js.Spec.Suspend, false) {
		return false
	}
	suspended := apimeta.FindStatusCondition(js.Status.Conditions, string(jobsetv1alpha2.JobSetSuspended))
	failed := apimeta.FindStatusCondition(js.Status.Conditions, string(jobsetv1alpha2.JobSetFailed))
	return suspended != nil && suspended.Status == metav1.ConditionTrue && failed != nil && !failed.LastTransitionTime.Before(&suspended.LastTransitionTime)
}

// mayHaveRun reports whether the TrainJob's pods may have run: its status last saw its JobSet
// made and not suspended (state Created or Running), and it is not suspended. Its JobSet is never
// created again then: a second JobSet would run the training a second time. A suspended
// TrainJob's JobSet may be made again (the operator itself deletes a suspended JobSet that cannot
// take an edit).
func mayHaveRun(tj *trainer.TrainJob) bool {
	state := statusState(&tj.Status)
	return (state == trainer.TrainJobCreated || state == trainer.TrainJobRunning) && !ptr.Deref(tj.Spec.Suspend, false)
}

// waitForPodGroup reports whether the TrainJob's gang needs a PodGroup that is not there yet, or
// was built from an older spec of the TrainJob or another copy of its runtime than its JobSet js
// is, or is about to be, built from (podGroupCopy), or is not the TrainJob's. The gang controller
// writes it, and that queues the TrainJob again; what keeps it from writing it (a refusal, a
// PodGroup of the name that is someone else's), it reports, and the TrainJob says. A PodGroup
// kind whose CRD is not installed cannot be waited for: the TrainJob is told so.
func (r *TrainJobReconciler) waitForPodGroup(ctx context.Context, tj *trainer.TrainJob, rt *trainingruntime.Runtime, js *jobsetv1alpha2.JobSet) (bool, error) {
	pg := gang.PodGroupObject(rt.Spec.PodGroupPolicy)
	if pg == nil {
		return false, nil
	}
	digest, _, err := podGroupCopy(tj, rt, js)
	if err != nil {
		return true, err
	}
	switch err := r.client.Get(ctx, client.ObjectKeyFromObject(tj), pg); {
	case err == nil && ours(pg, tj) && gang.Built(pg, tj, rt.Spec.MLPolicy, digest):
		return false, nil
	case err == nil, apierrors.IsNotFound(err):
		// A build that failed is the TrainJob's own build's to say (gangCannotBuild).
		if report, ok := r.gangReports.get(tj); ok && report.reason != trainer.TrainJobJobsBuildFailedReason {
			setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, report.reason, report.message)
		}
		ctrl.LoggerFrom(ctx).V(2).Info("Waiting for the PodGroup")
		return true, nil
	case apimeta.IsNoMatchError(err):
		gvk, _ := apiutil.GVKForObject(pg, r.client.Scheme())
		setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsCreationFailedReason,
			fmt.Sprintf("%s gang-schedules with %s PodGroups, but the cluster does not serve them (their CRD is not installed, or, for Kubernetes' own, its GenericWorkload feature gate and scheduling.k8s.io/v1alpha2 API are off); serve them and restart the operator",
				rt, gvk.GroupVersion()))
		return true, nil
	default:
		return true, err
	}
}

// gangCannotBuild reports whether the gang controller could not build the TrainJob's PodGroup
// because the TrainJob cannot be built: its JobSet is then built too, for the build's own error,
// and so from the copy of the runtime this controller holds.
func (r *TrainJobReconciler) gangCannotBuild(tj *trainer.TrainJob) bool {
	report, ok := r.gangReports.get(tj)
	return ok && report.reason == trainer.TrainJobJobsBuildFailedReason
}

// errJobSetExists is write's error when a JobSet of the TrainJob's name exists that the cache
// has not seen.
var errJobSetExists = errors.New("the JobSet exists")

// statusFieldManager writes every TrainJob's status, whichever framework controller reconciles
// it: which one does may change (its runtime is deleted, or changes framework), and each computes
// the status the same way. A status field has one writer.
const statusFieldManager = "trainer.kubeflow.org/trainjob-controller"

// managedTrainJob reads the TrainJob of a request, or returns nil when there is nothing to do for
// it: it is gone or going (a foreground deletion keeps it until its JobSet is gone: never create
// one again then), or someone else manages it. A finished one is returned: the caller decides.
func managedTrainJob(ctx context.Context, c client.Client, req ctrl.Request) (*trainer.TrainJob, error) {
	tj := &trainer.TrainJob{}
	if err := c.Get(ctx, req.NamespacedName, tj); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if !tj.DeletionTimestamp.IsZero() || !tj.ManagedByOperator() {
		return nil, nil
	}
	return tj, nil
}

// fieldManager is the server-side apply field manager of a framework's controller.
func fieldManager(fw framework.Framework) string {
	return "trainer.kubeflow.org/" + fw.Name()
}
