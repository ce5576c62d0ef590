// Package admission runs the operator's manager with --history and its webhooks, and the
// history's recorder, against a real kube-apiserver: what the webhook writes at admission (the
// creator, the finalizer) is what the history records and releases.
package admission

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/history"
	utiltesting "github.com/trainjob/operator/internal/testing"
	operatorwebhook "github.com/trainjob/operator/internal/webhook"
	"github.com/trainjob/operator/test/testenv"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	var err error
	if cluster, err = testenv.Start(testenv.WithWebhooks); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	cluster.Admission = operatorwebhook.Options{History: true}
	return m.Run()
}

// startManager runs the operator's manager, its webhooks with it, until stop is called (at the
// test's end at the latest).
func startManager(t *testing.T) (stop func()) {
	stopped, err := cluster.StartManager(controller.Options{})
	require.NoError(t, err)
	stop = sync.OnceFunc(stopped)
	t.Cleanup(stop)
	return stop
}

// startRecorder runs the history's recorder over a new SQLite file until the test ends.
func startRecorder(t *testing.T) *history.Store {
	ctx := context.Background()
	store, err := history.Open(ctx, filepath.Join(t.TempDir(), "history.db"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	stop, err := cluster.StartRecorder(ctx, store)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, stop()) })
	return store
}

// waitGone waits until tj is gone from the API server.
func waitGone(t *testing.T, tj *trainer.TrainJob, why string) {
	require.Eventually(t, func() bool {
		err := cluster.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), &trainer.TrainJob{})
		return client.IgnoreNotFound(err) == nil && err != nil
	}, 30*time.Second, 50*time.Millisecond, why)
}

// A TrainJob created through the operator's webhook with --history is its creator's, whatever it
// claims, and waits for the history when deleted; the history records who created it and lets
// it go.
func TestTheHistoryRecordsWhatAdmissionWrote(t *testing.T) {
	ctx := context.Background()
	startManager(t)
	ns := utiltesting.NewNamespace(t, cluster.Client, "history")
	cfg := rest.CopyConfig(cluster.Env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice@example.com", Groups: []string{"system:masters"}}
	alice, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)

	tj := utiltesting.MakeTrainJob("bert", ns).Suspend(true).Obj()
	tj.Spec.RuntimeRef.Name = "torch-distributed"
	tj.Annotations = map[string]string{trainer.CreatorAnnotation: "mallory"}
	require.NoError(t, alice.Create(ctx, tj))
	require.Equal(t, "alice@example.com", tj.Annotations[trainer.CreatorAnnotation])
	require.Equal(t, []string{trainer.HistoryFinalizer}, tj.Finalizers)

	// Deleted while no history runs: it waits.
	require.NoError(t, cluster.Client.Delete(ctx, tj))
	time.Sleep(time.Second)
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKeyFromObject(tj), tj), "gone before the history recorded it")

	store := startRecorder(t)
	waitGone(t, tj, "the history did not let the TrainJob go")
	r, err := store.Get(ctx, string(tj.UID))
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", r.Creator)
	require.NotNil(t, r.Deleted)
}

// With the operator's manager down, its webhooks refuse every change of a TrainJob (their
// failure policy is Fail), but for the release of a deleted one: the history lets it go, and
// records it, without waiting for the manager. Any other change of the deleted TrainJob, its
// labels or its creator, is still refused.
func TestTheHistoryReleasesWhileTheWebhooksAreDown(t *testing.T) {
	ctx := context.Background()
	stopManager := startManager(t)
	ns := utiltesting.NewNamespace(t, cluster.Client, "history")
	tj := utiltesting.MakeTrainJob("gpt", ns).Suspend(true).Obj()
	tj.Spec.RuntimeRef.Name = "torch-distributed"
	require.NoError(t, cluster.Client.Create(ctx, tj))
	require.Equal(t, []string{trainer.HistoryFinalizer}, tj.Finalizers)
	creator := tj.Annotations[trainer.CreatorAnnotation]
	require.NotEmpty(t, creator)
	require.NoError(t, cluster.Client.Delete(ctx, tj))
	require.NoError(t, cluster.Client.Get(ctx, client.ObjectKeyFromObject(tj), tj))
	stopManager()

	refused := func(change func(*trainer.TrainJob)) {
		t.Helper()
		changed := tj.DeepCopy()
		change(changed)
		err := cluster.Client.Update(ctx, changed)
		require.ErrorContains(t, err, "failed calling webhook", "the webhooks were not asked")
	}
	refused(func(tj *trainer.TrainJob) { tj.Labels = map[string]string{"team": "nlp"} })
	refused(func(tj *trainer.TrainJob) { tj.Annotations[trainer.CreatorAnnotation] = "mallory" })
	refused(func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) })
	refused(func(tj *trainer.TrainJob) {
		tj.Annotations[trainer.CreatorAnnotation] = "mallory"
		tj.Finalizers = nil
	})

	store := startRecorder(t)
	waitGone(t, tj, "the history could not let the TrainJob go without the operator's webhooks")
	r, err := store.Get(ctx, string(tj.UID))
	require.NoError(t, err)
	require.Equal(t, creator, r.Creator)
	require.NotNil(t, r.Deleted)
}
