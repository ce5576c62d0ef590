// Package install applies the rendered install (config/default and config/runtimes) to a real
// kube-apiserver with server-side apply, proving every object is valid, and asks the API server's
// RBAC authorizer what the operator's service account may do.
package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainjob/operator/test/testenv"
)

const (
	namespace      = "trainjob-system"
	serviceAccount = "system:serviceaccount:trainjob-system:trainjob-controller-manager"
)

var (
	cluster   *testenv.Cluster
	k8sClient client.Client
	// installed is what `kustomize build config/default` renders.
	installed []*unstructured.Unstructured
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	cluster, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	k8sClient = cluster.Client
	if installed, err = testenv.Kustomize(configDir("default")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func configDir(name string) string { return filepath.Join("..", "..", "..", "config", name) }

// TestInstallApplies applies the shipped runtimes, then the operator, as a user would (the
// runtimes go first here only because no operator pod runs to answer the webhooks it installs).
func TestInstallApplies(t *testing.T) {
	ctx := context.Background()
	runtimes, err := testenv.Kustomize(configDir("runtimes"))
	require.NoError(t, err)
	require.Len(t, runtimes, 11)
	for _, objs := range [][]*unstructured.Unstructured{runtimes, installed} {
		for _, obj := range objs {
			require.NoError(t, testenv.Apply(ctx, k8sClient, "install-test", obj), "%s %s", obj.GetKind(), obj.GetName())
		}
	}
	kinds := map[string]int{}
	for _, obj := range installed {
		kinds[obj.GetKind()]++
	}
	assert.Equal(t, map[string]int{
		"Namespace": 1, "CustomResourceDefinition": 3, "ServiceAccount": 1, "Deployment": 1, "PodDisruptionBudget": 1, "Service": 2, "Secret": 1,
		"ClusterRole": 3, "ClusterRoleBinding": 2, "Role": 3, "RoleBinding": 3, "ConfigMap": 1,
		"ValidatingWebhookConfiguration": 1, "MutatingWebhookConfiguration": 1,
	}, kinds)
}

// TestEveryObjectIsPrefixed: config/default names the kinds its prefix applies to, so that the
// SDK's ConfigMap keeps its name; an object of a kind it forgot would keep its bare name, and
// could collide with another install's.
func TestEveryObjectIsPrefixed(t *testing.T) {
	for _, obj := range installed {
		switch {
		case obj.GetKind() == "CustomResourceDefinition", obj.GetKind() == "Namespace":
		case obj.GetKind() == "ConfigMap" && obj.GetName() == "kubeflow-trainer-public":
		default:
			assert.Truef(t, strings.HasPrefix(obj.GetName(), "trainjob-"), "%s %s has no prefix trainjob-: add its kind to config/default's prefix transformer", obj.GetKind(), obj.GetName())
		}
	}
}

// TestAnyUserReadsTheTrainerVersion: the Kubeflow SDK, run by any authenticated user, reads the
// version from the ConfigMap kubeflow-trainer-public in the operator's namespace, as it does from
// upstream Kubeflow Trainer's; that user may read nothing else there.
func TestAnyUserReadsTheTrainerVersion(t *testing.T) {
	ctx := context.Background()
	applyRBAC(t)
	for _, obj := range installed {
		if obj.GetKind() == "ConfigMap" {
			require.NoError(t, testenv.Apply(ctx, k8sClient, "install-test", obj))
		}
	}
	cfg := rest.CopyConfig(cluster.Env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:authenticated"}}
	alice, err := client.New(cfg, client.Options{})
	require.NoError(t, err)

	public := &corev1.ConfigMap{}
	require.NoError(t, alice.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "kubeflow-trainer-public"}, public))
	assert.Regexp(t, `^v\d+\.\d+\.\d+$`, public.Data["kubeflow_trainer_version"])

	err = alice.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(namespace))
	assert.True(t, apierrors.IsForbidden(err), "a user may list the operator's ConfigMaps: %v", err)
	err = alice.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "trainjob-webhook-server-cert"}, &corev1.Secret{})
	assert.True(t, apierrors.IsForbidden(err), "a user may read the webhook certificate: %v", err)
}

