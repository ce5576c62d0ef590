package installed

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	kubeconfig, err := cluster.Kubeconfig("helm")
	require.NoError(t, err)
	helm := func(args ...string) string {
		t.Helper()
		out, err := testenv.Helm(ctx, append(args, "--kubeconfig", kubeconfig)...)
		require.NoError(t, err)
		return string(out)
	}
	const release, namespace = "trainjob", "trainjob-helm"
	require.NoError(t, k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}))
	t.Cleanup(func() {
		_, _ = testenv.Helm(ctx, "uninstall", release, "--namespace", namespace, "--wait", "--kubeconfig", kubeconfig)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
		_ = k8sClient.Delete(ctx, ns)
		waitGone(t, ns)
	})

	repository, tag := imageNameAndTag(t)
	placement, err := json.Marshal(map[string]any{
		"nodeSelector": map[string]string{testenv.NodeLabel: testenv.RealNodeLabel},
		"tolerations":  []corev1.Toleration{testenv.RealNodeToleration()},
	})
	require.NoError(t, err)
	values := t.TempDir() + "/values.json"
	require.NoError(t, os.WriteFile(values, placement, 0o600))
	helm("install", release, chart, "--namespace", namespace, "--values", values,
		"--set", "image.repository="+repository, "--set", "image.tag="+tag, "--set", "replicas=2",
		"--wait", "--timeout", "4m")
	waitForOperator(t, namespace, 2)
	helm("upgrade", release, chart, "--namespace", namespace, "--reuse-values", "--set", "runtimes.enabled=true", "--wait", "--timeout", "2m")

	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("through-the-chart", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	waitForTrainJob(t, tj, isTrue(trainer.TrainJobComplete))
	badInputIsRefused(t, ns)

	// The certificate the manager's rotation wrote into the chart's Secret survives an upgrade.
	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "trainjob-webhook-server-cert"}, secret))
	require.NotEmpty(t, secret.Data["tls.crt"], "the manager wrote no certificate")
	helm("upgrade", release, chart, "--namespace", namespace, "--reuse-values", "--set", "manager.conditions=all", "--wait", "--timeout", "4m")
	waitForOperator(t, namespace, 2)
	rotated := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), rotated))
	assert.Equal(t, secret.Data, rotated.Data, "helm upgrade replaced the manager's certificate")
	again := utiltesting.MakeTrainJob("after-the-upgrade", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	require.NoError(t, k8sClient.Create(ctx, again))
	waitForTrainJob(t, again, isTrue(trainer.TrainJobComplete))

	helm("uninstall", release, "--namespace", namespace, "--wait")
	assert.Empty(t, managerPods(t, namespace))
}
