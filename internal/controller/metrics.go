package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/podfailure"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// The operator's metrics, served with controller-runtime's on the manager's metrics endpoint.
// docs/metrics.md lists them with example queries.
var (
	// latencyBuckets run from 50 ms to about an hour.
	latencyBuckets = prometheus.ExponentialBuckets(0.05, 2, 17)

	transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_transitions_total",
		Help: "TrainJobs that changed state (the STATE column), by framework, the states before and after, and the reason of the new state's condition.",
	}, []string{"framework", "from", "to", "reason"})
	creationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_creation_failures_total",
		Help: "Reconciles that could not build a TrainJob's children (reason JobsBuildFailed) or write them (JobsCreationFailed), by framework and reason.",
	}, []string{"framework", "reason"})
	timeToJobSet = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trainjob_time_to_jobset_seconds",
		Help:    "Seconds from a TrainJob's creation to its JobSet's creation, by framework.",
		Buckets: latencyBuckets,
	}, []string{"framework"})
	timeToRunning = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trainjob_time_to_running_seconds",
		Help:    "Seconds from a TrainJob's creation to its first Running condition (every pod of the training ready), by framework.",
		Buckets: latencyBuckets,
	}, []string{"framework"})
	timeToFirstPod = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trainjob_time_to_first_pod_running_seconds",
		Help:    "Seconds from a TrainJob's creation to the first of its pods running (ready, or succeeded), by framework.",
		Buckets: latencyBuckets,
	}, []string{"framework"})
	gangWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "trainjob_gang_wait_seconds",
		Help:    "Seconds from a TrainJob's PodGroup's creation to its scheduler reporting the gang running, by scheduler.",
		Buckets: latencyBuckets,
	}, []string{"scheduler"})
	failuresTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_failures_total",
		Help: "TrainJobs that failed, by framework and cause: the reason of the first failed pod (OOMKilled, Error, Evicted, Preempted, NodeLost, ImagePullBackOff, Other, ...) when their JobSet failed, else the reason of their Failed condition (DeadlineExceeded, JobSetDeleted, ProgressDeadlineExceeded, ...).",
	}, []string{"framework", "reason"})
	podFailuresTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_pod_failures_total",
		Help: "Failures of TrainJobs' pods the operator reported (the first failed pod each time a Job's count of failed pods moved), by framework and reason.",
	}, []string{"framework", "reason"})
	stalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_stalls_total",
		Help: "TrainJobs that stalled (their trainer's progress did not advance for their progress deadline while their pods ran), by framework and the stall policy's action.",
	}, []string{"framework", "action"})
	restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_restarts_total",
		Help: "Restarts of all of a TrainJob's pods, by framework and cause: failure (JobSet's failurePolicy after a failed Job) or stall (the operator's, under a stall policy's Restart).",
	}, []string{"framework", "cause"})
	trainJobs = &trainJobsCollector{}
)

// Causes of restarts, the cause label of trainjob_restarts_total.
const (
	restartCauseFailure = "failure"
	restartCauseStall   = "stall"
)

func init() {
	metrics.Registry.MustRegister(transitions, creationFailures, timeToJobSet, timeToRunning, timeToFirstPod, gangWait,
		failuresTotal, podFailuresTotal, stalls, restarts, trainJobs)
}

// recordMetrics counts what a written status says happened to the TrainJob since before; reason
// is that of the condition that says its new state.
func recordMetrics(fw framework.Framework, tj *trainer.TrainJob, before *trainer.TrainJobStatus, reason string) {
	from, to := statusState(before), tj.Status.State
	if from != to {
		transitions.WithLabelValues(fw.Name(), from, to, reason).Inc()
	}
	if to == trainer.TrainJobFailed && from != to {
		failuresTotal.WithLabelValues(fw.Name(), failureCause(tj, reason)).Inc()
	}
	age := time.Since(tj.CreationTimestamp.Time).Seconds()
	if tj.Status.ObservedGeneration > 0 && before.ObservedGeneration == 0 && !apimeta.IsStatusConditionTrue(before.Conditions, trainer.TrainJobCreated) {
		timeToJobSet.WithLabelValues(fw.Name()).Observe(age)
	}
	// Under upstream's conditions no Running condition remembers an earlier run: a training whose
	// pods were ready, and are again, is observed again.
	if to == trainer.TrainJobRunning && from != to && apimeta.FindStatusCondition(before.Conditions, trainer.TrainJobRunning) == nil {
		timeToRunning.WithLabelValues(fw.Name()).Observe(age)
	}
}

// recordStallMetrics counts a stall and a restart for a stall that a written status records
// since before; action says the stall policy's action, read only when the TrainJob stalled.
func recordStallMetrics(fw framework.Framework, tj *trainer.TrainJob, before *trainer.TrainJobStatus, action func() trainer.StallAction) {
	if apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobStalled) && !apimeta.IsStatusConditionTrue(before.Conditions, trainer.TrainJobStalled) {
		stalls.WithLabelValues(fw.Name(), string(action())).Inc()
	}
	if n := tj.Status.StallRestarts - before.StallRestarts; n > 0 {
		restarts.WithLabelValues(fw.Name(), restartCauseStall).Add(float64(n))
	}
}

