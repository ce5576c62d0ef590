package history

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// A replica whose clock is behind the one that wrote a record still records the run's end, and
// only then lets its TrainJob go.
func TestTheRecorderKeepsTheLatestWhateverTheClocks(t *testing.T) {
	ctx := context.Background()
	store, scheme := recorderFixture(t)

	tj := trainJob()
	tj.Finalizers = []string{trainer.HistoryFinalizer}
	tj.Status.State = trainer.TrainJobRunning
	ahead := Observe(nil, tj, Shape{}, at(60)) // written by a replica an hour ahead
	require.NoError(t, store.Put(ctx, []*Record{ahead}))

	finish(tj, trainer.TrainJobComplete, 5)
	tj.DeletionTimestamp = mt(6)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tj).Build()
	r := &Recorder{Client: c, Reader: c, Store: store, Now: func() time.Time { return at(7) },
		gone: map[types.NamespacedName][]*trainer.TrainJob{}}
	key := client.ObjectKeyFromObject(tj)
	_, _, err := r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	got, err := store.Get(ctx, string(tj.UID))
	require.NoError(t, err)
	require.Equal(t, trainer.TrainJobComplete, got.State, "the end was recorded")
	require.True(t, got.Observed.After(ahead.Observed))
	err = c.Get(ctx, key, &trainer.TrainJob{})
	require.True(t, client.IgnoreNotFound(err) == nil && err != nil, "released once recorded: %v", err)

	// Deleted without the finalizer (two TrainJobs of the name, one after the other): each is
	// recorded from its delete event's object, and forgotten once recorded.
	first := trainJob()
	first.UID = "first"
	second := trainJob()
	second.UID, second.CreationTimestamp = "second", metav1.NewTime(at(10))
	r.gone[key] = []*trainer.TrainJob{first}
	_, _, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	r.gone[key] = append(r.gone[key], second)
	_, _, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	for _, uid := range []string{"first", "second"} {
		rec, err := store.Get(ctx, uid)
		require.NoError(t, err, uid)
		require.NotNil(t, rec.Deleted, uid)
	}
	require.Empty(t, r.gone)
}

// A TrainJob whose record cannot be made fails alone: the others of its batch are recorded and
// released, and it stays, with its finalizer, to be tried again.
func TestOneTrainJobFailsAlone(t *testing.T) {
	ctx := context.Background()
	store, scheme := recorderFixture(t)
	var tjs []*trainer.TrainJob
	for _, name := range []string{"good", "bad"} {
		tj := trainJob()
		tj.Name, tj.UID = name, types.UID(name)
		tj.Finalizers = []string{trainer.HistoryFinalizer}
		finish(tj, trainer.TrainJobComplete, 5)
		tj.DeletionTimestamp = mt(6)
		tj.Status.ObservedGeneration = 1 // its JobSet is made: the history reads it
		tjs = append(tjs, tj)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tjs[0], tjs[1]).Build()
	// The JobSet of bad cannot be read, whatever the reason.
	reader := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).Build().(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "bad" {
				return errors.New("the API server is in a bad mood")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := &Recorder{Client: c, Reader: reader, Store: store, Now: func() time.Time { return at(7) },
		gone: map[types.NamespacedName][]*trainer.TrainJob{}}
	good, bad := client.ObjectKeyFromObject(tjs[0]), client.ObjectKeyFromObject(tjs[1])
	_, failed, err := r.record(ctx, []types.NamespacedName{bad, good})
	require.NoError(t, err, "no failure of the batch")
	require.Len(t, failed, 1)
	require.ErrorContains(t, failed[bad], "bad mood")
	_, err = store.Get(ctx, "good")
	require.NoError(t, err, "good is recorded")
	err = c.Get(ctx, good, &trainer.TrainJob{})
	require.True(t, client.IgnoreNotFound(err) == nil && err != nil, "good is released: %v", err)
	_, err = store.Get(ctx, "bad")
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, c.Get(ctx, bad, &trainer.TrainJob{}), "bad waits for its record")
}

