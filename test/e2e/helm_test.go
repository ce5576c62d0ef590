package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestHelmInstall installs the chart with helm into the local cluster, as docs/install.md tells
// a user to (into a namespace made beforehand with the restricted Pod Security label), upgrades
// it, and uninstalls it. No pod of the chart's runs the operator here: the operator is the test's
// manager, in this process, and the fake nodes only pretend to run the chart's pod. So it proves
// what needs no running manager pod: the API server takes every object the chart renders, and
// the manager's pod under the restricted standard; both Services reach the pod's ports; the
// service account may do what the manager does, in the release namespace; the webhook
// configurations send TrainJobs to the chart's Service (where no operator answers here, so they
// are refused); helm upgrade keeps the certificate and CA the manager's rotation wrote; helm
// uninstall removes every object but the CRDs.
func TestHelmInstall(t *testing.T) {
	ctx := context.Background()
	chart, err := testenv.ChartDir()
	require.NoError(t, err)
	kubeconfig, err := cluster.Kubeconfig("helm")
	require.NoError(t, err)
	helm := func(args ...string) []byte {
		t.Helper()
		out, err := testenv.Helm(ctx, append(args, "--kubeconfig", kubeconfig)...)
		require.NoError(t, err)
		return out
	}

	const release, namespace = "trainjob", "trainjob-helm"
	require.NoError(t, k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}))
	t.Cleanup(func() {
		// The chart's webhooks fail closed while nothing serves them: never leave them to the
		// tests that follow.
		_, _ = testenv.Helm(ctx, "uninstall", release, "--namespace", namespace, "--wait", "--kubeconfig", kubeconfig)
		_ = k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	})
	// The namespace enforces the restricted standard: a privileged pod is refused.
	privileged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}},
	}
	require.ErrorContains(t, k8sClient.Create(ctx, privileged, client.DryRunAll), "violates PodSecurity")

	helm("install", release, chart, "--namespace", namespace, "--wait", "--timeout", "2m")
	installed, err := testenv.Decode(helm("get", "manifest", release, "--namespace", namespace))
	require.NoError(t, err)
	rendered, err := testenv.HelmTemplate(ctx, namespace)
	require.NoError(t, err)
	assert.Len(t, installed, len(rendered)-3, "helm installed other objects than it renders, but the CRDs")
	for _, obj := range installed {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), live), "%s %s", obj.GetKind(), obj.GetName())
		assert.Equal(t, release, live.GetAnnotations()["meta.helm.sh/release-name"], "%s %s", obj.GetKind(), obj.GetName())
	}

	// The Deployment's pod was admitted under the restricted standard (helm --wait saw it
	// available), and each Service selects it by the port it names.
	deployment := &appsv1.Deployment{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "trainjob-controller-manager"}, deployment))
	assert.Equal(t, int32(1), deployment.Status.AvailableReplicas)
	for service, port := range map[string]int32{"trainjob-webhook-service": 9443, "trainjob-controller-manager-metrics-service": 8443} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			slices := &discoveryv1.EndpointSliceList{}
			require.NoError(c, k8sClient.List(ctx, slices, client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelServiceName: service}))
			var ports []int32
			endpoints := 0
			for _, s := range slices.Items {
				endpoints += len(s.Endpoints)
				for _, p := range s.Ports {
					ports = append(ports, ptr.Deref(p.Port, 0))
				}
			}
			assert.Equal(c, 1, endpoints, "endpoints of %s", service)
			assert.Equal(c, []int32{port}, ports, "ports of %s", service)
		}, timeout, interval)
	}

	// The manager's service account, in the release namespace, may do what the manager does.
	serviceAccount := fmt.Sprintf("system:serviceaccount:%s:trainjob-controller-manager", namespace)
	for _, tc := range []struct {
		namespace, verb, group, resource, name string
		allowed                                bool
	}{
		{"team-a", "create", "jobset.x-k8s.io", "jobsets", "", true},
		{"team-a", "create", "", "secrets", "", true},
		{"team-a", "get", "", "secrets", "", false},
		{namespace, "update", "", "secrets", "trainjob-webhook-server-cert", true},
		{namespace, "update", "coordination.k8s.io", "leases", "trainjob-operator.trainer.kubeflow.org", true},
		{"", "patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "trainjob-validating-webhook-configuration", true},
		{"", "create", "authorization.k8s.io", "subjectaccessreviews", "", true},
	} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   serviceAccount,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tc.namespace, Verb: tc.verb, Group: tc.group, Resource: tc.resource, Name: tc.name,
			},
		}}
		require.NoError(t, k8sClient.Create(ctx, review))
		assert.Equal(t, tc.allowed, review.Status.Allowed, "%s %s %s in %q: %s", tc.verb, tc.resource, tc.name, tc.namespace, review.Status.Reason)
	}

	// The API server sends TrainJobs to the chart's webhook Service, where no operator answers
	// here: the webhooks fail closed.
	tj := utiltesting.MakeTrainJob("through-the-chart", newNamespace(t)).RuntimeRef("ClusterTrainingRuntime", "torch-distributed").Obj()
	err = k8sClient.Create(ctx, tj, client.DryRunAll)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("trainjob-webhook-service.%s.svc", namespace))
	t.Logf("Refused through the chart's webhooks: %v", err)

	// What the manager's certificate rotation writes, helm upgrade keeps: the certificate in its
	// Secret and the CA in the webhook configurations.
	ca := cluster.Env.WebhookInstallOptions.LocalServingCAData
	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "trainjob-webhook-server-cert"}, secret))
	secret.Data = map[string][]byte{"ca.crt": ca, "tls.crt": ca, "tls.key": []byte("key")}
	require.NoError(t, k8sClient.Update(ctx, secret, client.FieldOwner("cert-rotation")))
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: "trainjob-validating-webhook-configuration"}, validating))
	for i := range validating.Webhooks {
		validating.Webhooks[i].ClientConfig.CABundle = ca
	}
	require.NoError(t, k8sClient.Update(ctx, validating, client.FieldOwner("cert-rotation")))

	helm("upgrade", release, chart, "--namespace", namespace, "--reuse-values", "--set", "replicas=2", "--wait", "--timeout", "2m")
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(deployment), deployment))
	assert.Equal(t, ptr.To[int32](2), deployment.Spec.Replicas)
	assert.Contains(t, deployment.Spec.Template.Spec.Containers[0].Args, "--leader-elect")
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), secret))
	assert.Equal(t, ca, secret.Data["ca.crt"], "helm upgrade dropped the rotated certificate")
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(validating), validating))
	for _, w := range validating.Webhooks {
		assert.Equal(t, ca, w.ClientConfig.CABundle, "helm upgrade dropped the CA of webhook %s", w.Name)
	}

	// helm uninstall removes all it installed; the CRDs stay, as helm leaves crds/ alone, and so
	// do the TrainJobs and runtimes.
	helm("uninstall", release, "--namespace", namespace, "--wait")
	for _, obj := range installed {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), live)
		assert.True(t, apierrors.IsNotFound(err), "%s %s is still there: %v", obj.GetKind(), obj.GetName(), err)
	}
	for _, obj := range rendered {
		if obj.GetKind() == "CustomResourceDefinition" {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(obj.GroupVersionKind())
			assert.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), live))
		}
	}
	// Only the suite's own webhooks admit TrainJobs again, once the API server has seen the
	// chart's go.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8sClient.Create(ctx, tj.DeepCopy(), client.DryRunAll))
	}, timeout, interval)
}
