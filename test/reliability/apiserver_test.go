package reliability

import (
	"bytes"
	"context"
	"flag"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var restartTrainJobs = flag.Int("restart-trainjobs", 500, "TrainJobs submitted across the API server's restart")

// reconcileErrors reads the manager's count of reconciles that ended in an error.
func reconcileErrors(t *testing.T, metricsAddr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	m, err := testenv.ParseMetrics(buf.Bytes())
	require.NoError(t, err)
	return m.Value("controller_runtime_reconcile_total", map[string]string{"result": "error"})
}

// TestTheManagerRidesOutAnAPIServerRestart restarts the API server (same etcd, 5 s down) while
// TrainJobs of every framework arrive: the manager, never restarted, finishes them all, each
// child made exactly once. While the API server is away, its retries back off: it does not
// spin.
func TestTheManagerRidesOutAnAPIServerRestart(t *testing.T) {
	ns := utiltesting.NewNamespace(t, k8sClient, "restart")
	createGangRuntime(t)
	seen := watchChildren(t, ns)
	metricsAddr, err := testenv.FreeAddr()
	require.NoError(t, err)
	m := startManager(t, "manager", nil, "--metrics-bind-address="+metricsAddr, "--metrics-secure=false")
	defer m.Stop()

	jobs := mix(*restartTrainJobs, true)
	stopCompleting := completeJobSets(ns, jobs)
	defer stopCompleting()
	submittedAll := make(chan error, 1)
	go func() { submittedAll <- submit(context.Background(), ns, jobs, 10*time.Second) }()
	time.Sleep(3 * time.Second)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, timeout, interval, "the manager serves no metrics")
	before := reconcileErrors(t, metricsAddr)
	made := seen.count("JobSet")
	created := &trainer.TrainJobList{}
	require.NoError(t, k8sClient.List(context.Background(), created, client.InNamespace(ns)))
	pending := len(created.Items) - made
	const down = 5 * time.Second
	start := time.Now()
	require.NoError(t, cluster.RestartAPIServer(down))
	outage := time.Since(start)
	failed := reconcileErrors(t, metricsAddr) - before
	t.Logf("API server restarted with %d of %d JobSets made, %d TrainJobs waiting for theirs; away %s, during which %.0f reconciles failed",
		made, len(jobs), pending, outage.Round(100*time.Millisecond), failed)
	// A failed reconcile is retried after 5 ms, then twice as long each time: a TrainJob, in the
	// queues of at most two controllers (its framework's and the gang's), fails at most
	// log2(outage / 5 ms) + 1 times in each. Without the backoff it would fail thousands of times.
	perQueue := math.Log2(float64(outage)/float64(5*time.Millisecond)) + 1
	assert.LessOrEqual(t, failed, float64(max(pending, 1))*2*(perQueue+1), "reconciles failed more often than exponential backoff allows: a hot loop")

	require.NoError(t, <-submittedAll)
	converged(t, ns, jobs)
	stopCompleting()
	require.NoError(t, m.Exited(), "the manager")
	seen.check(t, ns, jobs)
}