// TestSecretsAreNeverReadOutsideTheOperatorNamespace asks the API server's authorizer, once the
// install's RBAC is applied: the operator creates MPI's SSH key Secrets in any namespace, but
// reads, lists, watches, changes or deletes none; only its own webhook certificate's Secret, in
// its own namespace, may it read and update.
func TestSecretsAreNeverReadOutsideTheOperatorNamespace(t *testing.T) {
	ctx := context.Background()
	applyRBAC(t)
	cases := []struct {
		namespace, verb, resource string
		allowed                   bool
	}{
		{"team-a", "create", "secrets", true},
		{"team-a", "get", "secrets", false},
		{"team-a", "list", "secrets", false},
		{"team-a", "watch", "secrets", false},
		{"team-a", "update", "secrets", false},
		{"team-a", "delete", "secrets", false},
		{"team-a", "patch", "secrets", true}, // Only to take over a TrainJob's key Secret left by its namesake.
		{"", "list", "secrets", false},       // all namespaces
		{namespace, "get", "secrets", true},
		{namespace, "update", "secrets", true},
		{namespace, "delete", "secrets", false},
		{"team-a", "create", "configmaps", true},
		{"team-a", "get", "configmaps", true},    // A runtime snapshot is read by name, to build from,
		{"team-a", "list", "configmaps", false},  // but ConfigMaps are never listed
		{"team-a", "watch", "configmaps", false}, // nor watched.
		{"team-a", "patch", "jobsets", true},
		{"team-a", "delete", "jobsets", true},                    // A suspended JobSet that cannot take its TrainJob's changes is made anew.
		{"team-a", "list", "pods", true},                         // Failed pods are listed to tell why they failed,
		{"team-a", "watch", "pods", false},                       // never watched,
		{"team-a", "create", "pods", false},                      // nor made, changed or deleted,
		{"team-a", "delete", "pods", false},                      //
		{"team-a", "get", "pods/log", false},                     // and their logs are not read (the kubelet keeps their last lines).
		{"", "update", "validatingwebhookconfigurations", false}, // Someone else's,
		{"", "update", "validatingwebhookconfigurations/trainjob-validating-webhook-configuration", true}, // but its own.
		{"", "patch", "mutatingwebhookconfigurations/trainjob-mutating-webhook-configuration", true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %s in %q", tc.verb, tc.resource, tc.namespace), func(t *testing.T) {
			resource, name, _ := strings.Cut(tc.resource, "/")
			group := map[string]string{
				"jobsets":                         "jobset.x-k8s.io",
				"validatingwebhookconfigurations": "admissionregistration.k8s.io",
				"mutatingwebhookconfigurations":   "admissionregistration.k8s.io",
			}[resource]
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   serviceAccount,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: tc.namespace, Verb: tc.verb, Group: group, Resource: resource, Name: name,
				},
			}}
			require.NoError(t, k8sClient.Create(ctx, review))
			assert.Equal(t, tc.allowed, review.Status.Allowed, review.Status.Reason)
		})
	}

	// The rendered ClusterRole says the same on paper: Secrets, create and patch only, and no
	// wildcard.
	for _, obj := range installed {
		if obj.GetKind() != "ClusterRole" {
			continue
		}
		role := &rbacv1.ClusterRole{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role))
		for _, rule := range role.Rules {
			assert.NotContains(t, rule.Resources, "*", "ClusterRole %s grants every resource", role.Name)
			assert.NotContains(t, rule.Verbs, "*", "ClusterRole %s grants every verb", role.Name)
			if assert.NotContains(t, rule.APIGroups, "*") && containsAny(rule.Resources, "secrets") {
				assert.Equal(t, []string{"create", "patch"}, rule.Verbs, "ClusterRole %s on Secrets", role.Name)
			}
		}
	}
}

// applyRBAC applies the install's namespace, service account and RBAC: what the API server's
// authorizer needs to answer for the manager.
func applyRBAC(t *testing.T) {
	t.Helper()
	require.NoError(t, cluster.InstallOperatorRBAC(context.Background()))
}

func containsAny(list []string, items ...string) bool {
	for _, l := range list {
		for _, i := range items {
			if l == i {
				return true
			}
		}
	}
	return false
}

