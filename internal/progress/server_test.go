package progress

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// A report advances the progress when what it says differs from the last one written; its time,
// the trainer's clock, does not count.
func TestAdvanced(t *testing.T) {
	last := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40), EstimatedRemainingSeconds: ptr.To[int32](600),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.3"}}, LastUpdatedTime: metav1.NewTime(time.Unix(1000, 0))}
	for name, tc := range map[string]struct {
		change func(*trainer.TrainerStatus)
		want   bool
	}{
		"the same report later":   {change: func(s *trainer.TrainerStatus) { s.LastUpdatedTime = metav1.NewTime(time.Unix(2000, 0)) }},
		"a new percentage":        {change: func(s *trainer.TrainerStatus) { s.ProgressPercentage = ptr.To[int32](41) }, want: true},
		"a new estimate alone":    {change: func(s *trainer.TrainerStatus) { s.EstimatedRemainingSeconds = ptr.To[int32](590) }},
		"a new metric value":      {change: func(s *trainer.TrainerStatus) { s.Metrics = []trainer.Metric{{Name: "loss", Value: "0.29"}} }, want: true},
		"the percentage left out": {change: func(s *trainer.TrainerStatus) { s.ProgressPercentage = nil }, want: true},
		"the metrics dropped":     {change: func(s *trainer.TrainerStatus) { s.Metrics = []trainer.Metric{} }, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			report := last.DeepCopy()
			tc.change(report)
			if got := advanced(last, report); got != tc.want {
				t.Errorf("advanced = %t, want %t", got, tc.want)
			}
		})
	}
	if !advanced(nil, last) {
		t.Error("the first report did not advance the progress")
	}
	if advanced(&trainer.TrainerStatus{}, &trainer.TrainerStatus{Metrics: []trainer.Metric{}}) {
		t.Error("an empty list of metrics differs from none")
	}
}
