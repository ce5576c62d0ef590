package progress

import (
	"testing"

	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// The same metrics in another order are no progress: a trainer or sidecar that builds its
// report's metrics from a map sends the same values in a new order at every heartbeat of a hung
// training. Nor is a new estimate of the time left alone, which a heartbeat may recompute from the
// clock.
func TestReorderedMetricsAreNoProgress(t *testing.T) {
	last := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.3"}, {Name: "accuracy", Value: "0.9"}}}
	report := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40),
		Metrics: []trainer.Metric{{Name: "accuracy", Value: "0.9"}, {Name: "loss", Value: "0.3"}}}
	if advanced(last, report) {
		t.Error("the same metrics in another order advanced the progress: a hung trainer whose heartbeat builds them from a map is never stalled")
	}
}

func TestANewEstimateAloneIsNoProgress(t *testing.T) {
	last := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40), EstimatedRemainingSeconds: ptr.To[int32](600)}
	report := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40), EstimatedRemainingSeconds: ptr.To[int32](590)}
	if advanced(last, report) {
		t.Error("a new estimate alone advanced the progress")
	}
	report.Metrics = []trainer.Metric{{Name: "loss", Value: "0.3"}}
	if !advanced(last, report) {
		t.Error("a new metric did not advance the progress")
	}
}
