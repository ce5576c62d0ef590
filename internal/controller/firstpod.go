package controller

import (
	"context"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch

// firstPods observes, once for each TrainJob, the time from its creation to the first of its pods
// running: the first time one of its Jobs counts a ready pod, or a succeeded one (a pod that ran
// to its end before it could be seen ready). The build labels the Jobs with their TrainJob's name,
// and the cache keeps of them little more (keepJobCounts). Jobs' counts change a few times per
// pod, far less often than pods do: the operator does not watch pods.
type firstPods struct {
	reader     client.Reader
	frameworks []framework.Framework
	// leading tells whether the manager leads: only the leader counts.
	leading func() bool

	mu sync.Mutex
	// seen holds the TrainJobs whose first pod ran, until they are deleted.
	seen map[types.NamespacedName]bool
}

// watchFirstPods follows the Jobs of every TrainJob. The Jobs a starting manager lists that
// already ran are not counted: their TrainJobs' first pods ran before it started. A replica that
// does not lead keeps track all the same, so that it counts right once it leads.
func watchFirstPods(jobs, trainJobs cache.Informer, reader client.Reader, frameworks []framework.Framework, leading func() bool) error {
	f := &firstPods{reader: reader, frameworks: frameworks, leading: leading, seen: map[types.NamespacedName]bool{}}
	if _, err := jobs.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, listed bool) {
			if job, ok := obj.(*batchv1.Job); ok && ran(job) {
				f.observe(job, listed)
			}
		},
		UpdateFunc: func(_, obj any) {
			if job, ok := obj.(*batchv1.Job); ok && ran(job) {
				f.observe(job, false)
			}
		},
	}); err != nil {
		return err
	}
	_, err := trainJobs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = gone.Obj
		}
		if tj, ok := obj.(*trainer.TrainJob); ok {
			f.forget(client.ObjectKeyFromObject(tj))
		}
	}})
	return err
}

// ran tells whether a pod of the Job runs or ran.
func ran(job *batchv1.Job) bool {
	return ptr.Deref(job.Status.Ready, 0) > 0 || job.Status.Succeeded > 0
}

// observe counts the time to the first running pod of the Job's TrainJob, unless one of its pods
// ran before, or the Job's first pod ran before the manager started (listed), or the manager
// does not lead.
func (f *firstPods) observe(job *batchv1.Job, listed bool) {
	key := types.NamespacedName{Namespace: job.Namespace, Name: job.Labels[trainer.TrainJobNameLabel]}
	f.mu.Lock()
	seen := f.seen[key]
	f.seen[key] = true
	f.mu.Unlock()
	if seen || listed || !f.leading() {
		return
	}
	ctx := context.Background()
	tj := &trainer.TrainJob{}
	if err := f.reader.Get(ctx, key, tj); err != nil {
		f.forget(key) // Deleted already: nothing to count, nor to remember.
		return
	}
	if job.CreationTimestamp.Before(&tj.CreationTimestamp) {
		return // A Job of a TrainJob of the same name, deleted since.
	}
	timeToFirstPod.WithLabelValues(frameworkName(ctx, f.reader, f.frameworks, tj)).Observe(time.Since(tj.CreationTimestamp.Time).Seconds())
}

func (f *firstPods) forget(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.seen, key)
}

// keepJobCounts keeps of a Job what firstPods, podFailures and a stall's restart read: its name, UID, creation
// time, controller, TrainJob name and avoid-nodes labels and counts of active, ready, succeeded,
// failed and terminating pods. The rest of it, its pod template above all, is never read.
func keepJobCounts(obj any) (any, error) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return obj, nil
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:              job.Name,
			Namespace:         intern(job.Namespace),
			UID:               job.UID,
			ResourceVersion:   job.ResourceVersion,
			CreationTimestamp: job.CreationTimestamp,
			Labels:            keepLabels(job.Labels, trainer.TrainJobNameLabel, trainer.AvoidNodesLabel),
			OwnerReferences:   controllerOf(job),
		},
		Status: batchv1.JobStatus{Active: job.Status.Active, Ready: job.Status.Ready, Succeeded: job.Status.Succeeded,
			Failed: job.Status.Failed, Terminating: job.Status.Terminating},
	}, nil
}

// keepLabels is the labels of keys that labels has.
func keepLabels(labels map[string]string, keys ...string) map[string]string {
	kept := map[string]string{}
	for _, k := range keys {
		if v, ok := labels[k]; ok {
			kept[k] = v
		}
	}
	return kept
}

// controllerOf is the object's controller reference alone, if it has one.
func controllerOf(obj metav1.Object) []metav1.OwnerReference {
	if ref := metav1.GetControllerOf(obj); ref != nil {
		return []metav1.OwnerReference{*ref}
	}
	return nil
}
