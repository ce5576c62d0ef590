// Package history runs the history's recorder, as its install has it (its cache, its RBAC),
// against a real kube-apiserver, with each database it runs on: a SQLite file, and a PostgreSQL
// server the test starts. The tests write the TrainJobs' status as the operator would.
package history

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/history"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/testing/postgres"
	"github.com/trainjob/operator/test/testenv"
)

var (
	k8sClient client.Client
	cluster   *testenv.Cluster
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	var err error
	// No manager runs here to serve JobSet's webhooks: the tests make JobSets as they are.
	cluster, err = testenv.Start(testenv.WithoutJobSetWebhooks, testenv.WithAggregation)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	k8sClient = cluster.Client
	return m.Run()
}

const (
	timeout  = 30 * time.Second
	interval = 50 * time.Millisecond
)

// startRecorder runs the history's recorder against store, as the installed history with its
// RBAC, until the returned stop is called (or the test ends).
func startRecorder(t *testing.T, store *history.Store) (stop func()) {
	t.Helper()
	stopRecorder, err := cluster.StartRecorder(context.Background(), store)
	require.NoError(t, err)
	stop = func() { require.NoError(t, stopRecorder()) }
	t.Cleanup(stop)
	return stop
}

// engines opens a store in each database the history runs on, for the test.
func engines(t *testing.T) map[string]*history.Store {
	ctx := context.Background()
	sqlite, err := history.Open(ctx, filepath.Join(t.TempDir(), "history.db"))
	require.NoError(t, err)
	t.Cleanup(func() { sqlite.Close() })
	url := postgres.Start(t)
	pg, err := history.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { pg.Close() })
	return map[string]*history.Store{"sqlite": sqlite, "postgres": pg}
}

// newTrainJob makes a TrainJob as the operator's webhook admits it where the history runs: with
// its creator and the history's finalizer.
func newTrainJob(t *testing.T, name, ns string, finalizer bool) *trainer.TrainJob {
	t.Helper()
	tj := utiltesting.MakeTrainJob(name, ns).NumNodes(2).Obj()
	tj.Spec.RuntimeRef.Name = "torch-distributed"
	tj.Annotations = map[string]string{trainer.CreatorAnnotation: "alice", "kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)}
	if finalizer {
		tj.Finalizers = []string{trainer.HistoryFinalizer}
	}
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	return tj
}

// setStatus writes a TrainJob's status as the operator would.
func setStatus(t *testing.T, tj *trainer.TrainJob, change func(*trainer.TrainJobStatus)) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &trainer.TrainJob{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got))
		change(&got.Status)
		require.NoError(c, k8sClient.Status().Update(context.Background(), got))
	}, timeout, interval)
}

func finished(condition string, at time.Time) func(*trainer.TrainJobStatus) {
	return func(s *trainer.TrainJobStatus) {
		s.State = condition
		s.Conditions = append(s.Conditions, metav1.Condition{
			Type: condition, Status: metav1.ConditionTrue, Reason: condition, Message: "done", LastTransitionTime: metav1.NewTime(at),
		})
	}
}

// record waits for the record of tj for which ok holds.
func record(t *testing.T, store *history.Store, tj *trainer.TrainJob, ok func(*history.Record) bool) *history.Record {
	t.Helper()
	var got *history.Record
	require.Eventually(t, func() bool {
		r, err := store.Get(context.Background(), string(tj.UID))
		if err == nil && ok(r) {
			got = r
		}
		return got != nil
	}, timeout, interval, "the record of %s", tj.Name)
	return got
}

func gone(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	require.Eventually(t, func() bool {
		err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), &trainer.TrainJob{})
		return client.IgnoreNotFound(err) == nil && err != nil
	}, timeout, interval, "%s is not gone", tj.Name)
}

func TestHistory(t *testing.T) {
	for engine, store := range engines(t) {
		t.Run(engine, func(t *testing.T) {
			t.Run("a run is recorded from its creation to its deletion", func(t *testing.T) { aRunIsRecorded(t, store) })
			t.Run("nothing is lost while the history is down", func(t *testing.T) { nothingIsLost(t, store) })
			t.Run("a restart writes nothing", func(t *testing.T) { aRestartWritesNothing(t, store) })
		})
	}
}

