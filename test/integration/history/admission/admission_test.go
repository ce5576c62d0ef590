// Package admission runs the operator's manager with --history and its webhooks, and the
// history's recorder, against a real kube-apiserver: what the webhook writes at admission (the
// creator, the finalizer) is what the history records and releases.
package admission

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
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
	stop, err := cluster.StartManager(controller.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	return m.Run()
}

// A TrainJob created through the operator's webhook with --history is its creator's, whatever it
// claims, and waits for the history when deleted; the history records who created it and lets
// it go.
func TestTheHistoryRecordsWhatAdmissionWrote(t *testing.T) {
	ctx := context.Background()
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

	store, err := history.Open(ctx, filepath.Join(t.TempDir(), "history.db"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	stop, err := cluster.StartRecorder(ctx, store)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, stop()) })
	require.Eventually(t, func() bool {
		err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(tj), &trainer.TrainJob{})
		return client.IgnoreNotFound(err) == nil && err != nil
	}, 30*time.Second, 50*time.Millisecond, "the history did not let the TrainJob go")
	r, err := store.Get(ctx, string(tj.UID))
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", r.Creator)
	require.NotNil(t, r.Deleted)
}
