package history

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/testing/postgres"
)

var benchRecords = flag.Int("history-records", 1_000_000, "How many records BenchmarkTheHistoryAtSize fills each engine with.")

// Shape of the history the benchmark fills: a year's runs of a large platform.
const (
	benchNamespaces = 100
	benchRuntimes   = 10
	benchCreators   = 500
	benchTeams      = 20
	benchDays       = 180
)

// benchRecord is the i-th run of the filled history: most complete, a fifth failed, some
// running; each with a few progress points and metrics, labels of its team and project.
func benchRecord(i int, now time.Time, rng *rand.Rand) *Record {
	created := now.Add(-time.Duration(rng.Int64N(int64(benchDays * 24 * time.Hour))))
	r := &Record{
		UID:       fmt.Sprintf("%08x-bench-%d", rng.Uint32(), i),
		Namespace: fmt.Sprintf("team-%d", rng.IntN(benchNamespaces)),
		Name:      fmt.Sprintf("run-%d", i),
		Labels:    map[string]string{"team": fmt.Sprintf("t%d", rng.IntN(benchTeams)), "project": fmt.Sprintf("p%d", rng.IntN(200))},
		Creator:   fmt.Sprintf("user-%d", rng.IntN(benchCreators)),
		Runtime:   Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: fmt.Sprintf("runtime-%d", rng.IntN(benchRuntimes)), Digest: "sha256:0123456789abcdef"},
		Framework: "torch", Image: "registry.example.com/train/llm:2026.11", Nodes: 4, ProcsPerNode: "auto", GPUsPerNode: 8,
		Created: created, State: trainer.TrainJobComplete, Reason: "AllJobsCompleted",
		RunningSeconds: 3600, NodeSeconds: 4 * 3600, GPUSeconds: 32 * 3600, Observed: now,
	}
	switch p := rng.IntN(10); {
	case p < 2:
		r.State, r.Reason, r.Message = trainer.TrainJobFailed, "FailedJobs", "jobset failed due to one or more job failures"
		r.Failure = &trainer.PodFailure{Pod: r.Name + "-node-0-0", Reason: "Error", ExitCode: ptr.To[int32](1), Node: "node-3"}
	case p < 3:
		r.State, r.Reason = trainer.TrainJobRunning, "NodesReady"
	}
	if r.State != trainer.TrainJobRunning {
		ended := created.Add(time.Hour)
		r.Finished = &ended
	}
	for k := range 8 {
		r.Progress = append(r.Progress, Point{Time: created.Add(time.Duration(k) * 7 * time.Minute), Percent: ptr.To(int32(k * 12)),
			Metrics: []trainer.Metric{{Name: "loss", Value: fmt.Sprintf("%.3f", 2/float64(k+1))}}})
	}
	r.FinalMetrics = []trainer.Metric{{Name: "loss", Value: "0.250"}, {Name: "accuracy", Value: "0.91"}}
	return r
}

// BenchmarkTheHistoryAtSize fills SQLite and PostgreSQL (started by the benchmark) with
// -history-records runs, written as the recorder writes them (batches of MaxBatch), and then
// times the pages users ask for, each against a floor measured in the same run: the plain
// indexed query of a namespace's newest 50 rows, their bodies read but not decoded. It reports
// the writer's rate while filling (records/s, into the history as it grows) and, per query, its
// milliseconds a page and its ratio to the floor.
func BenchmarkTheHistoryAtSize(b *testing.B) {
	ctx := context.Background()
	for _, engine := range []string{"sqlite", "postgres"} {
		url := filepath.Join(b.TempDir(), "history.db")
		if engine == "postgres" {
			url = postgres.Start(b)
		}
		store, err := Open(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		now := time.Now()
		rng := rand.New(rand.NewPCG(1, 2))
		started, batch := time.Now(), make([]*Record, 0, MaxBatch)
		lastTenth := time.Now()
		for i := range *benchRecords {
			batch = append(batch, benchRecord(i, now, rng))
			if len(batch) == MaxBatch || i == *benchRecords-1 {
				if err := store.Put(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
			if i+1 == *benchRecords*9/10 {
				lastTenth = time.Now()
			}
		}
		fill := time.Since(started)
		// As the recorder's hourly Optimize (and PostgreSQL's autovacuum) leave the statistics.
		if err := store.Optimize(ctx); err != nil {
			b.Fatal(err)
		}
		tenth := time.Since(lastTenth)
		b.Logf("%s: %d records written in %s (the last tenth in %s)", engine, *benchRecords, fill.Round(time.Second), tenth.Round(time.Millisecond))
		writeRate := float64(*benchRecords-*benchRecords*9/10) / tenth.Seconds()

		floor := func() error {
			rows, err := store.db.QueryContext(ctx, `SELECT body FROM runs WHERE namespace = $1 ORDER BY created_ms DESC, uid DESC LIMIT 50`, "team-7")
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var body string
				if err := rows.Scan(&body); err != nil {
					return err
				}
			}
			return rows.Err()
		}
		team := labels.SelectorFromSet(labels.Set{"team": "t3"})
		monthAgo := now.Add(-30 * 24 * time.Hour)
		page2 := func(q Query) (*Page, error) {
			first, err := store.List(ctx, q)
			if err != nil {
				return nil, err
			}
			q.Continue = first.Continue
			return store.List(ctx, q)
		}
		queries := []struct {
			name string
			run  func() error
		}{
			{"floor", floor},
			{"namespace", list(ctx, store, Query{Namespace: "team-7", Limit: 50})},
			{"namespace-failed-runtime-team-30d", list(ctx, store, Query{Namespace: "team-7", States: []string{trainer.TrainJobFailed},
				Runtime: "runtime-3", Labels: team, Since: monthAgo, Limit: 50})},
			{"all-failed-team", list(ctx, store, Query{States: []string{trainer.TrainJobFailed}, Labels: team, Limit: 50})},
			{"all-creator", list(ctx, store, Query{Creator: "user-42", Limit: 50})},
			{"all-runtime-30d", list(ctx, store, Query{Runtime: "runtime-3", Since: monthAgo, Limit: 50})},
			{"all-name", list(ctx, store, Query{Name: "run-4242", Limit: 50})},
			{"namespace-second-page", func() error { _, err := page2(Query{Namespace: "team-7", Limit: 50}); return err }},
		}
		var floorPerOp float64
		for _, q := range queries {
			b.Run(engine+"/"+q.name, func(b *testing.B) {
				if err := q.run(); err != nil { // warm, and fail early
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if err := q.run(); err != nil {
						b.Fatal(err)
					}
				}
				perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				if q.name == "floor" {
					floorPerOp = perOp
				}
				b.ReportMetric(perOp/1e6, "ms/page")
				b.ReportMetric(perOp/floorPerOp, "x-floor")
				b.ReportMetric(writeRate, "written-records/s")
			})
		}
	}
}

func list(ctx context.Context, store *Store, q Query) func() error {
	return func() error {
		_, err := store.List(ctx, q)
		return err
	}
}