// The record of a run that goes on is written at most every SettleEvery, the first
// SettleEvery after its creation; its end and its deletion at once.
func TestARunThatGoesOnSettlesBeforeItIsWritten(t *testing.T) {
	ctx := context.Background()
	store, scheme := recorderFixture(t)
	tj := trainJob() // created at at(0)
	tj.Status.State = trainer.TrainJobCreated
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tj).WithStatusSubresource(tj).Build()
	now := at(0).Add(3 * time.Second)
	r := &Recorder{Client: c, Reader: c, Store: store, Now: func() time.Time { return now },
		gone: map[types.NamespacedName][]*trainer.TrainJob{}}
	key := client.ObjectKeyFromObject(tj)

	later, _, err := r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, later[key], "a new run waits until it is SettleEvery old")
	_, err = store.Get(ctx, string(tj.UID))
	require.ErrorIs(t, err, ErrNotFound)

	now = at(0).Add(11 * time.Second)
	_, _, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	requireState(t, store, string(tj.UID), trainer.TrainJobCreated)

	tj.Status.State = trainer.TrainJobRunning
	require.NoError(t, c.Status().Update(ctx, tj))
	now = at(0).Add(12 * time.Second)
	later, _, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	require.Equal(t, 9*time.Second, later[key], "a change waits SettleEvery after the last write")
	requireState(t, store, string(tj.UID), trainer.TrainJobCreated)

	finish(tj, trainer.TrainJobComplete, 0)
	require.NoError(t, c.Status().Update(ctx, tj))
	now = at(0).Add(13 * time.Second)
	later, _, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	require.Zero(t, later[key])
	requireState(t, store, string(tj.UID), trainer.TrainJobComplete)
}

// A deleted TrainJob is let go only once its own record is stored: where the store kept a newer
// one meanwhile (another replica's, without the deletion), it waits, and is let go once its
// deletion is written over that one.
func TestAReleaseWaitsForItsRecord(t *testing.T) {
	ctx := context.Background()
	store, scheme := recorderFixture(t)
	tj := trainJob()
	tj.Finalizers = []string{trainer.HistoryFinalizer}
	finish(tj, trainer.TrainJobComplete, 5)
	tj.DeletionTimestamp = mt(6)
	tj.Status.ObservedGeneration = 1 // its JobSet is made: the history reads it
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tj).Build()
	// While this replica reads the JobSet, another writes a record it observed later.
	newer := Observe(nil, trainJob(), Shape{}, at(100))
	reader := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).Build().(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			require.NoError(t, store.Put(ctx, []*Record{newer}))
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := &Recorder{Client: c, Reader: reader, Store: store, Now: func() time.Time { return at(7) },
		gone: map[types.NamespacedName][]*trainer.TrainJob{}}
	key := client.ObjectKeyFromObject(tj)
	_, failed, err := r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	require.ErrorContains(t, failed[key], "newer record")
	require.NoError(t, c.Get(ctx, key, &trainer.TrainJob{}), "let go though its deletion is not recorded")

	_, failed, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	require.Empty(t, failed)
	got, err := store.Get(ctx, string(tj.UID))
	require.NoError(t, err)
	require.NotNil(t, got.Deleted)
	require.Equal(t, trainer.TrainJobComplete, got.State)
	err = c.Get(ctx, key, &trainer.TrainJob{})
	require.True(t, client.IgnoreNotFound(err) == nil && err != nil, "released once recorded: %v", err)
}

