package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// The API server tells the webhook who sends a request: a TrainJob's creator is the user who
// created it, whatever the TrainJob claims, and no later update changes it.
func TestATrainJobsCreatorIsTheAuthenticatedUser(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(restCfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
		c, err := client.New(cfg, client.Options{Scheme: k8sClient.Scheme()})
		require.NoError(t, err)
		return c
	}
	tj := utiltesting.MakeTrainJob("claimed", ns).Suspend(true).Obj()
	tj.Spec.RuntimeRef.Name = "torch-distributed"
	tj.Annotations = map[string]string{trainer.CreatorAnnotation: "mallory"}
	require.NoError(t, as("alice@example.com").Create(ctx, tj))
	require.Equal(t, "alice@example.com", tj.Annotations[trainer.CreatorAnnotation])
	require.Empty(t, tj.Finalizers, "no history here: no finalizer")

	bob := as("bob")
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &trainer.TrainJob{}
		require.NoError(t, bob.Get(ctx, client.ObjectKeyFromObject(tj), got))
		got.Annotations[trainer.CreatorAnnotation] = "bob"
		return bob.Update(ctx, got)
	}))
	got := &trainer.TrainJob{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
	require.Equal(t, "alice@example.com", got.Annotations[trainer.CreatorAnnotation], "an update keeps the creator")
}
