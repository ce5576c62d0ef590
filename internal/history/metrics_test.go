package history

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The history's section of docs/metrics.md lists exactly the metrics it registers, which the
// dashboard reads.
func TestTheHistorysMetricsAreDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/metrics.md")
	require.NoError(t, err)
	_, section, found := strings.Cut(string(data), "\n## The history's metrics\n")
	require.True(t, found, "docs/metrics.md has no section of the history's metrics")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\| (counter|gauge|histogram|summary) \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	assert.ElementsMatch(t, MetricNames, documented)
	RegisterMetrics()
	for _, name := range documented {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: fmt.Sprintf("probe of %s", t.Name())})
		if err := metrics.Registry.Register(probe); err == nil {
			metrics.Registry.Unregister(probe)
			t.Errorf("docs/metrics.md lists %s, which the history does not register", name)
		}
	}
}

// A run's use is counted once however often its record is written, from what was stored before;
// its end once.
func TestWrittenRecordsCountTheirUseOnce(t *testing.T) {
	ns := "metrics-" + t.Name()
	gpu := func() float64 { return testutil.ToFloat64(gpuSecondsRecorded.WithLabelValues(ns)) }
	node := func() float64 { return testutil.ToFloat64(nodeSecondsRecorded.WithLabelValues(ns)) }
	ended := func() float64 { return testutil.ToFloat64(runsEnded.WithLabelValues(ns, "Complete")) }
	finished := time.Now()

	running := &Record{UID: "a", Namespace: ns, State: "Running", GPUSeconds: 800, NodeSeconds: 100}
	countWritten(map[string]*Record{}, []*Record{running})
	assert.Equal(t, 800.0, gpu())
	assert.Equal(t, 100.0, node())

	later := &Record{UID: "a", Namespace: ns, State: "Complete", GPUSeconds: 1600, NodeSeconds: 200, Finished: &finished}
	countWritten(map[string]*Record{"a": running}, []*Record{later})
	assert.Equal(t, 1600.0, gpu(), "the second write adds what the run used since the first")
	assert.Equal(t, 200.0, node())
	assert.Equal(t, 1.0, ended())

	deleted := *later
	deleted.Deleted = &finished
	countWritten(map[string]*Record{"a": later}, []*Record{&deleted})
	assert.Equal(t, 1600.0, gpu(), "a record written again with the same use adds none")
	assert.Equal(t, 1.0, ended(), "a run ends once")
}
