package webhook

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestAdmittingATrainJobReadsNothingFromTheAPIServer: the webhooks find a TrainJob's runtime in
// the manager's cache, so admitting it costs the API server no read (a runtime the cache lacks
// yet is read from the API server: TestAMissingRuntimeIsAWarning).
func TestAdmittingATrainJobReadsNothingFromTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	clientset, err := kubernetes.NewForConfig(restCfg)
	require.NoError(t, err)
	gets := func() float64 {
		data, err := clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		require.NoError(t, err)
		families, err := testenv.ParseMetrics(data)
		require.NoError(t, err)
		return families.Value("apiserver_request_total", map[string]string{"verb": "GET", "resource": "clustertrainingruntimes"})
	}
	before := gets()
	for i := range 5 {
		tj := utiltesting.MakeTrainJob(fmt.Sprintf("job-%d", i), ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Suspend(true).Obj()
		require.NoError(t, k8sClient.Create(ctx, tj))
	}
	require.Zero(t, gets()-before, "GETs of ClusterTrainingRuntimes while 5 TrainJobs were admitted")
}
