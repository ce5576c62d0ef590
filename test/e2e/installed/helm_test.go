package installed

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestTheHelmInstallRuns installs the chart as docs/install.md tells a platform engineer to, into
// a namespace of its own that enforces the restricted Pod Security standard, with two replicas on
// the real node; then, through that install alone: the runtimes it installs on upgrade are
// admitted by its webhooks, a TrainJob runs to Complete, bad input is refused; helm upgrade keeps
// the certificate the manager rotated into its Secret; helm uninstall removes the operator.
func TestTheHelmInstallRuns(t *testing.T) {
	ctx := context.Background()
	chart, err := testenv.ChartDir()
	require.NoError(t, err)
	helm := func(args ...string) {
		t.Helper()
		out, err := cluster.Helm(ctx, args...)
		require.NoError(t, err, out)
	}
	in := install(t, testenv.InstallHelm, "trainjob-helm")
	waitForOperator(t, in)
	helm("upgrade", testenv.HelmRelease, chart, "--namespace", in.Namespace, "--reuse-values", "--set", "runtimes.enabled=true", "--wait", "--timeout", "2m")

	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("through-the-chart", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForTrainJob(t, tj, isTrue(trainer.TrainJobComplete))
	badInputIsRefused(t, ns)

	// The certificate the manager's rotation wrote into the chart's Secret survives an upgrade,
	// which rolls the manager's pods.
	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: "trainjob-webhook-server-cert"}, secret))
	require.NotEmpty(t, secret.Data["tls.crt"], "the manager wrote no certificate")
	helm("upgrade", testenv.HelmRelease, chart, "--namespace", in.Namespace, "--reuse-values", "--set", "manager.conditions=all", "--wait", "--timeout", "4m")
	waitForOperator(t, in)
	rotated := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), rotated))
	assert.Equal(t, secret.Data, rotated.Data, "helm upgrade replaced the manager's certificate")
	again := utiltesting.MakeTrainJob("after-the-upgrade", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	require.NoError(t, k8sClient.Create(ctx, again))
	waitForTrainJob(t, again, isTrue(trainer.TrainJobComplete))

	// helm uninstall removes the operator (and the runtimes it installed).
	helm("uninstall", testenv.HelmRelease, "--namespace", in.Namespace, "--wait")
	assert.Empty(t, managerPods(t, in.Namespace))
	assert.Error(t, k8sClient.Get(ctx, client.ObjectKey{Name: "torch-distributed"}, &trainer.ClusterTrainingRuntime{}))
}
