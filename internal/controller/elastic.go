package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;update;delete

// trainerSize is the trainer job of a TrainJob's JobSet and its number of pods, as the JobSet's
// annotations record them (the cache keeps no Job templates); ok is false for a JobSet without
// them.
func trainerSize(js *jobsetv1alpha2.JobSet) (name string, nodes int32, ok bool) {
	name = js.Annotations[framework.TrainerJobAnnotation]
	if name == "" {
		return "", 0, false
	}
	for part := range strings.SplitSeq(js.Annotations[framework.TrainingPodsAnnotation], ",") {
		job, size, _ := strings.Cut(part, "=")
		var replicas, perJob int32
		if job == name {
			if _, err := fmt.Sscanf(size, "%dx%d", &replicas, &perJob); err == nil {
				return name, replicas * perJob, true
			}
		}
	}
	return "", 0, false
}

// setScaleStatus sets status.nodes and status.selector from the JobSet: what the scale
// subresource reads.
func setScaleStatus(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) {
	name, nodes, ok := trainerSize(js)
	if !ok {
		return
	}
	tj.Status.Nodes = nodes
	tj.Status.Selector = labels.SelectorFromSet(labels.Set{
		jobsetv1alpha2.JobSetNameKey:        tj.Name,
		jobsetv1alpha2.ReplicatedJobNameKey: name,
	}).String()
}

// desiredNodes is the size an elastic TrainJob asks for: spec.trainer.numNodes, else maxNodes.
func desiredNodes(tj *trainer.TrainJob, elastic *trainer.TorchElasticPolicy) int32 {
	if t := tj.Spec.Trainer; t != nil && t.NumNodes != nil {
		return *t.NumNodes
	}
	_, maxNodes := framework.ElasticBounds(elastic)
	return maxNodes
}

// resize grows or shrinks the trainer job of an elastic TrainJob's JobSet to the size the
// TrainJob asks for, in place: JobSet (with its ElasticJobSet feature gate on) lets a running
// JobSet change only its Indexed Jobs' parallelism and completions, together, and hands them to
// the Job, whose controller adds the missing indexes or removes the highest ones; no other pod is
// touched. The JobSet's record of its size changes in the same write. It returns the JobSet as
// written, or js when nothing was written. A JobSet that refuses (its gate off) is told in a
// Warning event, and tried again on the TrainJob's next change.
func (r *TrainJobReconciler) resize(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) (*jobsetv1alpha2.JobSet, error) {
	elastic := framework.Elastic(tj)
	name, nodes, ok := trainerSize(js)
	want := int32(0)
	if elastic != nil {
		want = desiredNodes(tj, elastic)
	}
	if !ok || want == 0 || want == nodes {
		return js, nil
	}
	live := &jobsetv1alpha2.JobSet{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(js), live); err != nil {
		return nil, fmt.Errorf("reading JobSet %s: %w", klog.KObj(js), err)
	}
	i := slices.IndexFunc(live.Spec.ReplicatedJobs, func(j jobsetv1alpha2.ReplicatedJob) bool { return j.Name == name })
	if !ours(live, tj) || i < 0 || live.Status.TerminalState != "" {
		return js, nil // Changed hands, or finished: the TrainJob's next reconcile says so.
	}
	live.Spec.ReplicatedJobs[i].Template.Spec.Parallelism = ptr.To(want)
	live.Spec.ReplicatedJobs[i].Template.Spec.Completions = ptr.To(want)
	size := framework.TrainingPods(live)
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	job := fmt.Sprintf("/spec/replicatedJobs/%d", i)
	patch, err := json.Marshal([]op{
		{"test", "/metadata/uid", live.UID},
		{"test", job + "/name", name},
		{"replace", job + "/template/spec/parallelism", want},
		{"replace", job + "/template/spec/completions", want},
		{"add", "/metadata/annotations/" + strings.ReplaceAll(framework.TrainingPodsAnnotation, "/", "~1"), size},
	})
	if err != nil {
		return nil, err
	}
	err = r.client.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(fieldManager(r.framework)))
	switch {
	case permanent(err):
		r.recorder.Eventf(tj, js, corev1.EventTypeWarning, trainer.TrainJobResizeFailedReason, "Resize",
			"JobSet %s refused to go from %d to %d nodes: %v. A running JobSet changes size only when the JobSet controller runs with its ElasticJobSet feature gate on (featureGates in its configuration file)",
			js.Name, nodes, want, err)
		return js, nil
	case err != nil:
		return nil, fmt.Errorf("resizing JobSet %s: %w", klog.KObj(js), err)
	}
	ctrl.LoggerFrom(ctx).Info("Resized the trainer job", "jobSet", klog.KObj(js), "from", nodes, "to", want)
	r.recorder.Eventf(tj, js, corev1.EventTypeNormal, trainer.TrainJobResizedReason, "Resize",
		"Trainer job %q goes from %d to %d nodes", name, nodes, want)
	written := js.DeepCopy()
	written.Annotations[framework.TrainingPodsAnnotation] = size
	return written, nil
}

