package controller

import (
	"context"
	"unique"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// podGroupKinds are the PodGroups the gang controller writes. Their CRDs may be missing, and
// Kubernetes' own (scheduling.k8s.io/v1alpha2) is served only with its alpha API on.
func podGroupKinds() []client.Object {
	return []client.Object{&schedulerpluginsv1alpha1.PodGroup{}, &volcanov1beta1.PodGroup{}, &schedulingv1alpha2.PodGroup{}}
}

// CacheOptions keep the manager's cache to what the controllers read, so that its memory grows
// little with each TrainJob: no object's managed fields; of a JobSet, its metadata but labels,
// spec.suspend and status, not its Jobs' templates; of a TrainJob, not kubectl's copy of it in an
// annotation, and, once it is finished or while it stays suspended as built, not what only
// builds its children; of a PodGroup, not its labels nor its minimum resources; strings that many objects
// repeat, held once; of PodGroups and Jobs, kinds that may exist in large numbers in a cluster,
// only those the operator created, by their trainer.kubeflow.org/trainjob-name label (and so of
// HorizontalPodAutoscalers), and of Jobs
// only a few counts; runtimes are read in place, not copied. ConfigMaps (MPI hostfiles) are only
// written, never read, so they are not cached at all.
// The cache cannot be configured for a kind the cluster does not serve, so it asks which PodGroup
// CRDs are installed.
func CacheOptions(cfg *rest.Config, scheme *runtime.Scheme) (cache.Options, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return cache.Options{}, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return cache.Options{}, err
	}
	podGroups, err := installedPodGroupKinds(mapper, scheme)
	if err != nil {
		return cache.Options{}, err
	}
	ours := labels.NewSelector()
	if req, err := labels.NewRequirement(trainer.TrainJobNameLabel, selection.Exists, nil); err == nil {
		ours = ours.Add(*req)
	}
	// Runtimes are read, never written, by every controller's filter on each event: the cache
	// hands out its own, which the build pipeline copies before it changes anything.
	shared := ptr.To(true)
	byObject := map[client.Object]cache.ByObject{
		&jobsetv1alpha2.JobSet{}:                 {Transform: keepJobSetSummary},
		&trainer.TrainJob{}:                      {Transform: keepTrainJob},
		&batchv1.Job{}:                           {Label: ours, Transform: keepJobCounts},
		&autoscalingv2.HorizontalPodAutoscaler{}: {Label: ours},
		&policyv1.PodDisruptionBudget{}:          {Label: ours},
		&trainer.ClusterTrainingRuntime{}:        {UnsafeDisableDeepCopy: shared},
		&trainer.TrainingRuntime{}:               {UnsafeDisableDeepCopy: shared},
	}
	for _, pg := range podGroups {
		byObject[pg] = cache.ByObject{Label: ours, Transform: keepPodGroupSummary}
	}
	return cache.Options{ByObject: byObject, DefaultTransform: shareMetadata}, nil
}

// keepJobSetSummary keeps of a JobSet what the controllers read: its metadata but managed fields
// and labels, spec.suspend and status. Its Jobs' templates, most of its size, are only ever
// written; the training's size is in an annotation (framework.TrainingPodsAnnotation).
func keepJobSetSummary(obj any) (any, error) {
	if js, ok := obj.(*jobsetv1alpha2.JobSet); ok {
		js.Spec = jobsetv1alpha2.JobSetSpec{Suspend: js.Spec.Suspend}
		shareConditions(js.Status.Conditions)
		for i := range js.Status.ReplicatedJobsStatus {
			js.Status.ReplicatedJobsStatus[i].Name = intern(js.Status.ReplicatedJobsStatus[i].Name)
		}
		js.Status.TerminalState = intern(js.Status.TerminalState)
	}
	return shareChildMetadata(obj)
}

// keepPodGroupSummary keeps of a PodGroup what the controllers read: its metadata but managed
// fields and labels (the spec hash it was built from), its minimum of members and its status;
// not the resources it tells the scheduler the gang needs, a map of quantities, only ever written.
func keepPodGroupSummary(obj any) (any, error) {
	switch pg := obj.(type) {
	case *schedulerpluginsv1alpha1.PodGroup:
		pg.Spec.MinResources = nil
	case *volcanov1beta1.PodGroup:
		pg.Spec.MinResources = nil
	}
	return shareChildMetadata(obj)
}

