package installed

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainjob/operator/test/testenv"
)

// The install's names: config/default's, which the Helm chart keeps whatever the release is
// called.
const (
	// leaseName is the manager's leader election Lease (cmd/main.go).
	leaseName          = "trainjob-operator.trainer.kubeflow.org"
	webhookServiceName = "trainjob-webhook-service"
	metricsServiceName = "trainjob-controller-manager-metrics-service"
)

// repoRoot is the repository's folder, from this package's.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	return root
}

// install installs a release of the operator as testenv.InstallOperator does, with two replicas,
// and removes it when the test ends.
func install(t *testing.T, how, namespace string, rel testenv.Release, patches ...string) *testenv.Installed {
	t.Helper()
	in, err := cluster.InstallOperator(context.Background(), how, namespace, 2, rel, patches...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, in.Uninstall(context.Background())) })
	return in
}

// waitForOperator waits until the manager's Deployment has all its replicas ready, checks that
// they run the release's image on the real node as the install's ServiceAccount, and returns the
// pod that leads.
func waitForOperator(t *testing.T, in *testenv.Installed, rel testenv.Release) string {
	t.Helper()
	ns := in.Namespace
	explainOperatorOnFailure(t, ns)
	require.NoError(t, in.WaitReady(context.Background(), startPolling.Timeout))
	for _, p := range managerPods(t, ns) {
		assert.Equal(t, images[rel.ImageArchive].Tag, p.Spec.Containers[0].Image, "pod %s", p.Name)
		assert.Equal(t, testenv.RealNodeName, p.Spec.NodeName, "pod %s", p.Name)
		assert.Equal(t, testenv.OperatorServiceAccount, p.Spec.ServiceAccountName, "pod %s", p.Name)
	}
	var leader string
	require.EventuallyWithT(t, func(c *assert.CollectT) { leader = leaderOf(c, ns) }, polling.Timeout, polling.Interval)
	return leader
}

// managerPods lists the manager's pods in ns that are not being deleted.
func managerPods(t require.TestingT, ns string) []corev1.Pod {
	list := &corev1.PodList{}
	require.NoError(t, k8sClient.List(context.Background(), list, client.InNamespace(ns),
		client.MatchingLabels{"control-plane": "controller-manager"}))
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// leaderOf returns the manager pod that holds the leader Lease in ns: controller-runtime's
// identity is the pod's host name, its name, then "_" and a UUID.
func leaderOf(t require.TestingT, ns string) string {
	lease := &coordinationv1.Lease{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: leaseName}, lease))
	require.NotNil(t, lease.Spec.HolderIdentity, "the Lease has no holder")
	holder, _, found := strings.Cut(*lease.Spec.HolderIdentity, "_")
	require.True(t, found, "holder %q", *lease.Spec.HolderIdentity)
	var names []string
	for _, p := range managerPods(t, ns) {
		names = append(names, p.Name)
	}
	require.Contains(t, names, holder, "the leader is none of the manager's pods")
	return holder
}

// explainOperatorOnFailure logs, when the test has failed, each manager pod's state and log: what
// the manager said is what tells why it did not serve.
func explainOperatorOnFailure(t *testing.T, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		clientset, err := kubernetes.NewForConfig(cluster.Env.Config)
		if err != nil {
			return
		}
		list := &corev1.PodList{}
		if k8sClient.List(context.Background(), list, client.InNamespace(ns)) != nil {
			return
		}
		for _, p := range list.Items {
			data, err := clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](60)}).DoRaw(context.Background())
			t.Logf("pod %s on %q: %s %+v %+v\n%s%v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses, data, err)
		}
	})
}

// kubectl runs the local cluster's kubectl as a user would, and returns what it printed.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return cluster.Kubectl(args...)
}
