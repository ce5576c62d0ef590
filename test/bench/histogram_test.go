package bench

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainjob/operator/test/testenv"
)

// TestHistogramReadsTheAPIServersBuckets reads a histogram as the API server writes it, its +Inf
// bucket the count, summed over the series kept, and tells what share fell within a bound and
// which bound holds a quantile.
func TestHistogramReadsTheAPIServersBuckets(t *testing.T) {
	families, err := testenv.ParseMetrics([]byte(`# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mtrainjob.trainer.kubeflow.org",le="0.005"} 10
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mtrainjob.trainer.kubeflow.org",le="0.025"} 90
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mtrainjob.trainer.kubeflow.org",le="0.1"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mtrainjob.trainer.kubeflow.org",le="+Inf"} 100
apiserver_admission_webhook_admission_duration_seconds_sum{name="mtrainjob.trainer.kubeflow.org"} 1.5
apiserver_admission_webhook_admission_duration_seconds_count{name="mtrainjob.trainer.kubeflow.org"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="vjob.example.com",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="vjob.example.com",le="0.025"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="vjob.example.com",le="0.1"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="vjob.example.com",le="+Inf"} 50
apiserver_admission_webhook_admission_duration_seconds_sum{name="vjob.example.com"} 100
apiserver_admission_webhook_admission_duration_seconds_count{name="vjob.example.com"} 50
`))
	require.NoError(t, err)
	h := histogramOf(families, "apiserver_admission_webhook_admission_duration_seconds", operatorWebhook)
	assert.InDelta(t, 100, h.count(), 0)
	assert.InDelta(t, 0.9, h.within(0.025), 1e-9)
	assert.InDelta(t, 0.025, h.bound(0.9), 0)
	assert.InDelta(t, 0.1, h.bound(0.99), 0)

	before := histogram{0.005: 10, 0.025: 80, 0.1: 80, math.Inf(1): 80}
	since := h.since(before)
	assert.InDelta(t, 20, since.count(), 0)
	assert.InDelta(t, 0.5, since.within(0.025), 1e-9)
	assert.InDelta(t, 0.1, since.bound(0.99), 0)
	assert.True(t, math.IsInf(histogram{math.Inf(1): 5}.bound(0.99), 1), "nothing within a bound")
	assert.Zero(t, histogram{}.within(0.025))
	assert.True(t, math.IsNaN(histogram{0.005: 0, math.Inf(1): 0}.bound(0.99)), "no observations")
}
