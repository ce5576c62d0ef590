package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/test/testenv"
)

// applySamples applies config/samples as a user does, into namespace ns, and returns the
// TrainJobs among them.
func applySamples(t *testing.T, ns string) []*trainer.TrainJob {
	t.Helper()
	tjs, err := testenv.ApplySamples(context.Background(), k8sClient, ns)
	require.NoError(t, err)
	return tjs
}

// TestSamplesRunToComplete applies every sample, among them a TrainJob of each shipped runtime,
// and watches each TrainJob run to Complete. KAI Scheduler is not part of the local cluster (it
// is not served by the Go module proxy), so the KAI sample's pods are checked to carry their
// queue and to wait for KAI, unbound.
func TestSamplesRunToComplete(t *testing.T) {
	ns := newNamespace(t)
	tjs := applySamples(t, ns)
	runtimes := map[string]bool{}
	for _, tj := range tjs {
		runtimes[tj.Spec.RuntimeRef.Name] = true
		if tj.Spec.RuntimeRef.Name == "torch-kai" {
			continue
		}
		t.Run(tj.Name, func(t *testing.T) { waitForComplete(t, tj) })
	}
	for _, shipped := range []string{"torch-distributed", "mpi-distributed", "xgboost-distributed", "jax-distributed", "flux-distributed"} {
		assert.True(t, runtimes[shipped], "no sample runs the shipped runtime %s", shipped)
	}

	t.Run("kai-example", func(t *testing.T) {
		tj := &trainer.TrainJob{}
		tj.Name, tj.Namespace = "kai-example", ns
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			ps := pods(c, tj)
			require.Len(c, ps, 2)
			for _, p := range ps {
				assert.Equal(c, "research", p.Labels[gang.KAIQueueLabel])
				assert.Equal(c, "kai-scheduler", p.Spec.SchedulerName)
			}
		}, timeout, interval)
		time.Sleep(2 * podRunTime)
		assert.Zero(t, bound(pods(t, tj)), "a pod of KAI's queue was bound, with no KAI scheduler in the cluster")
	})
}

func fromUnstructured(obj *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into)
}