// recordCreationFailure counts a reconcile that left the TrainJob's children unbuilt or
// unwritten, retries included.
func recordCreationFailure(fw framework.Framework, tj *trainer.TrainJob) {
	c := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobCreated)
	if c != nil && c.Status == metav1.ConditionFalse {
		creationFailures.WithLabelValues(fw.Name(), c.Reason).Inc()
	}
}

// trainJobsCollector counts the TrainJobs in the manager's cache when the metrics are scraped:
// by framework and state, and by runtime; it ages the oldest of each state that is not finished,
// and the gangs that wait for their scheduler. Counting at scrape time cannot drift from the
// cluster.
type trainJobsCollector struct {
	mu sync.Mutex
	// trainJobs and podGroups are the cache's stores, read in place: a List would copy each
	// object on every scrape.
	trainJobs  toolscache.Store
	podGroups  []toolscache.Store
	reader     client.Reader
	frameworks []framework.Framework
	leading    func() bool
}

var (
	trainJobsDesc = prometheus.NewDesc("trainjob_trainjobs",
		"TrainJobs in the cluster, by the framework that runs them and their state (the STATE column; Pending when no condition is True).",
		[]string{"framework", "state"}, nil)
	runtimeUsageDesc = prometheus.NewDesc("trainjob_runtime_trainjobs",
		"TrainJobs in the cluster by the runtime they name (namespace is empty for a ClusterTrainingRuntime).",
		[]string{"kind", "namespace", "name"}, nil)
	oldestInStateDesc = prometheus.NewDesc("trainjob_oldest_in_state_seconds",
		"Seconds the TrainJob longest in its state has been in it, by framework, for the states that are not finished: Pending since its creation, Created since it started, Running since its pods were all ready, Suspended since it was suspended.",
		[]string{"framework", "state"}, nil)
	gangsPastTimeoutDesc = prometheus.NewDesc("trainjob_gangs_past_timeout",
		"TrainJobs' PodGroups whose scheduler has waited for the whole gang longer than its schedule timeout (coscheduling's scheduleTimeoutSeconds), by scheduler.",
		[]string{"scheduler"}, nil)
	gangOldestWaitDesc = prometheus.NewDesc("trainjob_gang_oldest_wait_seconds",
		"Seconds the longest-waiting gang of started TrainJobs has waited for its scheduler to place it, by scheduler; 0 when none waits.",
		[]string{"scheduler"}, nil)
)