func aRunIsRecorded(t *testing.T, store *history.Store) {
	ctx := context.Background()
	startRecorder(t, store)
	ns := utiltesting.NewNamespace(t, k8sClient, "history")
	tj := newTrainJob(t, "bert", ns, true)
	r := record(t, store, tj, func(r *history.Record) bool { return true })
	assert.Equal(t, "alice", r.Creator)
	assert.Equal(t, "torch-distributed", r.Runtime.Name)
	assert.EqualValues(t, 2, r.Nodes)

	// The operator makes its JobSet and it runs.
	js := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: ns},
		Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
			Name: "node", Replicas: 1,
			Template: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{trainer.AncestorStepLabel: trainer.AncestorTrainer}},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "node", Image: "pytorch:2", Resources: corev1.ResourceRequirements{
						Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")},
					}}},
				}}},
			},
		}}},
	}
	require.NoError(t, ctrl.SetControllerReference(tj, js, testenv.Scheme))
	require.NoError(t, k8sClient.Create(ctx, js))
	ran := time.Now().Add(-time.Hour).Truncate(time.Second)
	setStatus(t, tj, func(s *trainer.TrainJobStatus) {
		s.State, s.Nodes, s.ObservedGeneration = trainer.TrainJobRunning, 2, 1
		s.StartTime, s.ReadyTime = ptr.To(metav1.NewTime(ran)), ptr.To(metav1.NewTime(ran))
		s.RuntimeSnapshot = &trainer.RuntimeSnapshot{ConfigMap: "bert-runtime-snapshot", Digest: "sha256:1",
			MLPolicy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}}
	})
	r = record(t, store, tj, func(r *history.Record) bool { return r.State == trainer.TrainJobRunning })
	assert.Equal(t, "pytorch:2", r.Image, "read from its JobSet")
	assert.EqualValues(t, 4, r.GPUsPerNode)
	assert.Equal(t, "torch", r.Framework)
	assert.Equal(t, "sha256:1", r.Runtime.Digest)
	require.NotNil(t, r.RunningSince)

	setStatus(t, tj, func(s *trainer.TrainJobStatus) {
		s.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](100), LastUpdatedTime: metav1.NewTime(ran.Add(30 * time.Minute)),
			Metrics: []trainer.Metric{{Name: "loss", Value: "0.1"}}}
		finished(trainer.TrainJobComplete, ran.Add(30*time.Minute))(s)
	})
	r = record(t, store, tj, func(r *history.Record) bool { return r.State == trainer.TrainJobComplete })
	assert.InDelta(t, 1800, r.RunningSeconds, 1)
	assert.InDelta(t, 1800*2*4, r.GPUSeconds, 8)
	assert.Equal(t, []trainer.Metric{{Name: "loss", Value: "0.1"}}, r.FinalMetrics)

	require.NoError(t, k8sClient.Delete(ctx, tj))
	gone(t, tj)
	r, err := store.Get(ctx, string(tj.UID))
	require.NoError(t, err)
	assert.NotNil(t, r.Deleted, "the record says when its TrainJob was deleted")
	assert.Equal(t, trainer.TrainJobComplete, r.State)
	// Its use and its end are in the history's metrics, once.
	assert.InDelta(t, r.GPUSeconds, counter(t, "trainjob_history_gpu_seconds_total", map[string]string{"namespace": ns}), 0.001)
	assert.InDelta(t, r.NodeSeconds, counter(t, "trainjob_history_node_seconds_total", map[string]string{"namespace": ns}), 0.001)
	assert.Equal(t, 1.0, counter(t, "trainjob_history_runs_ended_total", map[string]string{"namespace": ns, "state": trainer.TrainJobComplete}))

	// A TrainJob deleted without the finalizer (made before the history) is recorded from its
	// last state.
	early := newTrainJob(t, "early", ns, false)
	record(t, store, early, func(r *history.Record) bool { return true })
	setStatus(t, early, finished(trainer.TrainJobFailed, time.Now()))
	require.NoError(t, k8sClient.Delete(ctx, early))
	record(t, store, early, func(r *history.Record) bool { return r.Deleted != nil && r.State == trainer.TrainJobFailed })
}

// The size of the outage nothingIsLost makes: small in make test-integration, the 1,000
// TrainJobs over 10 minutes in make test-history-outage.
var (
	outageTrainJobs = flag.Int("outage-trainjobs", 30, "TrainJobs that finish and are deleted while the history is down")
	outageFor       = flag.Duration("outage", time.Second, "how long the history is down")
)

