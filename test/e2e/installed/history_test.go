package installed

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	historyv1alpha1 "github.com/trainjob/operator/internal/history/apis/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/testing/postgres"
	"github.com/trainjob/operator/test/testenv"
)

// TestTheHistoryRunsInstalled installs the operator with its history from config/history, as
// docs/history.md tells a platform engineer to, from this release's image: the history's pod on
// the real node as its own ServiceAccount with the RBAC the install ships, SQLite on its volume,
// its API aggregated through its APIService and Service, with the certificate it made itself;
// then a TrainJob's run outlives it (aRunOutlivesItsTrainJob).
func TestTheHistoryRunsInstalled(t *testing.T) {
	ctx := context.Background()
	// The local cluster has no storage provisioner: a volume of the real node's file system for
	// the history's claim, as a cluster's provisioner would make one.
	dir := filepath.Join(t.TempDir(), "history")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, 0o777)) // the image's user writes the database there
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "trainjob-history-e2e"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: testenv.OperatorNamespace, Name: testenv.HistoryDeployment},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)},
			},
		},
	}
	require.NoError(t, k8sClient.Create(ctx, pv))
	t.Cleanup(func() { assert.NoError(t, client.IgnoreNotFound(k8sClient.Delete(ctx, pv))) })

	in := install(t, testenv.InstallKustomizeHistory, "", thisRelease)
	aRunOutlivesItsTrainJob(t, in, 1)
}

// TestTheHistoryRunsInstalledOnPostgreSQL installs config/history with the patch docs/history.md
// gives for PostgreSQL, as it is written there: the database's URL from a Secret, no volume,
// rolling updates; with two replicas. PostgreSQL runs on this machine, where the real node's pods
// reach it, and asks for a password. Both replicas serve the API, one records; the run is in
// PostgreSQL.
func TestTheHistoryRunsInstalledOnPostgreSQL(t *testing.T) {
	ctx := context.Background()
	ip, err := testenv.NodeIP()
	require.NoError(t, err)
	location := postgres.StartFor(t, ip, "s3cret/+:@")
	in := install(t, testenv.InstallKustomizeHistory, "", thisRelease, documentedPatches(t, "# my-install/kustomization.yaml"),
		"- target: {kind: Deployment, name: "+testenv.HistoryDeployment+"}\n  patch: |-\n    - {op: replace, path: /spec/replicas, value: 2}")
	require.NoError(t, k8sClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: "history-database"},
		StringData: map[string]string{"url": location},
	}))
	uid := aRunOutlivesItsTrainJob(t, in, 2)
	db, err := sql.Open("pgx", location)
	require.NoError(t, err)
	defer db.Close()
	var state string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT state FROM runs WHERE uid = $1", uid).Scan(&state))
	assert.Equal(t, trainer.TrainJobComplete, state)
}