// TestManagerIsHardened checks the Deployment as the restricted Pod Security Standard and a
// careful operator author would.
func TestManagerIsHardened(t *testing.T) {
	var deployment *appsv1.Deployment
	for _, obj := range installed {
		if obj.GetKind() == "Deployment" {
			deployment = &appsv1.Deployment{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment))
		}
	}
	require.NotNil(t, deployment)
	pod := deployment.Spec.Template.Spec
	assert.Equal(t, ptr.To(true), pod.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	assert.Equal(t, ptr.To(false), c.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, ptr.To(true), c.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.NotEmpty(t, c.Resources.Requests)
	assert.NotEmpty(t, c.Resources.Limits)
	assert.NotNil(t, c.LivenessProbe)
	assert.NotNil(t, c.ReadinessProbe)
	assert.Contains(t, c.Args, "--leader-elect")
	assert.Contains(t, c.Args, "--metrics-bind-address=:8443")
	assert.Equal(t, "trainjob-webhook-server-cert", pod.Volumes[0].Secret.SecretName)
	// A replica that goes away keeps serving while kube-proxy forgets it, and has the time to
	// shut down after: the manager's graceful shutdown timeout (10 s, cmd/main.go) and a margin.
	require.NotNil(t, c.Lifecycle)
	require.NotNil(t, c.Lifecycle.PreStop)
	require.NotNil(t, c.Lifecycle.PreStop.Sleep)
	assert.GreaterOrEqual(t, *pod.TerminationGracePeriodSeconds, c.Lifecycle.PreStop.Sleep.Seconds+10+5)
	// A drain evicts one replica at a time.
	var pdb *policyv1.PodDisruptionBudget
	for _, obj := range installed {
		if obj.GetKind() == "PodDisruptionBudget" {
			pdb = &policyv1.PodDisruptionBudget{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, pdb))
		}
	}
	require.NotNil(t, pdb, "no PodDisruptionBudget")
	assert.Equal(t, deployment.Spec.Selector, pdb.Spec.Selector)
	assert.Equal(t, ptr.To(intstr.FromInt32(1)), pdb.Spec.MaxUnavailable)
}

// TestCertManagerVariant renders config/default-certmanager: cert-manager issues the certificate
// into the Secret the manager mounts, the manager stops rotating its own, and the CA is injected.
func TestCertManagerVariant(t *testing.T) {
	objs, err := testenv.Kustomize(configDir("default-certmanager"))
	require.NoError(t, err)
	found := map[string]bool{}
	for _, obj := range objs {
		switch obj.GetKind() {
		case "Secret":
			t.Errorf("Secret %s is installed: cert-manager must create it", obj.GetName())
		case "Certificate":
			secret, _, _ := unstructured.NestedString(obj.Object, "spec", "secretName")
			assert.Equal(t, "trainjob-webhook-server-cert", secret)
			found["Certificate"] = true
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			assert.Equal(t, "trainjob-system/trainjob-serving-cert", obj.GetAnnotations()["cert-manager.io/inject-ca-from"])
			found[obj.GetKind()] = true
		case "Deployment":
			deployment := &appsv1.Deployment{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment))
			pod := deployment.Spec.Template.Spec
			assert.Contains(t, pod.Containers[0].Args, "--webhook-cert-path=/tmp/k8s-webhook-server/serving-certs")
			// The pod mounts the Secret cert-manager writes, or never starts.
			assert.Equal(t, "trainjob-webhook-server-cert", pod.Volumes[0].Secret.SecretName)
			found["Deployment"] = true
		}
	}
	assert.Len(t, found, 4, "missing pieces: %v", found)
}

