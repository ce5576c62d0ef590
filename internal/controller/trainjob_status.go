package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/podfailure"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// Writing a TrainJob's status, and what is told once it is written.

// told emits the events and counts the metrics of a status written over before; reason and all
// are what settle returned.
func (r *TrainJobReconciler) told(ctx context.Context, tj *trainer.TrainJob, before *trainer.TrainJobStatus, reason string, all []metav1.Condition) {
	recordTransitions(r.recorder, tj, before.Conditions)
	if r.conditions == UpstreamConditions {
		tellState(r.recorder, tj, statusState(before), all)
		tellStallOver(r.recorder, tj, before.Conditions, all)
	}
	recordMetrics(r.framework, tj, before, reason)
	if n := tj.Status.Restarts - before.Restarts; n > 0 {
		note := fmt.Sprintf("JobSet restarted all of the TrainJob's pods after a failure: this is attempt %d", tj.Status.Restarts)
		if f := tj.Status.Failure; f != nil && f.Attempt == tj.Status.Restarts-1 {
			note += ". Attempt " + strconv.Itoa(int(f.Attempt)) + " failed first at " + podfailure.SummaryWithin(f, maxEventNote-len(note)-40)
		}
		r.recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainer.TrainJobRestartedReason, "Restart", "%s", note)
		restarts.WithLabelValues(r.framework.Name(), restartCauseFailure).Add(float64(n))
	}
	recordStallMetrics(r.framework, tj, before, func() trainer.StallAction {
		rt, err := trainingruntime.ForTrainJob(ctx, r.client, tj)
		if err != nil {
			rt = nil
		}
		d, _ := progressDeadlineOf(tj, rt, r.minStallWindow)
		return d.action
	})
}

// commit writes the TrainJob's status as it is now, ahead of a step that must not happen before
// the status says so, and tells the transitions; before becomes the status written. A conflict
// asks for the TrainJob to be reconciled again, the step not taken.
func (r *TrainJobReconciler) commit(ctx context.Context, tj *trainer.TrainJob, before *trainer.TrainJobStatus) (ctrl.Result, error) {
	reason, all := settle(tj, before, r.conditions)
	switch err := r.writeStatusAndRead(ctx, tj); {
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("writing status: %w", err)
	}
	r.told(ctx, tj, before, reason, all)
	*before = *tj.Status.DeepCopy()
	return ctrl.Result{}, nil
}

// writeStatus writes the TrainJob's status. The TrainJob the API server answers with is not
// decoded: the next reconcile reads the TrainJob from the cache, and the strings of a decoded
// answer would outlive the reconcile in the events that refer to the TrainJob, which refer to
// the cached ones instead.
func (r *TrainJobReconciler) writeStatus(ctx context.Context, tj *trainer.TrainJob) error {
	_, err := r.putStatus(ctx, tj)
	return err
}

// writeStatusAndRead writes the TrainJob's status ahead of the reconcile's own write, which it
// makes a no-op: the written TrainJob's resourceVersion is read from the answer.
func (r *TrainJobReconciler) writeStatusAndRead(ctx context.Context, tj *trainer.TrainJob) error {
	answer, err := r.putStatus(ctx, tj)
	if err != nil {
		return err
	}
	var written metav1.PartialObjectMetadata
	if err := json.Unmarshal(answer, &written); err != nil {
		return err
	}
	tj.ResourceVersion = written.ResourceVersion
	return nil
}

// putStatus sends the TrainJob's status and returns the API server's answer, undecoded.
func (r *TrainJobReconciler) putStatus(ctx context.Context, tj *trainer.TrainJob) ([]byte, error) {
	sent := *tj
	sent.TypeMeta = metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind}
	body, err := json.Marshal(&sent)
	if err != nil {
		return nil, err
	}
	return r.trainJobs.Put().Namespace(tj.Namespace).Resource("trainjobs").Name(tj.Name).SubResource("status").
		Param("fieldManager", statusFieldManager).
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body(body).
		Do(ctx).Raw()
}

// keepSnapshot writes the copy of the runtime rt the TrainJob is about to be built from in its
// ConfigMap, cm, before the JobSet that records its digest: each try at the first JobSet keeps
// the runtime as it is then, in a ConfigMap of the name that is the TrainJob's own (an earlier
// try's); anyone else's is never touched. It reports whether the build stops here, and why.
func (r *TrainJobReconciler) keepSnapshot(ctx context.Context, tj *trainer.TrainJob, rt *trainingruntime.Runtime, cm *corev1.ConfigMap, js *jobsetv1alpha2.JobSet) (stop bool, _ ctrl.Result, _ error) {
	owner := client.FieldOwner(fieldManager(r.framework))
	err := r.client.Create(ctx, cm.DeepCopy(), owner)
	if apierrors.IsAlreadyExists(err) && js == nil {
		// An earlier try's, unless a JobSet was made from it that the cache has not seen yet:
		// that copy is never overwritten. (A JobSet rebuilt while it records no copy, made
		// before snapshots or whose copy could not be recovered, takes a new one.)
		switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(tj), &metav1.PartialObjectMetadata{TypeMeta: jobSetType}); {
		case err == nil:
			result, err := r.jobSetNotSeen(ctx, tj)
			return true, result, err
		case !apierrors.IsNotFound(err):
			return true, ctrl.Result{}, err
		}
	}
	if apierrors.IsAlreadyExists(err) {
		err = claimOrCreate(ctx, r.client, tj, cm, owner)
	}
	switch {
	case isNotOurs(err):
		setNotOurs(tj, err)
		return true, ctrl.Result{RequeueAfter: notOursRetry}, nil
	case permanent(err):
		setCondition(tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsCreationFailedReason,
			fmt.Sprintf("Keeping a copy of %s in ConfigMap %q: %v", rt, cm.Name, err))
		return true, ctrl.Result{}, nil
	case err != nil:
		return true, ctrl.Result{}, fmt.Errorf("keeping a copy of %s for %s: %w", rt, klog.KObj(tj), err)
	}
	return false, ctrl.Result{}, nil
}