// use makes the collector count the TrainJobs of a manager's cache, given its TrainJob and
// PodGroup informers, while the manager leads (every replica would count the same TrainJobs); it
// reads their runtimes from reader. A process that starts a new manager (the tests) points it at
// the new one.
func (c *trainJobsCollector) use(trainJobs cache.Informer, podGroups []cache.Informer, reader client.Reader, frameworks []framework.Framework, leading func() bool) error {
	store := func(informer cache.Informer) (toolscache.Store, error) {
		s, ok := informer.(interface{ GetStore() toolscache.Store })
		if !ok {
			return nil, fmt.Errorf("the cache's informer, a %T, has no store to count", informer)
		}
		return s.GetStore(), nil
	}
	tjs, err := store(trainJobs)
	if err != nil {
		return err
	}
	pgs := make([]toolscache.Store, len(podGroups))
	for i, informer := range podGroups {
		if pgs[i], err = store(informer); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trainJobs, c.podGroups, c.reader, c.frameworks, c.leading = tjs, pgs, reader, frameworks, leading
	return nil
}

func (c *trainJobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- trainJobsDesc
	ch <- runtimeUsageDesc
	ch <- oldestInStateDesc
	ch <- gangsPastTimeoutDesc
	ch <- gangOldestWaitDesc
}

func (c *trainJobsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	store, podGroups, reader, frameworks, leading := c.trainJobs, c.podGroups, c.reader, c.frameworks, c.leading
	c.mu.Unlock()
	if store == nil || !leading() {
		return
	}
	ctx := context.Background()
	now := time.Now()
	type runtimeKey struct{ kind, namespace, name string }
	type stateKey struct{ framework, state string }
	frameworkOf := map[runtimeKey]string{}
	byRuntime := map[runtimeKey]float64{}
	byState := map[stateKey]float64{}
	oldest := map[stateKey]time.Time{}
	// The cache's own objects, read and never changed.
	for _, obj := range store.List() {
		tj, ok := obj.(*trainer.TrainJob)
		if !ok {
			continue
		}
		kind, name := trainingruntime.Ref(tj)
		key := runtimeKey{kind: kind, name: name}
		if kind == trainer.TrainingRuntimeKind {
			key.namespace = tj.Namespace
		}
		byRuntime[key]++
		fw, ok := frameworkOf[key]
		if !ok {
			fw = frameworkName(ctx, reader, frameworks, tj)
			frameworkOf[key] = fw
		}
		s := statusState(&tj.Status)
		k := stateKey{fw, s}
		byState[k]++
		// Another controller's TrainJob (MultiKueue's) has no status from the operator: its age
		// in a state says nothing of the operator.
		if since, ok := stateSince(tj, s); ok && tj.ManagedByOperator() && (oldest[k].IsZero() || since.Before(oldest[k])) {
			oldest[k] = since
		}
	}
	for k, n := range byState {
		ch <- prometheus.MustNewConstMetric(trainJobsDesc, prometheus.GaugeValue, n, k.framework, k.state)
	}
	for k, n := range byRuntime {
		ch <- prometheus.MustNewConstMetric(runtimeUsageDesc, prometheus.GaugeValue, n, k.kind, k.namespace, k.name)
	}
	for k, since := range oldest {
		ch <- prometheus.MustNewConstMetric(oldestInStateDesc, prometheus.GaugeValue, now.Sub(since).Seconds(), k.framework, k.state)
	}
	for _, pgs := range podGroups {
		collectGangWaits(ch, pgs, store, now)
	}
}

// collectGangWaits ages the gangs of a store of PodGroups (of one kind, so of one scheduler)
// that wait for their scheduler. Each waits since its TrainJob started (its PodGroup may be made
// while the TrainJob is suspended, or queued by Kueue: then nothing waits for the scheduler), or
// since its PodGroup was made, if later.
func collectGangWaits(ch chan<- prometheus.Metric, podGroups, trainJobs toolscache.Store, now time.Time) {
	scheduler := ""
	var longest time.Duration
	pastTimeout, timed := 0.0, false
	for _, obj := range podGroups.List() {
		g := gang.StateOf(obj)
		scheduler = g.Scheduler
		timed = timed || g.Timeout > 0
		if g.Running || g.Waiting == "" {
			continue
		}
		pg := obj.(client.Object)
		since := pg.GetCreationTimestamp().Time
		if tj := ownerTrainJob(trainJobs, pg); tj != nil {
			if ptr.Deref(tj.Spec.Suspend, false) {
				continue
			}
			if started := startedAt(tj).Time; started.After(since) {
				since = started
			}
		}
		waited := now.Sub(since)
		longest = max(longest, waited)
		if g.Timeout > 0 && waited > g.Timeout {
			pastTimeout++
		}
	}
	if scheduler == "" {
		return // No PodGroup of this kind: nothing says its scheduler's name.
	}
	ch <- prometheus.MustNewConstMetric(gangOldestWaitDesc, prometheus.GaugeValue, longest.Seconds(), scheduler)
	if timed {
		ch <- prometheus.MustNewConstMetric(gangsPastTimeoutDesc, prometheus.GaugeValue, pastTimeout, scheduler)
	}
}

// ownerTrainJob is the cached TrainJob that owns a PodGroup, or nil.
func ownerTrainJob(trainJobs toolscache.Store, pg client.Object) *trainer.TrainJob {
	owner := metav1.GetControllerOf(pg)
	if owner == nil || owner.Kind != trainer.TrainJobKind {
		return nil
	}
	obj, ok, _ := trainJobs.GetByKey(pg.GetNamespace() + "/" + owner.Name)
	if tj, _ := obj.(*trainer.TrainJob); ok && tj != nil && tj.UID == owner.UID {
		return tj
	}
	return nil
}

// frameworkName names the framework controller that runs a TrainJob, for a metric's label: the
// one its runtime (its snapshot, once it has one) selects, or the plain one's when the runtime cannot be read.
func frameworkName(ctx context.Context, reader client.Reader, frameworks []framework.Framework, tj *trainer.TrainJob) string {
	var policy *trainer.MLPolicy
	if rt, err := trainingruntime.ForTrainJob(ctx, reader, tj); err == nil {
		policy = rt.Spec.MLPolicy
	}
	if f := framework.Select(frameworks, policy); f != nil {
		return f.Name()
	}
	return "none"
}

// operatorFailures are the reasons of the Failed conditions the operator decides, rather than
// JobSet: their cause is the reason itself, not a pod's failure.
var operatorFailures = map[string]bool{
	trainer.TrainJobDeadlineExceededReason:         true,
	trainer.TrainJobProgressDeadlineExceededReason: true,
	trainer.TrainJobJobSetDeletedReason:            true,
	trainer.TrainJobRuntimeNotFoundReason:          true,
}

// failureCause is the reason a Failed TrainJob is counted under in trainjob_failures_total: its
// Failed condition's reason when the operator failed it, else its first failed pod's.
func failureCause(tj *trainer.TrainJob, reason string) string {
	if operatorFailures[reason] {
		return reason
	}
	if f := tj.Status.Failure; f != nil && f.Attempt == tj.Status.Restarts {
		return podfailure.MetricReason(f.Reason)
	}
	return "Unknown"
}
