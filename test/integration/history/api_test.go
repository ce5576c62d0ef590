package history

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/cli"
	"github.com/trainjob/operator/internal/history"
	historyapi "github.com/trainjob/operator/internal/history/apis/v1alpha1"
	"github.com/trainjob/operator/internal/history/apiserver"
	"github.com/trainjob/operator/test/testenv"
)

// serveAPI runs the history's API server over store, as the installed history with its RBAC,
// and registers it with the API server as the install does (an APIService with its CA), until
// the test ends; it returns when the API server serves it.
func serveAPI(t *testing.T, store *history.Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kubeconfig, err := cluster.HistoryKubeconfig(ctx, "history-api")
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	dir := t.TempDir()
	server, err := apiserver.New(apiserver.Options{
		BindAddress: "127.0.0.1", Port: port, CertDir: dir, Kubeconfig: kubeconfig,
		DNSNames: []string{"trainjob-history." + testenv.OperatorNamespace + ".svc"},
	}, store)
	require.NoError(t, err)
	done := make(chan error)
	go func() { done <- server.PrepareRun().RunWithContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.NoError(t, cluster.RegisterHistoryAPI(ctx, port, filepath.Join(dir, "tls.crt")))
	var last error
	admin := historyClient(t, "")
	assert.Eventually(t, func() bool {
		last = admin.List(ctx, &historyapi.TrainJobRunList{}, client.InNamespace("default"))
		return last == nil
	}, timeout, 200*time.Millisecond, "the API server does not serve the history's API")
	if last != nil {
		apiService := &unstructured.Unstructured{}
		apiService.SetAPIVersion("apiregistration.k8s.io/v1")
		apiService.SetKind("APIService")
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: "v1alpha1.history.trainer.kubeflow.org"}, apiService))
		conditions, _, _ := unstructured.NestedSlice(apiService.Object, "status", "conditions")
		require.NoError(t, last, "the APIService's conditions: %v", conditions)
	}
}

// historyClient reads the history's API as the administrator, or as user when given (with no
// group but the authenticated users').
func historyClient(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Env.Config)
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	}
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, historyapi.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

func names(list *historyapi.TrainJobRunList) []string {
	var out []string
	for _, r := range list.Items {
		out = append(out, r.Spec.TrainJobName)
	}
	return out
}

