package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/build"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// gangController names the gang controller and its field manager.
const gangController = "gang"

// GangReconciler writes the PodGroups of gang-scheduled TrainJobs: it is their only writer. The
// framework controllers wait for the PodGroup before they let the JobSet's pods exist.
type GangReconciler struct {
	client     client.Client
	frameworks []framework.Framework
}

// +kubebuilder:rbac:groups=scheduling.x-k8s.io,resources=podgroups,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=scheduling.volcano.sh,resources=podgroups,verbs=get;list;watch;create;patch

// Reconcile applies a TrainJob's PodGroup, sized from the JobSet the TrainJob builds. Building
// failures and missing CRDs are reported by the framework controller, in the TrainJob's status.
func (r *GangReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tj, err := activeTrainJob(ctx, r.client, req)
	if tj == nil {
		return ctrl.Result{}, err
	}
	rt, err := trainingruntime.Resolve(ctx, r.client, tj)
	if errors.Is(err, trainingruntime.ErrNotFound) {
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	pg := gang.PodGroupObject(rt.Spec.PodGroupPolicy)
	if pg == nil {
		return ctrl.Result{}, nil
	}

	// The PodGroup is built with the JobSet's rule: from the TrainJob as it is now, while its
	// JobSet is suspended or not there yet. A running gang is settled (but its PodGroup is put
	// back if someone deleted it).
	key := client.ObjectKeyFromObject(tj)
	switch err := r.client.Get(ctx, key, pg); {
	case err == nil && framework.Built(pg, tj):
		return ctrl.Result{}, nil
	case err == nil:
		js := &jobsetv1alpha2.JobSet{}
		if err := r.client.Get(ctx, key, js); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		} else if err == nil && !ptr.Deref(js.Spec.Suspend, false) {
			return ctrl.Result{}, nil
		}
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, ignoreNoMatch(err)
	}

	children, err := build.Build(tj, rt, framework.Select(r.frameworks, rt.Spec.MLPolicy))
	if err != nil {
		return ctrl.Result{}, nil
	}
	if err := r.client.Apply(ctx, children.PodGroup, client.FieldOwner("trainer.kubeflow.org/"+gangController), client.ForceOwnership); err != nil {
		return ctrl.Result{}, ignoreNoMatch(fmt.Errorf("applying the PodGroup of %s: %w", klog.KObj(tj), err))
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Applied PodGroup", "podGroup", key)
	return ctrl.Result{}, nil
}

// ownsRuntime is the gang controller's filter: runtimes whose gang policy needs a PodGroup.
func (r *GangReconciler) ownsRuntime(spec *trainer.TrainingRuntimeSpec) bool {
	return spec != nil && gang.PodGroupObject(spec.PodGroupPolicy) != nil
}

// ignoreNoMatch drops the error of a PodGroup kind whose CRD is not installed: retrying cannot
// help, and the framework controller reports it in the TrainJob's status.
func ignoreNoMatch(err error) error {
	if apimeta.IsNoMatchError(err) {
		return nil
	}
	return err
}