// A TrainJob that went while no recorder ran, without the finalizer, has its run ended when the
// recorder starts: deleted then, in the state last seen. The runs of TrainJobs that exist (in the
// cache, or only in the API server yet), and those already deleted, are left as they are; and
// nothing is ended in a database that holds another cluster's runs.
func TestARunWhoseTrainJobWentUnseenEnds(t *testing.T) {
	ctx := context.Background()
	store, scheme := recorderFixture(t)
	running := trainJob()
	running.Status.State, running.Status.ReadyTime = trainer.TrainJobRunning, mt(1)
	here, went, deleted, late, unknown := *running, *running, *running, *running, *running
	here.UID, went.UID, deleted.UID, late.UID, unknown.UID = "here", "went", "deleted", "late", "unknown"
	went.Name, late.Name, unknown.Name = "went", "late", "unknown"
	deleted.DeletionTimestamp = mt(3)
	var records []*Record
	for _, tj := range []*trainer.TrainJob{&here, &went, &deleted, &late, &unknown} {
		records = append(records, Observe(nil, tj, Shape{Nodes: 2, GPUsPerNode: 4}, at(5)))
	}
	require.NoError(t, store.Put(ctx, records))
	require.NotNil(t, records[1].RunningSince, "went was running when last seen")
	system := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: "this-cluster"}}
	// unknown cannot be looked for: it is left for the next start.
	api := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(system, late.DeepCopy()).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "unknown" {
				return errors.New("the API server is in a bad mood")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})

	// Another cluster's database: nothing is ended, by this cluster's history nor by the other's
	// once this one saw it shared.
	alone, err := store.ClaimCluster(ctx, "another-cluster")
	require.NoError(t, err)
	require.True(t, alone)
	r := &Recorder{Store: store, Reader: api, Now: func() time.Time { return at(60) }}
	require.NoError(t, r.endVanished(ctx, []trainer.TrainJob{here}, time.Time{}))
	undeleted, err := store.Undeleted(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"here", "went", "late", "unknown"}, undeleted)
	alone, err = store.ClaimCluster(ctx, "another-cluster")
	require.NoError(t, err)
	require.False(t, alone, "the first cluster is not told its database is shared")
	_, err = store.db.ExecContext(ctx, "DELETE FROM history_meta")
	require.NoError(t, err)

	// The history was last recording at minute 30: went ran until then.
	require.NoError(t, store.Alive(ctx, at(30)))
	lastAlive, err := store.LastAlive(ctx)
	require.NoError(t, err)
	require.Equal(t, at(30), lastAlive)
	require.NoError(t, r.endVanished(ctx, []trainer.TrainJob{here}, lastAlive))
	got, err := store.Get(ctx, "went")
	require.NoError(t, err)
	require.Equal(t, at(60), *got.Deleted)
	require.Equal(t, at(60), *got.Ended())
	require.Equal(t, trainer.TrainJobRunning, got.State)
	// It ran from its readiness to when the history was last recording (its record, unchanged,
	// was last written at minute 5): the history's absence is not its use, and its use stops
	// growing.
	require.Nil(t, got.RunningSince)
	require.InDelta(t, 29*60, got.RunningSeconds, 0.001)
	require.InDelta(t, 29*60*2*4, got.GPUSeconds, 0.001)
	usage, err := store.UsageBy(ctx, UsageQuery{By: "namespace", Namespace: "team-a", Since: at(0), Now: at(30 * 24 * 60)})
	require.NoError(t, err)
	require.Len(t, usage, 1)
	require.InDelta(t, 29*60*2*4+3*(30*24*60-1)*60*2*4+2*60*2*4, usage[0].GPUSeconds, 0.001, "went's use stopped; here's, late's and unknown's go on; deleted's ended")
	for uid, want := range map[string]*Record{"here": records[0], "deleted": records[2], "late": records[3]} {
		got, err := store.Get(ctx, uid)
		require.NoError(t, err)
		require.Equal(t, want.Observed, got.Observed, "%s was written again", uid)
	}
	undeleted, err = store.Undeleted(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"here", "late", "unknown"}, undeleted)

	// A record that knew its deletion keeps its time.
	known := records[2].Vanished(at(60), time.Time{})
	require.Equal(t, at(3), *known.Deleted)
	// A time the history recorded that is not before now (a clock set back) is not taken.
	require.InDelta(t, 4*60, records[1].Vanished(at(60), at(90)).RunningSeconds, 0.001)
}

// recorderFixture is a SQLite store in the test's folder, and the scheme of what a recorder reads.
func recorderFixture(t *testing.T) (*Store, *runtime.Scheme) {
	t.Helper()
	store, err := Open(context.Background(), filepath.Join(t.TempDir(), "history.db"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	scheme := runtime.NewScheme()
	require.NoError(t, trainer.AddToScheme(scheme))
	require.NoError(t, jobsetv1alpha2.AddToScheme(scheme))
	require.NoError(t, corev1.AddToScheme(scheme))
	return store, scheme
}
