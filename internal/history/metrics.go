package history

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The history's metrics (docs/metrics.md), served by the history program's metrics endpoint: the
// use recorded, counted as the records that hold it are committed, so that Prometheus sums what
// runs used by namespace without reading the database.
var (
	gpuSecondsRecorded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_history_gpu_seconds_total",
		Help: "GPU-seconds the runs of TrainJobs used (running time x nodes x GPUs per node), by namespace, added as their records are written.",
	}, []string{"namespace"})
	nodeSecondsRecorded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_history_node_seconds_total",
		Help: "Node-seconds the runs of TrainJobs used (running time x nodes), by namespace, added as their records are written.",
	}, []string{"namespace"})
	runsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainjob_history_runs_ended_total",
		Help: "Runs recorded as ended (finished, or their TrainJob deleted), by namespace and final state.",
	}, []string{"namespace", "state"})
	recordsWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "trainjob_history_records_written_total",
		Help: "Records written to the history's database.",
	})
	batchFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "trainjob_history_batch_failures_total",
		Help: "Batches of records that could not be written or whose TrainJobs could not be released; each is tried again.",
	})
	batchSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "trainjob_history_batch_seconds",
		Help:    "How long a batch of records takes: reading the stored ones, writing the changed ones in one transaction, releasing the deleted TrainJobs.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	})
	registerMetrics sync.Once
)

// MetricNames are the names of the history's metrics, for a test that checks docs/metrics.md.
var MetricNames = []string{
	"trainjob_history_gpu_seconds_total", "trainjob_history_node_seconds_total", "trainjob_history_runs_ended_total",
	"trainjob_history_records_written_total", "trainjob_history_batch_failures_total", "trainjob_history_batch_seconds",
}

// RegisterMetrics registers the history's metrics with controller-runtime's registry, once: the
// history program's, not the operator's manager's.
func RegisterMetrics() {
	registerMetrics.Do(func() {
		metrics.Registry.MustRegister(gpuSecondsRecorded, nodeSecondsRecorded, runsEnded, recordsWritten, batchFailures, batchSeconds)
	})
}

// countWritten counts the use and the ends that records written add to what was stored before.
func countWritten(prev map[string]*Record, written []*Record) {
	recordsWritten.Add(float64(len(written)))
	for _, rec := range written {
		p := prev[rec.UID]
		var gpu, node float64
		if p != nil {
			gpu, node = p.GPUSeconds, p.NodeSeconds
		}
		if d := rec.GPUSeconds - gpu; d > 0 {
			gpuSecondsRecorded.WithLabelValues(rec.Namespace).Add(d)
		}
		if d := rec.NodeSeconds - node; d > 0 {
			nodeSecondsRecorded.WithLabelValues(rec.Namespace).Add(d)
		}
		if rec.Ended() != nil && (p == nil || p.Ended() == nil) {
			runsEnded.WithLabelValues(rec.Namespace, rec.State).Inc()
		}
	}
}

func observeBatch(started time.Time, err error) {
	batchSeconds.Observe(time.Since(started).Seconds())
	if err != nil {
		batchFailures.Inc()
	}
}