// The history's runs are read through the API server with the reader's own credentials: a user
// who may read the TrainJobs of a namespace reads its runs, and no other namespace's.
func TestTheHistoryIsReadThroughTheAPIServer(t *testing.T) {
	ctx := context.Background()
	store, err := history.Open(ctx, filepath.Join(t.TempDir(), "history.db"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	serveAPI(t, store)

	now := time.Now().Truncate(time.Second)
	var records []*history.Record
	for i, spec := range []struct{ ns, name, state string }{
		{"team-a", "bert", trainer.TrainJobComplete}, {"team-a", "gpt", trainer.TrainJobFailed},
		{"team-a", "bert", trainer.TrainJobRunning}, {"team-b", "secret-model", trainer.TrainJobComplete},
	} {
		r := &history.Record{
			UID: fmt.Sprintf("%08x-0000-4000-8000-%012d", i+1, i), Namespace: spec.ns, Name: spec.name, Creator: "alice",
			Runtime: history.Runtime{Kind: "ClusterTrainingRuntime", Name: "torch-distributed"}, Nodes: 2, GPUsPerNode: 4,
			Created: now.Add(time.Duration(i-10) * time.Hour), State: spec.state, Observed: now,
			Labels: map[string]string{"team": spec.ns}, RunningSeconds: 3600, NodeSeconds: 7200, GPUSeconds: 28800,
		}
		if spec.state != trainer.TrainJobRunning {
			r.Finished = ptrTo(r.Created.Add(time.Hour))
		}
		records = append(records, r)
	}
	require.NoError(t, store.Put(ctx, records))

	admin := historyClient(t, "")
	list := &historyapi.TrainJobRunList{}
	require.NoError(t, admin.List(ctx, list, client.InNamespace("team-a")))
	assert.Equal(t, []string{"bert", "gpt", "bert"}, names(list), "newest first")
	assert.Equal(t, "bert.00000003", list.Items[0].Name)
	assert.Equal(t, types.UID(records[2].UID), list.Items[0].UID)

	require.NoError(t, admin.List(ctx, list, client.InNamespace("team-a"), client.MatchingFields{"status.state": "Failed"}))
	assert.Equal(t, []string{"gpt"}, names(list))
	require.NoError(t, admin.List(ctx, list, client.InNamespace("team-a"), client.MatchingFields{"spec.trainJobName": "bert", "since": "9h30m"}))
	assert.Equal(t, []string{"bert"}, names(list), "since")
	require.NoError(t, admin.List(ctx, list, client.MatchingLabels{"team": "team-b"}))
	assert.Equal(t, []string{"secret-model"}, names(list), "all namespaces, by label")
	err = admin.List(ctx, list, client.InNamespace("team-a"), client.MatchingFields{"spec.image": "x"})
	require.True(t, apierrors.IsBadRequest(err), "an unknown field: %v", err)
	assert.ErrorContains(t, err, "status.state")
	// Every term of a selector holds: a run named for one TrainJob and selected for another is
	// none (the authorizer checked the first); a field given twice is refused.
	require.NoError(t, admin.List(ctx, list, client.InNamespace("team-a"),
		client.MatchingFieldsSelector{Selector: fields.ParseSelectorOrDie("metadata.name=gpt.00000002,spec.trainJobName=bert")}))
	assert.Empty(t, list.Items, "the run of bert, through a name checked as gpt's")
	for _, twice := range []string{"status.state=Running,status.state=Failed", "metadata.name=gpt.00000002,metadata.name=bert.00000001"} {
		err = admin.List(ctx, list, client.InNamespace("team-a"), client.MatchingFieldsSelector{Selector: fields.ParseSelectorOrDie(twice)})
		require.True(t, apierrors.IsBadRequest(err), "%s: %v", twice, err)
		assert.ErrorContains(t, err, "given twice")
	}

	require.NoError(t, admin.List(ctx, list, client.InNamespace("team-a"), client.Limit(2)))
	require.Len(t, list.Items, 2)
	require.NotEmpty(t, list.Continue)
	require.NoError(t, admin.List(ctx, list, client.InNamespace("team-a"), client.Limit(2), client.Continue(list.Continue)))
	assert.Equal(t, []string{"bert"}, names(list))
	assert.Empty(t, list.Continue)

	run := &historyapi.TrainJobRun{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "bert.00000001"}, run))
	assert.Equal(t, trainer.TrainJobComplete, run.Status.State)
	assert.EqualValues(t, 28800, run.Status.GPUSeconds)
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "bert"}, run))
	assert.Equal(t, trainer.TrainJobRunning, run.Status.State, "by the TrainJob's name: its latest run")
	err = admin.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "bert.00000001"}, run)
	assert.True(t, apierrors.IsNotFound(err), "another namespace's run: %v", err)

	// kubectl get asks for a table.
	rawConfig := rest.CopyConfig(cluster.Env.Config)
	rawConfig.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	raw, err := rest.UnversionedRESTClientFor(rawConfig)
	require.NoError(t, err)
	body, err := raw.Get().AbsPath("/apis/history.trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobruns").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	require.NoError(t, err)
	table := &metav1.Table{}
	require.NoError(t, json.Unmarshal(body, table))
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	assert.Equal(t, []string{"Name", "State", "Reason", "Runtime", "Creator", "Nodes", "GPUs", "GPU-Hours", "Duration", "Age"}, columns)
	require.Len(t, table.Rows, 3)
	assert.Equal(t, []any{"bert.00000003", "Running"}, table.Rows[0].Cells[:2])

	// kubectl explain reads the API's schema, with each type's group, version and kind.
	var schema []byte
	assert.Eventually(t, func() bool { // the API server gathers the schema a moment after it serves the API
		schema, err = raw.Get().AbsPath("/openapi/v3/apis/history.trainer.kubeflow.org/v1alpha1").DoRaw(ctx)
		return err == nil
	}, timeout, 200*time.Millisecond)
	require.NoError(t, err)
	assert.Contains(t, string(schema), `"org.kubeflow.trainer.history.v1alpha1.TrainJobRun"`)
	assert.Regexp(t, `"x-kubernetes-group-version-kind":\[\{"group":"history.trainer.kubeflow.org","kind":"TrainJobRun","version":"v1alpha1"\}\]`, string(schema))
	assert.Contains(t, string(schema), "GPUSeconds is NodeSeconds times its GPUs per node.")

	// A user who may read team-a's TrainJobs and runs reads its runs, not team-b's, nor all
	// namespaces'; one who may read its runs but not its TrainJobs reads none.
	rbac, err := testenv.Decode([]byte(`apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: trainjob-reader, namespace: team-a}
rules:
- {apiGroups: [trainer.kubeflow.org], resources: [trainjobs], verbs: [get, list]}
- {apiGroups: [history.trainer.kubeflow.org], resources: [trainjobruns], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: carol-reads, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: trainjob-reader}
subjects: [{kind: User, name: carol}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: run-reader, namespace: team-a}
rules:
- {apiGroups: [history.trainer.kubeflow.org], resources: [trainjobruns], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dave-reads-runs, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: run-reader}
subjects: [{kind: User, name: dave}]`))
	require.NoError(t, err)
	require.NoError(t, testenv.Apply(ctx, k8sClient, "history-test", rbac...))
	carol := historyClient(t, "carol")
	var last error
	assert.Eventually(t, func() bool {
		last = carol.List(ctx, list, client.InNamespace("team-a"))
		return last == nil
	}, timeout, interval)
	require.NoError(t, last)
	assert.Equal(t, []string{"bert", "gpt", "bert"}, names(list))
	require.NoError(t, carol.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "gpt.00000002"}, run))
	err = carol.List(ctx, list, client.InNamespace("team-b"))
	assert.True(t, apierrors.IsForbidden(err), "another namespace: %v", err)
	err = carol.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "secret-model.00000004"}, run)
	assert.True(t, apierrors.IsForbidden(err), "another namespace's run: %v", err)
	err = carol.List(ctx, list)
	assert.True(t, apierrors.IsForbidden(err), "all namespaces: %v", err)
	err = historyClient(t, "dave").List(ctx, list, client.InNamespace("team-a"))
	assert.True(t, apierrors.IsForbidden(err), "runs without their TrainJobs: %v", err)
	assert.ErrorContains(t, err, "trainjobs.trainer.kubeflow.org")
	err = historyClient(t, "mallory").List(ctx, list, client.InNamespace("team-a"))
	assert.True(t, apierrors.IsForbidden(err), "a user without rights: %v", err)

	// kubectl trainjob history and usage read the same API.
	kubeconfig, err := cluster.Kubeconfig("trainjob-cli")
	require.NoError(t, err)
	plugin := func(args ...string) string {
		t.Helper()
		out := &bytes.Buffer{}
		code := cli.Run(ctx, append([]string{"--kubeconfig", kubeconfig, "-n", "team-a"}, args...), nil, out, out)
		require.Zero(t, code, "kubectl trainjob %v:\n%s", args, out)
		return out.String()
	}
	out := plugin("history")
	assert.Regexp(t, `(?m)^NAME\s+RUN\s+STATE\s+REASON\s+RUNTIME\s+CREATOR\s+NODES\s+GPU-HOURS\s+DURATION\s+AGE$`, out)
	assert.Regexp(t, `(?m)^bert\s+00000003\s+Running\s+-\s+torch-distributed\s+alice\s+2\s+8\.0\s+60m\s+8h`, out)
	assert.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 4, out)
	out = plugin("history", "-A", "--state", "Failed")
	assert.Regexp(t, `(?m)^team-a\s+gpt\s+00000002\s+Failed`, out)
	assert.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)
	out = plugin("history", "bert")
	assert.Regexp(t, `(?m)^Run:\s+bert\.00000003$`, out)
	assert.Regexp(t, `(?m)^Earlier runs:\s+1 `, out)
	assert.Regexp(t, `(?m)^GPU-hours:\s+8\.0$`, out)
	out = plugin("usage", "-A", "--by", "namespace", "--since", "30d")
	assert.Regexp(t, `(?m)^NAMESPACE\s+GPU-HOURS\s+NODE-HOURS\s+RUNS\s+FAILED\s+FAILURES BY REASON$`, out)
	assert.Regexp(t, `(?m)^team-a\s+24\.0\s+6\.0\s+3\s+1\s+-=1$`, out)
	assert.Regexp(t, `(?m)^team-b\s+8\.0\s+2\.0\s+1\s+0\s+-$`, out)
	out = plugin("usage", "--by", "creator")
	assert.Regexp(t, `(?m)^alice\s+24\.0`, out)
	failed := &bytes.Buffer{}
	code := cli.Run(ctx, []string{"--kubeconfig", kubeconfig, "-n", "team-a", "history", "nobody"}, nil, failed, failed)
	assert.Equal(t, 1, code)
	assert.Contains(t, failed.String(), `no run of a TrainJob "nobody" in team-a`)
	failed.Reset()
	code = cli.Run(ctx, []string{"--kubeconfig", kubeconfig, "usage", "--by", "image"}, nil, failed, failed)
	assert.Equal(t, 1, code)
	assert.Contains(t, failed.String(), `--by "image"`)
}

func ptrTo[T any](v T) *T { return &v }