// TestTheHistoryInstall renders config/history: config/default whole, its manager started with
// --history, and the history beside it, hardened as the manager is, named as the install names
// its objects, acting as a ServiceAccount of its own.
func TestTheHistoryInstall(t *testing.T) {
	objs, err := testenv.Kustomize(configDir("history"))
	require.NoError(t, err)
	byName := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		byName[obj.GetKind()+"/"+obj.GetName()] = obj
		switch {
		case obj.GetKind() == "CustomResourceDefinition", obj.GetKind() == "Namespace":
		case obj.GetKind() == "ConfigMap" && obj.GetName() == "kubeflow-trainer-public":
		case obj.GetKind() == "APIService": // named <version>.<group>, as the API server requires
		default:
			assert.Truef(t, strings.HasPrefix(obj.GetName(), "trainjob-"), "%s %s has no prefix trainjob-", obj.GetKind(), obj.GetName())
			assert.NotContains(t, obj.GetName(), "trainjob-trainjob-")
		}
	}
	for _, obj := range installed {
		assert.Contains(t, byName, obj.GetKind()+"/"+obj.GetName(), "config/history lacks config/default's object")
	}
	deployment := func(name string) *appsv1.Deployment {
		obj := byName["Deployment/"+name]
		require.NotNil(t, obj, "no Deployment %s", name)
		d := &appsv1.Deployment{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, d))
		return d
	}
	assert.Contains(t, deployment("trainjob-controller-manager").Spec.Template.Spec.Containers[0].Args, "--history")
	for _, obj := range installed {
		if obj.GetKind() == "Deployment" {
			args, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			assert.NotContains(t, fmt.Sprint(args), "--history", "config/default's manager gives TrainJobs a finalizer no history removes")
		}
	}

	history := deployment("trainjob-history")
	pod := history.Spec.Template.Spec
	assert.Equal(t, "trainjob-history", pod.ServiceAccountName)
	assert.Equal(t, ptr.To(true), pod.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	assert.Equal(t, []string{"/history"}, c.Command)
	assert.Equal(t, deployment("trainjob-controller-manager").Spec.Template.Spec.Containers[0].Image, c.Image, "the operator's image")
	assert.Equal(t, ptr.To(false), c.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, ptr.To(true), c.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.NotEmpty(t, c.Resources.Limits)
	assert.NotNil(t, c.ReadinessProbe)
	assert.Contains(t, c.Args, "--leader-elect")
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, history.Spec.Strategy.Type, "two pods never share SQLite's volume")
	require.Len(t, pod.Volumes, 2)
	assert.Equal(t, "trainjob-history", pod.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, "trainjob-history-serving-cert", pod.Volumes[1].Secret.SecretName)
	assert.Contains(t, byName, "PersistentVolumeClaim/trainjob-history")
	assert.Contains(t, byName, "Secret/trainjob-history-serving-cert")
	// The aggregated API: its APIService names the history's Service, in its namespace.
	apiService := byName["APIService/v1alpha1.history.trainer.kubeflow.org"]
	require.NotNil(t, apiService)
	service, _, _ := unstructured.NestedMap(apiService.Object, "spec", "service")
	assert.Equal(t, map[string]any{"name": "trainjob-history", "namespace": namespace, "port": float64(443)}, service)
	assert.Contains(t, byName, "Service/trainjob-history")
	authReader := byName["RoleBinding/trainjob-history-auth-reader"]
	require.NotNil(t, authReader)
	assert.Equal(t, "kube-system", authReader.GetNamespace(), "the front proxy's CA is read where the API server publishes it")
	for _, name := range []string{"ClusterRoleBinding/trainjob-history-rolebinding", "RoleBinding/trainjob-history-rolebinding",
		"RoleBinding/trainjob-history-leader-election-rolebinding", "ClusterRoleBinding/trainjob-history-auth-delegator", "RoleBinding/trainjob-history-auth-reader"} {
		binding := byName[name]
		require.NotNil(t, binding, name)
		subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
		assert.Equal(t, []any{map[string]any{"kind": "ServiceAccount", "name": "trainjob-history", "namespace": namespace}}, subjects, name)
	}
	// Readers of runs: view, edit and admin, by aggregation.
	reader := byName["ClusterRole/trainjob-history-reader"]
	require.NotNil(t, reader)
	for _, role := range []string{"view", "edit", "admin"} {
		assert.Equal(t, "true", reader.GetLabels()["rbac.authorization.k8s.io/aggregate-to-"+role], role)
	}
	ctx := context.Background()
	for _, obj := range objs {
		require.NoError(t, testenv.Apply(ctx, k8sClient, "install-test", obj), "%s %s", obj.GetKind(), obj.GetName())
	}
}