func nothingIsLost(t *testing.T, store *history.Store) {
	ctx := context.Background()
	ns := utiltesting.NewNamespace(t, k8sClient, "history")
	n := *outageTrainJobs
	down := time.Now()
	var tjs []*trainer.TrainJob
	for i := range n {
		tj := newTrainJob(t, fmt.Sprint("run-", i), ns, true)
		state := []string{trainer.TrainJobComplete, trainer.TrainJobFailed}[i%2]
		setStatus(t, tj, finished(state, time.Now()))
		tjs = append(tjs, tj)
	}
	// Deleted, by a TTL or a user, while the history is down: they wait for it.
	for _, tj := range tjs {
		require.NoError(t, k8sClient.Delete(ctx, tj))
	}
	time.Sleep(max(time.Second, *outageFor-time.Since(down)))
	for _, tj := range tjs {
		got := &trainer.TrainJob{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got), "%s went before it was recorded", tj.Name)
	}
	t.Logf("%d TrainJobs finished and deleted while the history was down for %s", n, time.Since(down).Round(time.Second))
	back := time.Now()

	startRecorder(t, store)
	for i, tj := range tjs {
		gone(t, tj)
		r, err := store.Get(ctx, string(tj.UID))
		require.NoError(t, err, "the record of %s", tj.Name)
		assert.Equal(t, []string{trainer.TrainJobComplete, trainer.TrainJobFailed}[i%2], r.State)
		assert.NotNil(t, r.Finished)
		assert.NotNil(t, r.Deleted)
		assert.Equal(t, "alice", r.Creator)
	}
	t.Logf("all recorded and released %s after the history came back", time.Since(back).Round(time.Millisecond))
	uids := map[string]bool{}
	for q := (history.Query{Namespace: ns}); ; {
		page, err := store.List(ctx, q)
		require.NoError(t, err)
		for _, r := range page.Records {
			assert.False(t, uids[r.UID], "%s is recorded twice", r.Name)
			uids[r.UID] = true
		}
		if q.Continue = page.Continue; q.Continue == "" {
			break
		}
	}
	assert.Len(t, uids, n, "one record per run")
}

func aRestartWritesNothing(t *testing.T, store *history.Store) {
	ctx := context.Background()
	ns := utiltesting.NewNamespace(t, k8sClient, "history")
	stop := startRecorder(t, store)
	var tjs []*trainer.TrainJob
	for i := range 10 {
		tj := newTrainJob(t, fmt.Sprint("live-", i), ns, true)
		setStatus(t, tj, func(s *trainer.TrainJobStatus) { s.State = trainer.TrainJobSuspended })
		tjs = append(tjs, tj)
	}
	observed := map[string]time.Time{}
	for _, tj := range tjs {
		observed[string(tj.UID)] = record(t, store, tj, func(r *history.Record) bool { return r.State == trainer.TrainJobSuspended }).Observed
	}
	// One without the finalizer (made before the history) goes while the history is away.
	unseen := newTrainJob(t, "unseen", ns, false)
	record(t, store, unseen, func(r *history.Record) bool { return true })
	stop()
	require.NoError(t, k8sClient.Delete(ctx, unseen))
	gone(t, unseen)
	back := time.Now()
	startRecorder(t, store)
	// Its run ends when the history is back, deleted as far as it can tell.
	r := record(t, store, unseen, func(r *history.Record) bool { return r.Deleted != nil })
	assert.False(t, r.Deleted.Before(back.Truncate(time.Millisecond)), "deleted at %s, before the history came back at %s", r.Deleted, back)
	// A TrainJob made after the restart is recorded once the recorder went through the others.
	marker := newTrainJob(t, "marker", ns, true)
	record(t, store, marker, func(r *history.Record) bool { return true })
	time.Sleep(time.Second)
	for _, tj := range tjs {
		r, err := store.Get(ctx, string(tj.UID))
		require.NoError(t, err)
		assert.True(t, observed[r.UID].Equal(r.Observed), "%s was written again after the restart", tj.Name)
	}
	// Cleanup: release them, as a user deleting them would.
	for _, tj := range append(tjs, marker) {
		require.NoError(t, k8sClient.Delete(ctx, tj))
		gone(t, tj)
	}
}

// counter is the value of a counter of the history's metrics with these labels, 0 if none.
func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
