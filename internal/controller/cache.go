package controller

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// podGroupKinds are the PodGroups the gang controller writes. Their CRDs may be missing.
func podGroupKinds() []client.Object {
	return []client.Object{&schedulerpluginsv1alpha1.PodGroup{}, &volcanov1beta1.PodGroup{}}
}

// CacheOptions keep the manager's cache to what the controllers read, so that its memory grows
// little with each TrainJob: no object's managed fields; of a JobSet, its metadata, spec.suspend
// and status, not its Jobs' templates; of a TrainJob, not kubectl's copy of it in an annotation;
// of PodGroups and Jobs, kinds that may exist in large numbers in a cluster, only those the
// operator created, by their trainer.kubeflow.org/trainjob-name label, and of Jobs only a few
// counts. ConfigMaps (MPI hostfiles) are only written, never read, so they are not cached at all.
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
	byObject := map[client.Object]cache.ByObject{
		&jobsetv1alpha2.JobSet{}: {Transform: keepJobSetSummary},
		&trainer.TrainJob{}:      {Transform: dropLastApplied},
		&batchv1.Job{}:           {Label: ours, Transform: keepJobCounts},
	}
	for _, pg := range podGroups {
		byObject[pg] = cache.ByObject{Label: ours}
	}
	return cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}, nil
}

// keepJobSetSummary keeps of a JobSet what the controllers read: its metadata but managed fields,
// spec.suspend and status. Its Jobs' templates, most of its size, are only ever written; the
// training's size is in an annotation (framework.TrainingPodsAnnotation).
func keepJobSetSummary(obj any) (any, error) {
	if js, ok := obj.(*jobsetv1alpha2.JobSet); ok {
		js.ManagedFields = nil
		js.Spec = jobsetv1alpha2.JobSetSpec{Suspend: js.Spec.Suspend}
	}
	return obj, nil
}

// dropLastApplied drops a TrainJob's managed fields and the copy of it that `kubectl apply`
// keeps in an annotation. The controllers write a TrainJob's status only, and the API server
// takes nothing but the status from such a write.
func dropLastApplied(obj any) (any, error) {
	if tj, ok := obj.(*trainer.TrainJob); ok {
		tj.ManagedFields = nil
		delete(tj.Annotations, corev1.LastAppliedConfigAnnotation)
	}
	return obj, nil
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