// keepTrainJob keeps all of a TrainJob but its managed fields and the copy of it that `kubectl
// apply` keeps in an annotation, and shares its common strings; of a finished one, and of a
// suspended one whose JobSet is built from its spec, not what only builds its children
// (framework.ForgetBuild, framework.Summarize). The controllers write a TrainJob's status only, and the API
// server takes nothing but the status from such a write.
func keepTrainJob(obj any) (any, error) {
	if tj, ok := obj.(*trainer.TrainJob); ok {
		delete(tj.Annotations, corev1.LastAppliedConfigAnnotation)
		ref := &tj.Spec.RuntimeRef
		ref.Name, ref.APIGroup, ref.Kind = intern(ref.Name), internPtr(ref.APIGroup), internPtr(ref.Kind)
		tj.Spec.ManagedBy = internPtr(tj.Spec.ManagedBy)
		shareConditions(tj.Status.Conditions)
		for i := range tj.Status.JobsStatus {
			tj.Status.JobsStatus[i].Name = intern(tj.Status.JobsStatus[i].Name)
		}
		if snap := tj.Status.RuntimeSnapshot; snap != nil {
			snap.Digest = intern(snap.Digest) // One per version of a runtime.
		}
		framework.Unsummarized(tj)
		switch {
		case tj.Finished():
			// Final: never built again.
			framework.ForgetBuild(&tj.Spec)
		case ptr.Deref(tj.Spec.Suspend, false) && jobSetMade(tj) && observedGeneration(tj) == tj.Generation:
			// Suspended, its JobSet built from this very spec: built again only once it changes
			// (a new generation, whole), or in the rare case that its JobSet or PodGroup is gone
			// or not as built, from the whole TrainJob read then (framework.Whole). A cluster's
			// queued TrainJobs (Kueue's) are held so.
			framework.Summarize(tj)
		}
	}
	return shareMetadata(obj)
}

// readWhole gives a TrainJob that the cache keeps summarized (framework.Summarize) its whole
// spec, read from the API server, before it is built. whole is false when the API server has a
// newer generation or another TrainJob of the name, whose event queues it again, or none.
func readWhole(ctx context.Context, reader client.Reader, tj *trainer.TrainJob) (whole bool, _ error) {
	if !framework.Summarized(tj) {
		return true, nil
	}
	live := &trainer.TrainJob{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(tj), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return framework.Whole(tj, live), nil
}

// shareMetadata drops an object's managed fields and makes it share, with every other cached
// object, the strings that many of them hold: its namespace, its label and annotation keys, its
// owners' kinds. The default transform of the cache.
func shareMetadata(in any) (any, error) {
	obj, ok := in.(metav1.Object)
	if !ok {
		return in, nil
	}
	if obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	obj.SetNamespace(intern(obj.GetNamespace()))
	obj.SetLabels(shareKeys(obj.GetLabels()))
	obj.SetAnnotations(shareKeys(obj.GetAnnotations()))
	refs := obj.GetOwnerReferences()
	for i := range refs {
		refs[i].APIVersion, refs[i].Kind = intern(refs[i].APIVersion), intern(refs[i].Kind)
	}
	return in, nil
}

// shareChildMetadata is shareMetadata for the children the operator writes, JobSets and
// PodGroups, without their labels: the controllers find a child by its name and owner and read
// its annotations, never its labels, and even one label costs a map (over 300 bytes).
func shareChildMetadata(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetLabels(nil)
	}
	return shareMetadata(obj)
}

// shareConditions makes conditions share their types, statuses and reasons; their messages name
// objects, and are kept as they are.
func shareConditions(conditions []metav1.Condition) {
	for i := range conditions {
		c := &conditions[i]
		c.Type, c.Status, c.Reason = intern(c.Type), metav1.ConditionStatus(intern(string(c.Status))), intern(c.Reason)
	}
}

// repeatedValues are the annotations the operator writes whose values few TrainJobs differ in:
// the digest of a runtime's copy (one per version of a runtime), the trainer's Job and the
// training's shape.
var repeatedValues = map[string]bool{
	trainingruntime.DigestAnnotation: true,
	framework.TrainerJobAnnotation:   true,
	framework.TrainingPodsAnnotation: true,
}

// shareKeys returns a map whose keys are shared with every other cached object's, and so are
// the values of repeatedValues.
func shareKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	shared := make(map[string]string, len(m))
	for k, v := range m {
		if repeatedValues[k] {
			v = intern(v)
		}
		shared[intern(k)] = v
	}
	return shared
}

// intern returns the copy of a string that the cached objects share. A decoded object holds its
// own copy of each string; 10,000 TrainJobs would hold 10,000 copies of their namespace. Only
// strings that few values take are interned, not names, UIDs or messages.
func intern(s string) string {
	return unique.Make(s).Value()
}

func internPtr(s *string) *string {
	if s != nil {
		*s = intern(*s)
	}
	return s
}

// installedPodGroupKinds returns the PodGroup kinds whose CRDs the cluster serves. Without them
// the manager still runs; TrainJobs that need a missing kind are told so in their status. A CRD
// installed later is picked up when the manager restarts. Discovery that fails is tried again.
func installedPodGroupKinds(mapper apimeta.RESTMapper, scheme *runtime.Scheme) ([]client.Object, error) {
	var installed []client.Object
	for _, pg := range podGroupKinds() {
		gvk, err := apiutil.GVKForObject(pg, scheme)
		if err != nil {
			return nil, err
		}
		served := false
		err = RetryStartup(ctrl.Log.WithName("setup"), "discovering "+gvk.GroupKind().String(), func() error {
			_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			served = err == nil
			if apimeta.IsNoMatchError(err) {
				return nil
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if served {
			installed = append(installed, pg)
		}
	}
	return installed, nil
}