// documentedPatches are the patches of the kustomization that docs/history.md shows in the YAML
// block that starts with first, as YAML entries of a kustomization's patches.
func documentedPatches(t *testing.T, first string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "history.md"))
	require.NoError(t, err)
	_, block, found := strings.Cut(string(doc), "```yaml\n"+first+"\n")
	require.True(t, found, "docs/history.md has no YAML block that starts with %q", first)
	block, _, _ = strings.Cut(block, "```")
	var kustomization struct {
		Patches []any `json:"patches"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(block), &kustomization))
	require.NotEmpty(t, kustomization.Patches)
	patches, err := yaml.Marshal(kustomization.Patches)
	require.NoError(t, err)
	return string(patches)
}

// aRunOutlivesItsTrainJob waits for the installed history's replicas, on the real node as its
// ServiceAccount, and its API; then a user's TrainJob runs, its TTL deletes it, and the history
// records it and lets it go: the user reads the run through the API server with their own
// rights, and `kubectl get` lists it; a user without rights in the namespace is refused. It
// returns the TrainJob's UID.
func aRunOutlivesItsTrainJob(t *testing.T, in *testenv.Installed, replicas int32) types.UID {
	ctx := context.Background()
	waitForOperator(t, in, thisRelease)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		d := &appsv1.Deployment{}
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: testenv.HistoryDeployment}, d))
		assert.Equal(c, replicas, d.Status.ReadyReplicas, "the history is not ready: %+v", d.Status)
	}, startPolling.Timeout, startPolling.Interval)
	list := &corev1.PodList{}
	require.NoError(t, k8sClient.List(ctx, list, client.InNamespace(in.Namespace), client.MatchingLabels{"app.kubernetes.io/component": "history"}))
	require.Len(t, list.Items, int(replicas))
	for _, history := range list.Items {
		assert.Equal(t, images[thisRelease.ImageArchive].Tag, history.Spec.Containers[0].Image)
		assert.Equal(t, testenv.RealNodeName, history.Spec.NodeName)
		assert.Equal(t, testenv.HistoryDeployment, history.Spec.ServiceAccountName)
	}
	scheme := runtime.NewScheme()
	require.NoError(t, historyv1alpha1.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		api := &unstructured.Unstructured{}
		api.SetAPIVersion("apiregistration.k8s.io/v1")
		api.SetKind("APIService")
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKey{Name: testenv.HistoryAPIService}, api))
		conditions, _, _ := unstructured.NestedSlice(api.Object, "status", "conditions")
		available := false
		for _, cond := range conditions {
			cond, _ := cond.(map[string]any)
			available = available || cond["type"] == "Available" && cond["status"] == "True"
		}
		assert.True(c, available, "the history's API is not available: %v", conditions)
	}, polling.Timeout, polling.Interval)
	installRuntimes(t)

	ns := newNamespace(t)
	alice := userClient(t, scheme, "alice@example.com")
	// alice may read what the default role view lets her (the history's runs are aggregated into
	// it), and make TrainJobs.
	require.NoError(t, k8sClient.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trainjobs"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{trainer.GroupVersion.Group}, Resources: []string{"trainjobs"}, Verbs: []string{"get", "list", "create"}}},
	}))
	for role, kind := range map[string]string{"view": "ClusterRole", "trainjobs": "Role"} {
		require.NoError(t, k8sClient.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice@example.com"}},
		}))
	}
	tj := utiltesting.MakeTrainJob("remembered", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
	require.NoError(t, alice.Create(ctx, tj))
	assert.Equal(t, []string{trainer.HistoryFinalizer}, tj.Finalizers, "the manager's webhook runs with --history")
	// Its TTL deletes it once Complete; the history records it and lets it go.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), &trainer.TrainJob{})
		assert.True(c, apierrors.IsNotFound(err), "the TrainJob is still there: %v", err)
	}, polling.Timeout, polling.Interval)

	runs := &historyv1alpha1.TrainJobRunList{}
	require.NoError(t, alice.List(ctx, runs, client.InNamespace(ns)), "alice reads her namespace's runs with her own rights")
	require.Len(t, runs.Items, 1)
	run := runs.Items[0]
	assert.Equal(t, tj.Name, run.Spec.TrainJobName)
	assert.Equal(t, "alice@example.com", run.Spec.Creator)
	assert.Equal(t, trainer.TrainJobComplete, run.Status.State)
	assert.NotNil(t, run.Status.FinishedTime)
	assert.NotNil(t, run.Status.DeletedTime)
	out, err := kubectl(t, "get", "trainjobruns", "-n", ns)
	require.NoError(t, err, out)
	assert.Contains(t, out, tj.Name)
	assert.Contains(t, out, trainer.TrainJobComplete)

	err = userClient(t, scheme, "bob@example.com").List(ctx, &historyv1alpha1.TrainJobRunList{}, client.InNamespace(ns))
	assert.True(t, apierrors.IsForbidden(err), "a user without rights in the namespace read its runs: %v", err)
	return tj.UID
}

// userClient is a client of the cluster as user, impersonated by the administrator.
func userClient(t *testing.T, scheme *runtime.Scheme, user string) client.Client {
	cfg := rest.CopyConfig(cluster.Env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}
