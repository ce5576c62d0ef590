package history

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// A replica whose clock is behind the one that wrote a record still records the run's end, and
// only then lets its TrainJob go.
func TestTheRecorderKeepsTheLatestWhateverTheClocks(t *testing.T) {
	ctx := context.Background()
	store, err := Open(ctx, filepath.Join(t.TempDir(), "history.db"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	scheme := runtime.NewScheme()
	require.NoError(t, trainer.AddToScheme(scheme))

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
	_, err = r.record(ctx, []types.NamespacedName{key})
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
	_, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	r.gone[key] = append(r.gone[key], second)
	_, err = r.record(ctx, []types.NamespacedName{key})
	require.NoError(t, err)
	for _, uid := range []string{"first", "second"} {
		rec, err := store.Get(ctx, uid)
		require.NoError(t, err, uid)
		require.NotNil(t, rec.Deleted, uid)
	}
	require.Empty(t, r.gone)
}
