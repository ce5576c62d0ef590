package progress

import (
	"strings"
	"testing"
)

// FuzzDecode feeds the progress endpoint's decoder arbitrary bodies: it never panics, and what it
// accepts fits status.trainerStatus's schema, so that no accepted report can be refused when it
// is written.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"trainerStatus":{"progressPercentage":40,"estimatedRemainingSeconds":720,"metrics":[{"name":"loss","value":"0.31"}]}}`,
		`{"trainerStatus":{"lastUpdatedTime":"2026-11-22T09:10:00Z"}}`,
		`{}`, `null`, `{"trainerStatus":null}`, `{"trainerStatus":{"progressPercentage":101}}`,
		`{"trainerStatus":{"metrics":[{"name":"","value":"1"}]}}`, `{"a":1}{"b":2}`, `[`, ``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := decode(strings.NewReader(body))
		if err != nil || req.TrainerStatus == nil {
			return
		}
		ts := req.TrainerStatus
		if p := ts.ProgressPercentage; p != nil && (*p < 0 || *p > 100) {
			t.Fatalf("accepted progressPercentage %d", *p)
		}
		if e := ts.EstimatedRemainingSeconds; e != nil && *e < 0 {
			t.Fatalf("accepted estimatedRemainingSeconds %d", *e)
		}
		if len(ts.Metrics) > 256 {
			t.Fatalf("accepted %d metrics", len(ts.Metrics))
		}
		for _, m := range ts.Metrics {
			if len(m.Name) < 1 || len(m.Name) > 64 || len(m.Value) < 1 || len(m.Value) > 64 {
				t.Fatalf("accepted metric %q=%q", m.Name, m.Value)
			}
		}
	})
}
