package progress

import (
	"testing"

	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// Review, failing test: the same metrics in another order are no progress. A trainer or sidecar
// that builds its report's metrics from a map (Go's map order is random on purpose; a Python
// set, a JSON object re-serialised by another library) sends the same values in a new order at
// every heartbeat of a hung training: each one moves lastProgressTime, and the TrainJob is never
// called stalled. advanced compares the metrics as an ordered list (apiequality DeepEqual);
// compare them by name instead (the API's list is a set of names in practice).
func TestReviewReorderedMetricsAreNoProgress(t *testing.T) {
	last := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.3"}, {Name: "accuracy", Value: "0.9"}}}
	report := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40),
		Metrics: []trainer.Metric{{Name: "accuracy", Value: "0.9"}, {Name: "loss", Value: "0.3"}}}
	if advanced(last, report) {
		t.Error("the same metrics in another order advanced the progress: a hung trainer whose heartbeat builds them from a map is never stalled")
	}
}
