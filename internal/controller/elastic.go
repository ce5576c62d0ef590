package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
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
	for job, size := range recordedSizes(js) {
		if name != "" && job == name {
			return name, size.replicas * size.perJob, true
		}
	}
	return "", 0, false
}

// setScaleStatus sets status.nodes and status.selector from the JobSet: what the scale
// subresource reads. The nodes are the trainer job's pods, or those of the jobs the JobSet names
// as its nodes (MPI's node job, not its launcher).
func setScaleStatus(tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) {
	// A record that does not parse (someone else's) is none: the trainer job's pods, then.
	names := strings.Split(js.Annotations[framework.NodeJobsAnnotation], ",")
	if in, err := labels.NewRequirement(jobsetv1alpha2.ReplicatedJobNameKey, selection.In, names); err == nil && names[0] != "" {
		var nodes int32
		for job, size := range recordedSizes(js) {
			if slices.Contains(names, job) {
				nodes += size.replicas * size.perJob
			}
		}
		tj.Status.Nodes = nodes
		tj.Status.Selector = labels.SelectorFromSet(labels.Set{jobsetv1alpha2.JobSetNameKey: tj.Name}).Add(*in).String()
		return
	}
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

// resizeRetry is how long a refused resize waits before it is tried again.
const resizeRetry = 20 * time.Second

// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=patch

// recordSize writes an elastic TrainJob's size (status.nodes) into its spec.trainer.numNodes when
// the TrainJob has none: admission writes it, unless the TrainJob came before its runtime.
// Without it the scale subresource cannot be read, so neither kubectl nor an autoscaler can scale
// it, and Kueue counts its pods wrong. The patch holds only while the field is still absent (a
// test for null passes only then): a user's own write wins.
func (r *TrainJobReconciler) recordSize(ctx context.Context, tj *trainer.TrainJob) error {
	if framework.Elastic(tj) == nil || tj.Status.Nodes == 0 || (tj.Spec.Trainer != nil && tj.Spec.Trainer.NumNodes != nil) {
		return nil
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{{"test", "/spec/trainer", nil}, {"add", "/spec/trainer", map[string]int32{"numNodes": tj.Status.Nodes}}}
	if tj.Spec.Trainer != nil {
		ops = []op{{"test", "/spec/trainer/numNodes", nil}, {"add", "/spec/trainer/numNodes", tj.Status.Nodes}}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	err = r.client.Patch(ctx, tj.DeepCopy(), client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(fieldManager(r.framework)))
	if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) {
		return nil // Written meanwhile (the test failed), or gone: that queues it again.
	}
	return err
}

// resizeRefusal is a resize the JobSet refused: the size, and when.
type resizeRefusal struct {
	size int32
	at   time.Time
}

// resize grows or shrinks the trainer job of an elastic TrainJob's JobSet to the size the
// TrainJob asks for, in place: JobSet (with its ElasticJobSet feature gate on) lets a running
// JobSet change only its Indexed Jobs' parallelism and completions, together, and hands them to
// the Job, whose controller adds the missing indexes or removes the highest ones; no other pod is
// touched. The JobSet's record of its size (and of its trainer job, for a JobSet made before it
// was kept) changes in the same write. A size outside the bounds the TrainJob was built with
// (admission refuses one; a TrainJob changed with admission off may have one) is never written.
// It returns the JobSet as written, or js when nothing was written, and how soon to try again: a
// JobSet that refuses (its gate off) is told once in a Warning event, and tried again each
// resizeRetry, not at each of its changes.
func (r *TrainJobReconciler) resize(ctx context.Context, tj *trainer.TrainJob, js *jobsetv1alpha2.JobSet) (*jobsetv1alpha2.JobSet, time.Duration, error) {
	elastic := framework.Elastic(tj)
	if elastic == nil || js.UID == "" {
		return js, 0, nil // Not elastic, or the JobSet was just made at the TrainJob's size.
	}
	want := framework.NumNodes(tj, framework.SnapshotPolicy(tj))
	name, nodes, recorded := trainerSize(js)
	if recorded && want == nodes {
		r.refusals.delete(tj)
		return js, 0, nil
	}
	if err := framework.CheckElasticSize(tj, elastic, want, "the TrainJob's runtime"); err != nil {
		r.warnOnce(tj, trainer.TrainJobResizeFailedReason, "Resize", fmt.Sprintf("The trainer job is not resized: %v", err))
		return js, 0, nil
	}
	if last, ok := r.refusals.load(tj); ok && last.size == want {
		if wait := resizeRetry - time.Since(last.at); wait > 0 {
			return js, wait, nil
		}
	}
	live := &jobsetv1alpha2.JobSet{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(js), live); err != nil {
		return nil, 0, fmt.Errorf("reading JobSet %s: %w", klog.KObj(js), err)
	}
	if !recorded {
		name = framework.TrainerJobName(live)
	}
	i := slices.IndexFunc(live.Spec.ReplicatedJobs, func(j jobsetv1alpha2.ReplicatedJob) bool { return j.Name == name })
	if !ours(live, tj) || i < 0 || live.Status.TerminalState != "" {
		return js, 0, nil // Changed hands, or finished: the TrainJob's next reconcile says so.
	}
	nodes = ptr.Deref(live.Spec.ReplicatedJobs[i].Template.Spec.Parallelism, 1)
	live.Spec.ReplicatedJobs[i].Template.Spec.Parallelism = ptr.To(want)
	live.Spec.ReplicatedJobs[i].Template.Spec.Completions = ptr.To(want)
	size := framework.TrainingPods(live)
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	annotation := func(key string) string { return "/metadata/annotations/" + strings.ReplaceAll(key, "/", "~1") }
	job := fmt.Sprintf("/spec/replicatedJobs/%d", i)
	patch, err := json.Marshal([]op{
		{"test", "/metadata/uid", live.UID},
		{"test", job + "/name", name},
		{"replace", job + "/template/spec/parallelism", want},
		{"replace", job + "/template/spec/completions", want},
		{"add", annotation(framework.TrainingPodsAnnotation), size},
		{"add", annotation(framework.TrainerJobAnnotation), name},
	})
	if err != nil {
		return nil, 0, err
	}
	err = r.client.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(fieldManager(r.framework)))
	switch {
	case permanent(err):
		r.refusals.store(tj, resizeRefusal{size: want, at: time.Now()})
		r.warnOnce(tj, trainer.TrainJobResizeFailedReason, "Resize", fmt.Sprintf(
			"JobSet %s refused to go from %d to %d nodes: %v. A running JobSet changes size only when the JobSet controller runs with its ElasticJobSet feature gate on (featureGates in its configuration file); tried again every %s",
			js.Name, nodes, want, err, resizeRetry))
		return js, resizeRetry, nil
	case err != nil:
		return nil, 0, fmt.Errorf("resizing JobSet %s: %w", klog.KObj(js), err)
	}
	r.refusals.delete(tj)
	r.forgetWarning(tj, trainer.TrainJobResizeFailedReason)
	ctrl.LoggerFrom(ctx).Info("Resized the trainer job", "jobSet", klog.KObj(js), "from", nodes, "to", want)
	r.recorder.Eventf(tj, js, corev1.EventTypeNormal, trainer.TrainJobResizedReason, "Resize",
		"Trainer job %q goes from %d to %d nodes", name, nodes, want)
	written := js.DeepCopy()
	written.Annotations[framework.TrainingPodsAnnotation] = size
	written.Annotations[framework.TrainerJobAnnotation] = name
	return written, 0, nil
}

// warnOnce emits a Warning event about the TrainJob, unless the last one of that reason said the
// same: a state that holds across reconciles is told once, not at each.
func (r *TrainJobReconciler) warnOnce(tj *trainer.TrainJob, reason, action, message string) {
	// Changed in place: a TrainJob's reconciles run one at a time, and nothing else reads it.
	told, ok := r.warned.load(tj)
	if !ok {
		told = map[string]string{}
		r.warned.store(tj, told)
	}
	if last, ok := told[reason]; ok && last == message {
		return
	}
	told[reason] = message
	r.recorder.Eventf(tj, nil, corev1.EventTypeWarning, reason, action, "%s", message)
}

// forgetWarning lets the next Warning of that reason be told, whatever it says.
func (r *TrainJobReconciler) forgetWarning(tj *trainer.TrainJob, reason string) {
	if told, ok := r.warned.load(tj); ok {
		delete(told, reason)
	}
}

// autoscale gives an elastic TrainJob whose runtime names autoscaling metrics a
// HorizontalPodAutoscaler of its name while it runs, which scales it through its scale
// subresource between minNodes and maxNodes, and deletes it once the TrainJob is suspended or
// finished (garbage collection deletes it with the TrainJob). A TrainJob that Kueue admitted gets
// none: Kueue stops a TrainJob whose size changes (the webhook refuses such a resize). The
// operator keeps the autoscaler's target, bounds, metrics and label (which puts it in the
// operator's cache); its behavior is the user's to tune. An autoscaler of the name that is not
// the TrainJob's is never touched, and one the API server refuses (metrics it cannot take) is not
// written again until the TrainJob changes, or refusalRetryCap passed (someone's may be gone): a
// Warning event says either, once.
func (r *TrainJobReconciler) autoscale(ctx context.Context, tj *trainer.TrainJob) error {
	elastic := framework.Elastic(tj)
	if elastic == nil {
		return nil // Never had one: whether a TrainJob is elastic is fixed once it is built.
	}
	_, queued := tj.Labels[trainer.KueueQueueLabel]
	want := len(elastic.Metrics) > 0 && tj.Status.Selector != "" &&
		!ptr.Deref(tj.Spec.Suspend, false) && !tj.Finished() && !queued
	key := client.ObjectKeyFromObject(tj)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	err := r.client.Get(ctx, key, hpa) // The cache holds those with the operator's label only.
	if apierrors.IsNotFound(err) && !want {
		r.autoscalerHeld.delete(tj) // None wanted: nothing to ask for again.
		return nil
	}
	if apierrors.IsNotFound(err) {
		if r.autoscalerRetry(tj) > 0 {
			return nil // Refused, or someone else's, for this TrainJob as it is: not asked again yet.
		}
		hpa = r.autoscaler(tj, elastic, nil)
		switch err = r.client.Create(ctx, hpa, client.FieldOwner(fieldManager(r.framework))); {
		case apierrors.IsAlreadyExists(err):
			// One the cache does not hold: someone else's, or the operator's stripped of its label.
			err = r.apiReader.Get(ctx, key, hpa)
		case permanent(err):
			r.holdAutoscaler(tj)
			r.warnOnce(tj, trainer.TrainJobAutoscalerRefusedReason, "Autoscale", autoscalerRefused(err))
			return nil
		default:
			return err
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil // Gone meanwhile: its deletion queues the TrainJob again.
	case err != nil:
		return err
	case !metav1.IsControlledBy(hpa, tj):
		if want {
			// One the cache holds (a TrainJob's of this name before) queues this one when it
			// goes; someone else's does not, and is asked for again only later.
			if _, cached := hpa.Labels[trainer.TrainJobNameLabel]; !cached {
				r.holdAutoscaler(tj)
			}
			r.warnOnce(tj, trainer.TrainJobObjectNotOwnedReason, "Autoscale", fmt.Sprintf("%v; the TrainJob is not autoscaled",
				error(&notOursError{kind: "HorizontalPodAutoscaler", name: hpa.Name})))
		}
		return nil
	case hpa.DeletionTimestamp != nil:
		return nil // Its deletion queues the TrainJob again.
	case !want:
		return client.IgnoreNotFound(r.client.Delete(ctx, hpa, client.Preconditions{UID: &hpa.UID}))
	}
	wanted := r.autoscaler(tj, elastic, hpa)
	if apiequality.Semantic.DeepEqual(hpa.Spec, wanted.Spec) && hpa.Labels[trainer.TrainJobNameLabel] == tj.Name {
		r.autoscalerHeld.delete(tj)
		return nil
	}
	if r.autoscalerRetry(tj) > 0 {
		return nil
	}
	switch err := r.client.Update(ctx, wanted, client.FieldOwner(fieldManager(r.framework))); {
	case apierrors.IsConflict(err):
		return nil // Changed meanwhile: its change queues the TrainJob again.
	case permanent(err):
		r.holdAutoscaler(tj)
		r.warnOnce(tj, trainer.TrainJobAutoscalerRefusedReason, "Autoscale", autoscalerRefused(err))
		return nil
	default:
		return err
	}
}

// autoscalerRetry is how long until the TrainJob's held autoscaler is asked for again; zero when
// none is held.
func (r *TrainJobReconciler) autoscalerRetry(tj *trainer.TrainJob) time.Duration {
	if held, ok := r.autoscalerHeld.load(tj); ok && held.generation == tj.Generation {
		return max(refusalRetryCap-time.Since(held.at), 0) // Past: the reconcile asked already.
	}
	return 0
}

// holdAutoscaler remembers that the TrainJob's autoscaler was not written, refused or someone
// else's: it is asked for again once the TrainJob changes, or after refusalRetryCap.
func (r *TrainJobReconciler) holdAutoscaler(tj *trainer.TrainJob) {
	r.autoscalerHeld.store(tj, heldAutoscaler{generation: tj.Generation, at: time.Now()})
}

// heldAutoscaler is an autoscaler not written, refused or someone else's, for a TrainJob of that
// generation (its runtime's part, the snapshot, never changes), at that time.
type heldAutoscaler struct {
	generation int64
	at         time.Time
}

// autoscaler is the TrainJob's autoscaler as the operator wants it: a new one, or the one it has
// (have) with the operator's target, bounds, metrics and label, and the rest as they are.
func (r *TrainJobReconciler) autoscaler(tj *trainer.TrainJob, elastic *trainer.TorchElasticPolicy, have *autoscalingv2.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{
		Name: tj.Name, Namespace: tj.Namespace,
		OwnerReferences: []metav1.OwnerReference{framework.OwnerReference(tj)},
	}}
	if have != nil {
		hpa = have.DeepCopy()
	}
	if hpa.Labels == nil {
		hpa.Labels = map[string]string{}
	}
	hpa.Labels[trainer.TrainJobNameLabel] = tj.Name
	minNodes, maxNodes := framework.ElasticBounds(elastic)
	hpa.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{
		APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: tj.Name,
	}
	hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas, hpa.Spec.Metrics = ptr.To(minNodes), maxNodes, elastic.Metrics
	return hpa
}

// autoscalerRefused says why the TrainJob has no autoscaler: the API server refused it.
func autoscalerRefused(err error) string {
	return fmt.Sprintf("The TrainJob is not autoscaled: the API server refused its HorizontalPodAutoscaler, made from its runtime's mlPolicy.torch.elasticPolicy.metrics: %v", err)
}