// autoscale gives an elastic TrainJob whose runtime names autoscaling metrics a
// HorizontalPodAutoscaler of its name while it runs, which scales it through its scale
// subresource between minNodes and maxNodes, and deletes it once the TrainJob is suspended or
// finished (garbage collection deletes it with the TrainJob). A TrainJob that Kueue admitted gets
// none: Kueue stops a TrainJob whose size changes (the webhook refuses such a resize). The
// operator keeps the autoscaler's target, bounds and metrics; its behavior is the user's to
// tune. An autoscaler of the name that is not the TrainJob's is never touched: a Warning event
// says so.
func (r *TrainJobReconciler) autoscale(ctx context.Context, tj *trainer.TrainJob) error {
	elastic := framework.Elastic(tj)
	_, queued := tj.Labels[trainer.KueueQueueLabel]
	want := elastic != nil && len(elastic.Metrics) > 0 && tj.Status.Selector != "" &&
		!ptr.Deref(tj.Spec.Suspend, false) && !finished(tj) && !queued
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(tj), hpa) // The cache holds the operator's only.
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return err
	case err == nil && !metav1.IsControlledBy(hpa, tj):
		if want {
			r.tellNotOurs(tj, hpa)
		}
		return nil
	case err == nil && !want:
		err := r.client.Delete(ctx, hpa, client.Preconditions{UID: &hpa.UID})
		return client.IgnoreNotFound(err)
	case !want:
		return nil
	}
	minNodes, maxNodes := framework.ElasticBounds(elastic)
	spec := autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{
			APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: tj.Name,
		},
		MinReplicas: ptr.To(minNodes),
		MaxReplicas: maxNodes,
		Metrics:     elastic.Metrics,
	}
	if apierrors.IsNotFound(err) {
		hpa = &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{
				Name: tj.Name, Namespace: tj.Namespace,
				Labels:          map[string]string{trainer.TrainJobNameLabel: tj.Name},
				OwnerReferences: []metav1.OwnerReference{framework.OwnerReference(tj)},
			},
			Spec: spec,
		}
		err := r.client.Create(ctx, hpa, client.FieldOwner(fieldManager(r.framework)))
		if apierrors.IsAlreadyExists(err) {
			// Someone else's, outside the cache.
			r.tellNotOurs(tj, hpa)
			return nil
		}
		return err
	}
	if hpa.DeletionTimestamp != nil {
		return nil // Its deletion queues the TrainJob again.
	}
	spec.Behavior = hpa.Spec.Behavior
	if apiequality.Semantic.DeepEqual(hpa.Spec, spec) {
		return nil
	}
	hpa = hpa.DeepCopy()
	hpa.Spec = spec
	err = r.client.Update(ctx, hpa, client.FieldOwner(fieldManager(r.framework)))
	if apierrors.IsConflict(err) {
		return nil // Changed meanwhile: its change queues the TrainJob again.
	}
	return err
}

// tellNotOurs says that the TrainJob gets no autoscaler: one of its name is someone else's.
func (r *TrainJobReconciler) tellNotOurs(tj *trainer.TrainJob, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	r.recorder.Eventf(tj, nil, corev1.EventTypeWarning, trainer.TrainJobObjectNotOwnedReason, "Autoscale",
		"%v; the TrainJob is not autoscaled", error(&notOursError{kind: "HorizontalPodAutoscaler", name: hpa.Name}))
}
