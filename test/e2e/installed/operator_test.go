package installed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// The install's names: config/default's, which the Helm chart keeps whatever the release is
// called.
const (
	operatorNamespace = "trainjob-system"
	managerName       = "trainjob-controller-manager"
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

// imageNameAndTag splits the image's reference as kustomize's images field wants it.
func imageNameAndTag(t *testing.T) (string, string) {
	t.Helper()
	i := strings.LastIndex(image.Tag, ":")
	require.Positive(t, i, "image %q has no tag", image.Tag)
	return image.Tag[:i], image.Tag[i+1:]
}

// kustomizeInstall renders the install as a platform engineer does: a kustomization of their own
// on config/default that names the image and says where the manager's pods run (here: two
// replicas on the real node, the only node that runs real containers), then applies it with
// server-side apply. It returns the objects applied.
func kustomizeInstall(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	name, tag := imageNameAndTag(t)
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "config", "default")) // kustomize takes no absolute path.
	require.NoError(t, err)
	overlay := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: trainjob-operator
  newName: %s
  newTag: %s
patches:
- target: {kind: Deployment, name: %s}
  patch: |-
    - {op: replace, path: /spec/replicas, value: 2}
    - {op: add, path: /spec/template/spec/nodeSelector, value: {%s: %s}}
    - {op: add, path: /spec/template/spec/tolerations, value: [{key: %q, operator: Exists, effect: NoSchedule}]}
`, base, name, tag, managerName, testenv.NodeLabel, testenv.RealNodeLabel, testenv.RealNodeTaint)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644))
	objs, err := testenv.Kustomize(dir)
	require.NoError(t, err)
	require.NoError(t, testenv.Apply(context.Background(), k8sClient, "kubectl", objs...))
	return objs
}

// uninstall deletes what an install applied, as `kubectl delete` of it does, but its CRDs, which
// would take every TrainJob and runtime with them; it waits until the operator's namespace is
// gone.
func uninstall(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for i := len(objs) - 1; i >= 0; i-- {
		if objs[i].GetKind() == "CustomResourceDefinition" {
			continue
		}
		err := k8sClient.Delete(ctx, objs[i].DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationBackground))
		assert.True(t, err == nil || apierrors.IsNotFound(err), "deleting %s %s: %v", objs[i].GetKind(), objs[i].GetName(), err)
	}
	waitGone(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})
}

// waitGone waits until the object is deleted.
func waitGone(t *testing.T, obj client.Object) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		assert.True(c, apierrors.IsNotFound(err), "%T %s is still there: %v", obj, obj.GetName(), err)
	}, startPolling.Timeout, startPolling.Interval)
}

// waitForOperator waits until the manager's Deployment in ns has all its replicas ready on the
// image, and returns the pod that leads.
func waitForOperator(t *testing.T, ns string, replicas int32) string {
	t.Helper()
	explainOperatorOnFailure(t, ns)
	utiltesting.WaitFor(t, k8sClient, startPolling, client.ObjectKey{Namespace: ns, Name: managerName}, &appsv1.Deployment{}, func(c *assert.CollectT, d *appsv1.Deployment) {
		assert.Equal(c, d.Generation, d.Status.ObservedGeneration)
		assert.Equal(c, replicas, d.Status.UpdatedReplicas, "updated replicas")
		assert.Equal(c, replicas, d.Status.ReadyReplicas, "ready replicas")
		assert.Equal(c, replicas, d.Status.Replicas, "replicas")
	})
	for _, p := range managerPods(t, ns) {
		assert.Equal(t, image.Tag, p.Spec.Containers[0].Image, "pod %s", p.Name)
		assert.Equal(t, testenv.RealNodeName, p.Spec.NodeName, "pod %s", p.Name)
		assert.Equal(t, managerName, p.Spec.ServiceAccountName, "pod %s", p.Name)
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

// kubectl runs the local cluster's kubectl with an administrator's kubeconfig, as a user would,
// and returns what it printed.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	kubeconfig, err := cluster.Kubeconfig("kubectl")
	require.NoError(t, err)
	assets, err := testenv.AssetsDir()
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
