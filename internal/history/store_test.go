package history

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/testing/postgres"
)

// engines opens a new, empty store for a test in each database the history runs on: a SQLite
// file, and a database of its own in one PostgreSQL server started for the whole test.
func engines(parent *testing.T) map[string]func(t *testing.T) *Store {
	var once sync.Once
	var server string
	var n atomic.Int32
	return map[string]func(t *testing.T) *Store{
		"sqlite": func(t *testing.T) *Store {
			s, err := Open(context.Background(), filepath.Join(t.TempDir(), "history.db"))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		},
		"postgres": func(t *testing.T) *Store {
			once.Do(func() { server = postgres.Start(parent) })
			require.NotEmpty(t, server, "PostgreSQL did not start")
			name := fmt.Sprintf("history%d", n.Add(1))
			admin, err := sql.Open("pgx", server)
			require.NoError(t, err)
			defer admin.Close()
			_, err = admin.Exec("CREATE DATABASE " + name)
			require.NoError(t, err)
			s, err := Open(context.Background(), strings.Replace(server, "/postgres?", "/"+name+"?", 1))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// run is a record as the writer makes them, for the store's tests.
func run(uid, namespace, name string, created time.Time, state string) *Record {
	r := &Record{
		UID: uid, Namespace: namespace, Name: name, Creator: "alice",
		Runtime:   Runtime{Kind: "ClusterTrainingRuntime", Name: "torch-distributed", Digest: "sha256:ab"},
		Framework: "torch", Image: "pytorch", Nodes: 2, GPUsPerNode: 4,
		Created: created, State: state, Observed: created.Add(time.Minute),
	}
	if state == trainer.TrainJobComplete || state == trainer.TrainJobFailed {
		r.Finished = ptrTime(created.Add(time.Hour))
		r.RunningSeconds = 3000
		r.NodeSeconds, r.GPUSeconds = 6000, 24000
		r.Observed = r.Finished.Add(time.Second)
	}
	return r
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	for engine, open := range engines(t) {
		t.Run(engine, func(t *testing.T) {
			t.Run("a record reads back as written, and opening it again migrates nothing", func(t *testing.T) {
				s := open(t)
				r := run("u1", "team-a", "bert", t0, trainer.TrainJobFailed)
				r.Labels = map[string]string{"team": "nlp"}
				r.Admitted, r.FirstRunning = ptrTime(t0.Add(time.Minute)), ptrTime(t0.Add(2*time.Minute))
				r.Reason, r.Message = "PodFailed", "rank 0 exited with 1"
				r.Failure = &trainer.PodFailure{Pod: "bert-node-0-0", Rank: ptr.To[int32](0), ExitCode: ptr.To[int32](1), Reason: "Error", Time: metaTime(t0.Add(50 * time.Minute))}
				r.RestartCauses = []Cause{{Time: t0.Add(30 * time.Minute), Reason: "NCCLError", Node: "n1"}}
				r.Progress = []Point{{Time: t0.Add(10 * time.Minute), Percent: ptr.To[int32](10), Metrics: []trainer.Metric{{Name: "loss", Value: "0.5"}}}}
				require.NoError(t, s.Put(ctx, []*Record{r}))
				got, err := s.Get(ctx, "u1")
				require.NoError(t, err)
				if diff := cmp.Diff(r, got); diff != "" {
					t.Errorf("the record read back differs (-written +read):\n%s", diff)
				}
				_, err = s.Get(ctx, "nope")
				require.ErrorIs(t, err, ErrNotFound)
			})

			t.Run("a label selector too large is refused as one", func(t *testing.T) {
				s := open(t)
				values := make([]string, 101)
				for i := range values {
					values[i] = fmt.Sprint("v", i)
				}
				_, err := s.List(ctx, Query{Labels: mustSelector(t, "team in ("+strings.Join(values, ",")+")")})
				require.ErrorIs(t, err, ErrBadSelector)
				_, err = s.List(ctx, Query{Labels: mustSelector(t, "team in ("+strings.Join(values[:100], ",")+")")})
				require.NoError(t, err)
			})

			t.Run("a NUL in a runtime's name, which PostgreSQL's text refuses, is written and read back", func(t *testing.T) {
				s := open(t)
				r := run("u1", "team-a", "bert", t0, trainer.TrainJobRunning)
				r.Runtime.Name = "torch\x00distributed"
				good := run("u2", "team-a", "gpt", t0, trainer.TrainJobRunning)
				require.NoError(t, s.Put(ctx, []*Record{r, good}))
				got, err := s.Get(ctx, "u1")
				require.NoError(t, err)
				assert.Equal(t, r.Runtime.Name, got.Runtime.Name, "the record keeps it")
				page, err := s.List(ctx, Query{Runtime: "torchdistributed"})
				require.NoError(t, err)
				assert.Len(t, page.Records, 1, "the column drops it")
			})

			t.Run("a newer observation replaces a record, an older one or an unended one after its end does not", func(t *testing.T) {
				s := open(t)
				running := run("u1", "ns", "a", t0, trainer.TrainJobRunning)
				running.Labels = map[string]string{"v": "1", "gone": "x"}
				require.NoError(t, s.Put(ctx, []*Record{running}))

				done := run("u1", "ns", "a", t0, trainer.TrainJobComplete)
				done.Labels = map[string]string{"v": "2"}
				require.NoError(t, s.Put(ctx, []*Record{done}))
				requireState(t, s, "u1", trainer.TrainJobComplete)

				stale := run("u1", "ns", "a", t0, trainer.TrainJobRunning)
				stale.Observed = done.Observed.Add(time.Hour) // later, but not ended: a replay
				require.NoError(t, s.Put(ctx, []*Record{stale}))
				requireState(t, s, "u1", trainer.TrainJobComplete)

				older := run("u1", "ns", "a", t0, trainer.TrainJobFailed)
				older.Observed = done.Observed.Add(-time.Second)
				require.NoError(t, s.Put(ctx, []*Record{older}))
				requireState(t, s, "u1", trainer.TrainJobComplete)

				page, err := s.List(ctx, Query{Labels: labels.SelectorFromSet(labels.Set{"v": "2"})})
				require.NoError(t, err)
				require.Len(t, page.Records, 1, "the labels follow the record")
				page, err = s.List(ctx, Query{Labels: mustSelector(t, "gone")})
				require.NoError(t, err)
				require.Empty(t, page.Records, "a label the TrainJob lost is no longer the record's")
			})

			t.Run("filters and pages", func(t *testing.T) {
				s := open(t)
				var all []*Record
				for i := range 7 {
					ns := []string{"a", "b"}[i%2]
					state := []string{trainer.TrainJobComplete, trainer.TrainJobFailed, trainer.TrainJobRunning}[i%3]
					r := run(fmt.Sprintf("u%d", i), ns, fmt.Sprintf("job%d", i%4), t0.Add(time.Duration(i/2)*time.Minute), state)
					r.Labels = map[string]string{"i": fmt.Sprint(i), "parity": []string{"even", "odd"}[i%2]}
					if i == 3 {
						r.Creator, r.Runtime.Name = "bob", "mpi-distributed"
					}
					all = append(all, r)
				}
				require.NoError(t, s.Put(ctx, all))

				uids := func(q Query) []string {
					t.Helper()
					page, err := s.List(ctx, q)
					require.NoError(t, err)
					var out []string
					for _, r := range page.Records {
						out = append(out, r.UID)
					}
					return out
				}
				// Newest first; equal creation times by UID, last first.
				require.Equal(t, []string{"u6", "u5", "u4", "u3", "u2", "u1", "u0"}, uids(Query{}))
				require.Equal(t, []string{"u6", "u4", "u2", "u0"}, uids(Query{Namespace: "a"}))
				require.Equal(t, []string{"u5", "u1"}, uids(Query{Name: "job1"}))
				require.Equal(t, []string{"u4", "u1"}, uids(Query{States: []string{trainer.TrainJobFailed}}))
				require.Equal(t, []string{"u5", "u4", "u2", "u1"}, uids(Query{States: []string{trainer.TrainJobFailed, trainer.TrainJobRunning}}))
				require.Equal(t, []string{"u3"}, uids(Query{Runtime: "mpi-distributed"}))
				require.Equal(t, []string{"u3"}, uids(Query{Creator: "bob"}))
				require.Equal(t, []string{"u6", "u5", "u4"}, uids(Query{Since: t0.Add(2 * time.Minute)}))
				require.Equal(t, []string{"u5", "u3", "u1"}, uids(Query{Labels: mustSelector(t, "parity=odd")}))
				require.Equal(t, []string{"u6", "u4", "u2", "u0"}, uids(Query{Labels: mustSelector(t, "parity!=odd")}))
				require.Equal(t, []string{"u2", "u1"}, uids(Query{Labels: mustSelector(t, "i in (1,2)")}))
				require.Equal(t, []string{"u6", "u5", "u4", "u3", "u0"}, uids(Query{Labels: mustSelector(t, "i notin (1,2)")}))
				require.Equal(t, []string{"u4"}, uids(Query{Labels: mustSelector(t, "parity=even,i=4"), Namespace: "a"}))
				require.Empty(t, uids(Query{Labels: mustSelector(t, "!parity")}))
				require.Empty(t, uids(Query{Labels: labels.SelectorFromValidatedSet(labels.Set{"parity": "'; DROP TABLE runs; --"})}))
				require.Len(t, uids(Query{}), 7, "a selector's values are values, not SQL")
				_, err := s.List(ctx, Query{Labels: mustSelector(t, "i>1")})
				require.ErrorContains(t, err, "i>1")

				var paged []string
				q := Query{Limit: 2}
				for pages := 0; ; pages++ {
					require.Less(t, pages, 5, "paging does not end")
					page, err := s.List(ctx, q)
					require.NoError(t, err)
					require.LessOrEqual(t, len(page.Records), 2)
					for _, r := range page.Records {
						paged = append(paged, r.UID)
					}
					if page.Continue == "" {
						break
					}
					q.Continue = page.Continue
				}
				require.Equal(t, uids(Query{}), paged, "pages hold every run once, in order")

				_, err = s.List(ctx, Query{Continue: "garbage!"})
				require.ErrorIs(t, err, ErrBadContinue)
			})

			t.Run("usage sums what runs used, a running one's use so far", func(t *testing.T) {
				s := open(t)
				failed := run("u1", "a", "x", t0, trainer.TrainJobFailed)
				failed.Reason = "PodFailed"
				failed2 := run("u2", "a", "y", t0, trainer.TrainJobFailed)
				failed2.Reason = "DeadlineExceeded"
				done := run("u3", "b", "z", t0, trainer.TrainJobComplete)
				running := run("u4", "a", "w", t0, trainer.TrainJobRunning)
				running.RunningSeconds, running.RunningSince = 100, ptrTime(t0.Add(time.Hour))
				running.NodeSeconds, running.GPUSeconds = 200, 800
				old := run("u5", "a", "v", t0.Add(-100*24*time.Hour), trainer.TrainJobComplete)
				require.NoError(t, s.Put(ctx, []*Record{failed, failed2, done, running, old}))

				usage, err := s.UsageBy(ctx, UsageQuery{By: "namespace", Since: t0.Add(-30 * 24 * time.Hour), Now: t0.Add(2 * time.Hour)})
				require.NoError(t, err)
				want := []Usage{
					{Key: "a", Runs: 3, Failed: 2, NodeSeconds: 6000*2 + 200 + 3600*2, GPUSeconds: 24000*2 + 800 + 3600*2*4,
						FailuresByReason: map[string]int64{"PodFailed": 1, "DeadlineExceeded": 1}},
					{Key: "b", Runs: 1, NodeSeconds: 6000, GPUSeconds: 24000, FailuresByReason: map[string]int64{}},
				}
				if diff := cmp.Diff(want, usage); diff != "" {
					t.Errorf("usage by namespace (-want +got):\n%s", diff)
				}
				usage, err = s.UsageBy(ctx, UsageQuery{By: "runtime", Namespace: "b", Since: t0, Now: t0})
				require.NoError(t, err)
				require.Len(t, usage, 1)
				require.Equal(t, "torch-distributed", usage[0].Key)
				_, err = s.UsageBy(ctx, UsageQuery{By: "image"})
				require.ErrorContains(t, err, `"image"`)
			})

			t.Run("retention forgets the runs of deleted TrainJobs by age and by count, never another", func(t *testing.T) {
				s := open(t)
				var records []*Record
				for i := range 5 {
					r := run(fmt.Sprintf("u%d", i), "a", "x", t0.Add(time.Duration(i)*24*time.Hour), trainer.TrainJobComplete)
					r.Deleted = ptrTime(r.Finished.Add(time.Hour))
					records = append(records, r)
				}
				running := run("running", "a", "x", t0.Add(-1000*24*time.Hour), trainer.TrainJobRunning)
				ended := run("ended", "a", "x", t0.Add(-1000*24*time.Hour), trainer.TrainJobComplete) // its TrainJob still there
				records = append(records, running, ended)
				require.NoError(t, s.Put(ctx, records))

				n, err := s.Prune(ctx, Retention{MaxAge: 48 * time.Hour}, t0.Add(4*24*time.Hour+time.Hour))
				require.NoError(t, err)
				require.EqualValues(t, 2, n, "u0 and u1 were deleted more than 48 h before")
				n, err = s.Prune(ctx, Retention{MaxRuns: 2}, t0)
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "of u2..u4, the two deleted last stay")
				page, err := s.List(ctx, Query{})
				require.NoError(t, err)
				var left []string
				for _, r := range page.Records {
					left = append(left, r.UID)
				}
				require.Equal(t, []string{"u4", "u3", "running", "ended"}, left)
				var labelRows int
				require.NoError(t, s.db.QueryRow("SELECT COUNT(*) FROM run_labels WHERE uid NOT IN (SELECT uid FROM runs)").Scan(&labelRows))
				require.Zero(t, labelRows, "a forgotten run's labels go with it")
			})

			t.Run("migrating from before the deletion's column fills it in from each record", func(t *testing.T) {
				s := open(t)
				dialect := goose.DialectSQLite3
				if s.postgres {
					dialect = goose.DialectPostgres
				}
				provider, err := migrator(s.db, dialect)
				require.NoError(t, err)
				_, err = provider.DownTo(ctx, 2)
				require.NoError(t, err)
				deleted := run("deleted", "a", "x", t0, trainer.TrainJobComplete)
				deleted.Deleted = ptrTime(t0.Add(2*time.Hour + 1999600*time.Microsecond)) // ...01.999 as Go's milliseconds
				deleted.Message = "a NUL \x00 in its message"                             // escaped in the JSON, refused by PostgreSQL's jsonb
				there := run("there", "a", "y", t0, trainer.TrainJobComplete)
				there.Labels = map[string]string{"deleted": "2026-11-01T12:00:00Z"}
				there.Message = `"deleted":"2026-11-01T12:00:00Z"`
				records := []*Record{deleted, there}
				for i := range 2100 { // more than a batch
					r := run(fmt.Sprintf("bulk-%04d", i), "a", "z", t0, trainer.TrainJobComplete)
					r.Deleted = ptrTime(t0.Add(time.Duration(i) * time.Second))
					records = append(records, r)
				}
				tx, err := s.db.BeginTx(ctx, nil)
				require.NoError(t, err)
				for _, r := range records {
					body, err := encode(r)
					require.NoError(t, err)
					_, err = tx.ExecContext(ctx, `INSERT INTO runs (uid, namespace, name, creator, runtime_kind, runtime_name, framework, queue,
    state, reason, created_ms, ended_ms, nodes, gpus_per_node, node_seconds, gpu_seconds, observed_ms, body)
VALUES ($1, 'a', 'x', '', '', '', '', '', '', '', 0, $2, 0, 0, 0, 0, 0, $3)`, r.UID, r.Ended().UnixMilli(), body)
					require.NoError(t, err)
				}
				require.NoError(t, tx.Commit())
				_, err = provider.Up(ctx)
				require.NoError(t, err)
				got := map[string]*int64{}
				rows, err := s.db.QueryContext(ctx, "SELECT uid, deleted_ms FROM runs")
				require.NoError(t, err)
				for rows.Next() {
					var uid string
					var ms *int64
					require.NoError(t, rows.Scan(&uid, &ms))
					got[uid] = ms
				}
				require.NoError(t, rows.Err())
				want := map[string]*int64{}
				for _, r := range records {
					want[r.UID] = millis(r.Deleted)
				}
				require.Equal(t, want, got)
				require.EqualValues(t, t0.Add(2*time.Hour+1999*time.Millisecond).UnixMilli(), *got["deleted"])

				// Stopped after the column was added, before the migration was recorded: run again.
				for _, statement := range []string{"DELETE FROM goose_db_version WHERE version_id >= 3", "DROP TABLE history_meta"} {
					_, err = s.db.ExecContext(ctx, statement)
					require.NoError(t, err)
				}
				_, err = s.db.ExecContext(ctx, "UPDATE runs SET deleted_ms = NULL WHERE uid = 'bulk-2000'")
				require.NoError(t, err)
				_, err = provider.Up(ctx)
				require.NoError(t, err)
				var ms int64
				require.NoError(t, s.db.QueryRowContext(ctx, "SELECT deleted_ms FROM runs WHERE uid = 'bulk-2000'").Scan(&ms))
				require.Equal(t, *millis(records[2002].Deleted), ms)

				// Down and up again, with the runs in the table.
				_, err = provider.DownTo(ctx, 2)
				require.NoError(t, err)
				_, err = provider.Up(ctx)
				require.NoError(t, err)
				var filled int
				require.NoError(t, s.db.QueryRowContext(ctx, "SELECT COUNT(deleted_ms) FROM runs").Scan(&filled))
				require.Equal(t, len(records)-1, filled)
			})

			t.Run("a record too big to keep whole loses older progress, not its end", func(t *testing.T) {
				s := open(t)
				r := run("big", "a", "x", t0, trainer.TrainJobComplete)
				long := strings.Repeat("x", maxText)
				for i := range MaxProgressPoints {
					var metrics []trainer.Metric
					for j := range MaxMetrics {
						metrics = append(metrics, trainer.Metric{Name: fmt.Sprint("m", j), Value: long})
					}
					r.Progress = append(r.Progress, Point{Time: t0.Add(time.Duration(i) * time.Minute), Metrics: metrics})
				}
				require.NoError(t, s.Put(ctx, []*Record{r}))
				var size int
				require.NoError(t, s.db.QueryRow("SELECT LENGTH(body) FROM runs").Scan(&size))
				require.LessOrEqual(t, size, MaxRecordBytes)
				got, err := s.Get(ctx, "big")
				require.NoError(t, err)
				require.NotEmpty(t, got.Progress)
				require.Equal(t, r.Progress[len(r.Progress)-1].Time, got.Progress[len(got.Progress)-1].Time)
			})
		})
	}
}

func requireState(t *testing.T, s *Store, uid, state string) {
	t.Helper()
	r, err := s.Get(context.Background(), uid)
	require.NoError(t, err)
	require.Equal(t, state, r.State)
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	require.NoError(t, err)
	return sel
}

// PostgreSQL given as libpq's key=value settings is refused, its password unsaid: it would be
// taken for a SQLite file's name.
func TestKeyValueSettingsAreRefused(t *testing.T) {
	_, err := Open(context.Background(), "host=db.example.com user=history password=s3cret dbname=history")
	require.ErrorContains(t, err, "postgres:// URL")
	assert.NotContains(t, err.Error(), "s3cret")
}
