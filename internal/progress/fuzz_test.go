package progress

import (
	"strings"
	"testing"
	"unicode/utf8"
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
		`{"trainerStatus":{"metrics":[{"name":"ünïcødé-lôss-ünïcødé-lôss-ünïcødé-lôss-ünïcødé-lôss-ünïcødé-lôss-ünïc","value":"1"}]}}`,
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
			if n, v := utf8.RuneCountInString(m.Name), utf8.RuneCountInString(m.Value); n < 1 || n > 64 || v < 1 || v > 64 {
				t.Fatalf("accepted metric %q=%q", m.Name, m.Value)
			}
		}
	})
}
