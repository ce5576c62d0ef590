package installed

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestTheHelmInstallRuns installs the chart as docs/install.md tells a platform engineer to, into
// a namespace of its own that enforces the restricted Pod Security standard, with two replicas on
// the real node: the previous release's chart and image first, then this one's with helm upgrade
// while TrainJobs run (upgradeInPlace). Then, through that install alone: the runtimes it
// installs on upgrade are admitted by its webhooks, a TrainJob runs to Complete, bad input is
// refused; helm upgrade keeps the certificate the manager rotated into its Secret, and refuses
// nothing after its roll; helm uninstall removes all it installed but the CRDs, which keep the
// TrainJobs, whose pods run on as docs/install.md says, until their TrainJob is deleted; and
// helm install of this release, fresh, into what the uninstall left, runs from its first start
// (an empty certificate Secret) to a TrainJob that completes.
func TestTheHelmInstallRuns(t *testing.T) {
	ctx := context.Background()
	chart, err := testenv.ChartDir()
	require.NoError(t, err)
	helm := func(args ...string) {
		t.Helper()
		out, err := cluster.Helm(ctx, args...)
		require.NoError(t, err, out)
	}
	in := install(t, testenv.InstallHelm, "trainjob-helm", previousRelease)
	waitForOperator(t, in, previousRelease)
	ns := newNamespace(t)
	running := upgradeInPlace(t, in, ns)
	// helm installed what it renders, but the CRDs (crds/, which it creates when missing) and the
	// Namespace (a release lives in one made before it), each object marked as the release's.
	manifest, err := cluster.Helm(ctx, "get", "manifest", testenv.HelmRelease, "--namespace", in.Namespace)
	require.NoError(t, err, manifest)
	installed, err := testenv.Decode([]byte(manifest))
	require.NoError(t, err)
	rendered, err := testenv.HelmTemplate(ctx, in.Namespace)
	require.NoError(t, err)
	assert.Len(t, installed, len(rendered)-3, "helm installed other objects than it renders, but the CRDs")
	for _, obj := range installed {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), live), "%s %s", obj.GetKind(), obj.GetName())
		assert.Equal(t, testenv.HelmRelease, live.GetAnnotations()["meta.helm.sh/release-name"], "%s %s", obj.GetKind(), obj.GetName())
	}
	helm("upgrade", testenv.HelmRelease, chart, "--namespace", in.Namespace, "--reuse-values", "--set", "runtimes.enabled=true", "--wait", "--timeout", "2m")

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
	waitForOperator(t, in, thisRelease)
	rotated := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), rotated))
	assert.Equal(t, secret.Data, rotated.Data, "helm upgrade replaced the manager's certificate")
	again := utiltesting.MakeTrainJob("after-the-upgrade", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	require.NoError(t, k8sClient.Create(ctx, again))
	waitForTrainJob(t, again, isTrue(trainer.TrainJobComplete))

	// helm uninstall removes everything it installed, the runtimes among them, but the CRDs, and
	// with them the TrainJobs: those that run go on running, unwatched.
	before := map[string]untouched{}
	for _, tj := range running {
		before[tj.Name] = untouchedOf(t, tj)
	}
	helm("uninstall", testenv.HelmRelease, "--namespace", in.Namespace, "--wait")
	for _, obj := range installed {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), live)
		assert.True(t, apierrors.IsNotFound(err), "%s %s is still there: %v", obj.GetKind(), obj.GetName(), err)
	}
	err = k8sClient.Get(ctx, client.ObjectKey{Name: "torch-distributed"}, &trainer.ClusterTrainingRuntime{})
	assert.True(t, apierrors.IsNotFound(err), "the chart's runtime is still there: %v", err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1.PodList{}
		require.NoError(c, k8sClient.List(ctx, list, client.InNamespace(in.Namespace)))
		assert.Empty(c, list.Items, "pods of the uninstalled operator")
	}, polling.Timeout, polling.Interval)
	assert.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(again), again), "the TrainJobs went with the operator")
	for _, tj := range running {
		assert.Equal(t, before[tj.Name], untouchedOf(t, tj), "TrainJob %s after the uninstall", tj.Name)
		// Deleting a TrainJob needs no operator: the garbage collector removes its JobSet, Jobs
		// and pods.
		require.NoError(t, k8sClient.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationForeground)))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Empty(c, pods(c, tj), "pods of the deleted TrainJob %s", tj.Name)
		}, polling.Timeout, polling.Interval)
	}

	// This release installed fresh: its manager's first start makes the certificate.
	in = install(t, testenv.InstallHelm, in.Namespace, thisRelease)
	waitForOperator(t, in, thisRelease)
	fresh := utiltesting.MakeTrainJob("after-a-fresh-install", ns).RuntimeRef(trainer.TrainingRuntimeKind, "long").Obj()
	require.NoError(t, k8sClient.Create(ctx, fresh))
	waitForTrainJob(t, fresh, isTrue(trainer.TrainJobComplete))
}
