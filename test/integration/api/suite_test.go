// Package api proves the trainer.kubeflow.org/v1alpha1 API against a real kube-apiserver: the
// CRDs install, the schema defaults land, invalid objects are rejected with a message that names
// the problem, and immutable fields stay put. No controller runs here.
package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var (
	k8sClient client.Client
	restCfg   *rest.Config
)

func TestMain(m *testing.M) {
	cluster, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8sClient, restCfg = cluster.Client, cluster.Env.Config
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string { return utiltesting.NewNamespace(t, k8sClient, "api") }

// getTable lists a resource of the trainer group in a namespace the way kubectl get does: as a
// server-side table built from the CRD's printer columns.
func getTable(t *testing.T, namespace, resource string) *metav1.Table {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(restCfg)
	require.NoError(t, err)
	url, err := url.JoinPath(restCfg.Host, "apis", trainer.GroupVersion.Group, trainer.GroupVersion.Version,
		"namespaces", namespace, resource)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equalf(t, http.StatusOK, resp.StatusCode, "GET %s", url)
	table := &metav1.Table{}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(table))
	return table
}
