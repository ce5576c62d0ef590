package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// +kubebuilder:webhook:path=/validate-trainer-kubeflow-org-v1alpha1-trainjob-scale,mutating=false,failurePolicy=fail,sideEffects=None,groups=trainer.kubeflow.org,resources=trainjobs/scale,verbs=update,versions=v1alpha1,name=vtrainjobscale.trainer.kubeflow.org,admissionReviewVersions=v1

// scalePath is where the API server sends the updates of TrainJobs' scale subresource.
const scalePath = "/validate-trainer-kubeflow-org-v1alpha1-trainjob-scale"

// scaleWebhook validates a change of a TrainJob's size through its scale subresource (kubectl
// scale, a HorizontalPodAutoscaler). The API server sends those to webhooks of trainjobs/scale
// only, as autoscaling/v1 Scale objects: the TrainJob and its runtime are read here, and the
// change is checked as the same change of spec.trainer.numNodes would be.
type scaleWebhook struct {
	trainJobs *trainJobWebhook
}

func setupScaleWebhook(mgr ctrl.Manager, trainJobs *trainJobWebhook) {
	mgr.GetWebhookServer().Register(scalePath, &admission.Webhook{Handler: scaleWebhook{trainJobs: trainJobs}})
}

// Handle allows or refuses one change of a TrainJob's scale.
func (w scaleWebhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	scale := &autoscalingv1.Scale{}
	if err := json.Unmarshal(req.Object.Raw, scale); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := w.validate(ctx, types.NamespacedName{Namespace: req.Namespace, Name: req.Name}, scale.Spec.Replicas); err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			result := status.Status()
			return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &result}}
		}
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Allowed("")
}

// validate checks that the TrainJob may run replicas nodes from now on: that it is elastic, or
// suspended, and that it may change numNodes to that (trainJobWebhook.ValidateUpdate).
func (w scaleWebhook) validate(ctx context.Context, key types.NamespacedName, replicas int32) error {
	old := &trainer.TrainJob{}
	if err := w.trainJobs.runtimes.reader.Get(ctx, key, old); err != nil {
		return err
	}
	if !old.ManagedByOperator() || nodes(old) == replicas {
		return nil
	}
	rt, err := w.trainJobs.runtimes.forTrainJob(ctx, old)
	switch {
	case errors.Is(err, trainingruntime.ErrNotFound):
		return invalid(trainer.TrainJobKind, key.Name, field.Forbidden(framework.TrainerPath.Child("numNodes"), "its runtime cannot be found, so its size cannot be checked"))
	case err != nil:
		return apierrors.NewInternalError(err)
	case framework.ElasticPolicy(rt.Spec.MLPolicy) == nil && running(old):
		return invalid(trainer.TrainJobKind, key.Name, field.Forbidden(framework.TrainerPath.Child("numNodes"), fmt.Sprintf(
			"the TrainJob is not elastic (%s has no mlPolicy.torch.elasticPolicy), so its size is fixed while it runs: suspend it first", rt)))
	}
	tj := old.DeepCopy()
	if tj.Spec.Trainer == nil {
		tj.Spec.Trainer = &trainer.Trainer{}
	}
	tj.Spec.Trainer.NumNodes = ptr.To(replicas)
	_, err = w.trainJobs.ValidateUpdate(ctx, old, tj)
	return err
}
