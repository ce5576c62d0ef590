package history

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	_ "modernc.org/sqlite" // registers "sqlite"
)

// MaxRecordBytes bounds a record as stored: a record whose JSON is larger loses its progress
// series' older points until it fits.
const MaxRecordBytes = 64 << 10

// Store keeps records in a database: SQLite in a file, or PostgreSQL.
type Store struct {
	db       *sql.DB
	postgres bool
	// readers holds a slot for each read of the API (List, Get, UsageBy) in flight: they take at
	// most maxConnections-2 of the connections, so that the writer, whom deleted TrainJobs wait
	// for, always has one, however many users list at once.
	readers chan struct{}
}

// maxConnections bounds the history's connections to its database (PostgreSQL's default
// max_connections is 100, shared with everything else on it).
const maxConnections = 16

// Open opens the database at location and brings its schema up to date: a PostgreSQL URL
// (postgres:// or postgresql://), else a SQLite file, as a path or a sqlite: URL.
func Open(ctx context.Context, location string) (*Store, error) {
	s := &Store{}
	var dialect goose.Dialect
	var opts []goose.ProviderOption
	switch {
	case strings.HasPrefix(location, "postgres://"), strings.HasPrefix(location, "postgresql://"):
		db, err := sql.Open("pgx", location)
		if err != nil {
			return nil, fmt.Errorf("opening PostgreSQL: %w", err)
		}
		s.db, s.postgres, dialect = db, true, goose.DialectPostgres
		// Replicas that start together migrate one at a time.
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case strings.HasPrefix(strings.TrimSpace(location), "host=") || strings.Contains(location, "password="):
		// libpq's key=value form would be taken for a file's name, and its password logged.
		return nil, errors.New("give PostgreSQL's location as a postgres:// URL, not as key=value settings")
	default:
		path := strings.TrimPrefix(strings.TrimPrefix(location, "sqlite://"), "sqlite:")
		if path == "" {
			return nil, errors.New("a history database needs a location: a file for SQLite, or a postgres:// URL")
		}
		// WAL lets readers read while the writer writes; foreign keys remove a run's labels
		// with it; a writer waits for another's lock instead of failing; 32 MiB of pages cached
		// (SQLite's default 2 MiB makes every write of a large history read its indexes' pages
		// from the file again).
		dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)" +
			"&_pragma=cache_size(-32768)"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("opening SQLite %s: %w", path, err)
		}
		s.db, dialect = db, goose.DialectSQLite3
	}
	s.db.SetMaxOpenConns(maxConnections)
	s.readers = make(chan struct{}, maxConnections-2)
	provider, err := migrator(s.db, dialect, opts...)
	if err != nil {
		s.db.Close()
		return nil, err
	}
	if _, err := provider.Up(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("migrating the history database (%s): %w", Redact(location), err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Optimize brings the database's statistics up to date, which its query planner picks indexes
// by: without them, a page of a few filters may read a large part of the history. The
// recorder calls it hourly, after the retention's pruning.
func (s *Store) Optimize(ctx context.Context) error {
	statement := "PRAGMA optimize=0x10002"
	if s.postgres {
		statement = "ANALYZE runs, run_labels"
	}
	_, err := s.db.ExecContext(ctx, statement)
	return err
}

// Redact is a database's location without its password, for errors and logs.
func Redact(location string) string {
	if u, err := url.Parse(location); err == nil && u.User != nil {
		return u.Redacted()
	}
	return location
}

// Put writes records in one transaction, each replacing the stored record of its UID unless
// the stored one is newer (observed later) or ended where the new one has not. It writes them
// putChunk at a time, a statement each, and their labels the same way: a few round trips a
// batch, not three a record (on PostgreSQL, over a network, the round trips are the writer's
// cost).
func (s *Store) Put(ctx context.Context, records []*Record) error {
	_, err := s.put(ctx, records)
	return err
}

// put is Put, and says which of the records it wrote (by UID): the others' stored records were
// newer.
func (s *Store) put(ctx context.Context, records []*Record) (written map[string]bool, err error) {
	records = latestOfEachUID(records)
	if len(records) == 0 {
		return nil, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after a commit it does nothing
	written = map[string]bool{}
	for chunk := range slices.Chunk(records, putChunk) {
		if err := upsertRuns(ctx, tx, chunk, written); err != nil {
			return nil, err
		}
	}
	// The labels of the records written, replaced whole.
	var uids []any
	var rows [][3]any
	for _, r := range records {
		if !written[r.UID] {
			continue // the stored record is newer
		}
		uids = append(uids, text(r.UID))
		for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
			rows = append(rows, [3]any{text(r.UID), text(k), text(r.Labels[k])})
		}
	}
	for chunk := range slices.Chunk(uids, putChunk*3) {
		if _, err := tx.ExecContext(ctx, "DELETE FROM run_labels WHERE uid IN ("+marks(1, len(chunk))+")", chunk...); err != nil {
			return nil, fmt.Errorf("replacing the labels of %d records: %w", len(chunk), err)
		}
	}
	for chunk := range slices.Chunk(rows, putChunk*3) {
		values := make([]string, len(chunk))
		args := make([]any, 0, 3*len(chunk))
		for i, row := range chunk {
			values[i] = "(" + marks(len(args)+1, 3) + ")"
			args = append(args, row[:]...)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO run_labels (uid, label_key, label_value) VALUES "+strings.Join(values, ", "), args...); err != nil {
			return nil, fmt.Errorf("writing the labels of records: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return written, nil
}

// putChunk is how many records one statement writes: 20 parameters each, well within SQLite's
// 32,766 and PostgreSQL's 65,535.
const putChunk = 100

// latestOfEachUID keeps, of records with the same UID, the one observed last: one statement may
// not change a row twice.
func latestOfEachUID(records []*Record) []*Record {
	latest := make(map[string]int, len(records))
	out := records[:0:0]
	for _, r := range records {
		if i, ok := latest[r.UID]; ok {
			if r.Observed.After(out[i].Observed) {
				out[i] = r
			}
			continue
		}
		latest[r.UID] = len(out)
		out = append(out, r)
	}
	return out
}

// upsertRuns writes the runs of records in one statement, each unless the stored one is newer,
// and marks in written the UIDs it wrote.
func upsertRuns(ctx context.Context, tx *sql.Tx, records []*Record, written map[string]bool) error {
	const columns = 20
	values := make([]string, len(records))
	args := make([]any, 0, columns*len(records))
	for i, r := range records {
		body, err := encode(r)
		if err != nil {
			return err
		}
		values[i] = "(" + marks(len(args)+1, columns) + ")"
		args = append(args, text(r.UID), text(r.Namespace), text(r.Name), text(r.Creator), text(r.Runtime.Kind), text(r.Runtime.Name),
			text(r.Framework), text(r.Queue), text(r.State), text(r.Reason), millis(&r.Created), millis(r.Ended()), millis(r.RunningSince),
			millis(r.Deleted), r.Nodes, r.GPUsPerNode, r.NodeSeconds, r.GPUSeconds, r.Observed.UnixMilli(), body)
	}
	rows, err := tx.QueryContext(ctx, `
INSERT INTO runs (uid, namespace, name, creator, runtime_kind, runtime_name, framework, queue, state, reason,
    created_ms, ended_ms, running_since_ms, deleted_ms, nodes, gpus_per_node, node_seconds, gpu_seconds, observed_ms, body)
VALUES `+strings.Join(values, ", ")+`
ON CONFLICT (uid) DO UPDATE SET
    namespace = excluded.namespace, name = excluded.name, creator = excluded.creator,
    runtime_kind = excluded.runtime_kind, runtime_name = excluded.runtime_name,
    framework = excluded.framework, queue = excluded.queue, state = excluded.state,
    reason = excluded.reason, created_ms = excluded.created_ms, ended_ms = excluded.ended_ms,
    running_since_ms = excluded.running_since_ms, deleted_ms = excluded.deleted_ms, nodes = excluded.nodes,
    gpus_per_node = excluded.gpus_per_node, node_seconds = excluded.node_seconds,
    gpu_seconds = excluded.gpu_seconds, observed_ms = excluded.observed_ms, body = excluded.body
WHERE runs.observed_ms <= excluded.observed_ms AND (runs.ended_ms IS NULL OR excluded.ended_ms IS NOT NULL)
RETURNING uid`, args...)
	if err != nil {
		return fmt.Errorf("writing %d records (the first %s/%s): %w", len(records), records[0].Namespace, records[0].Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return err
		}
		written[uid] = true
	}
	return rows.Err()
}

// text is a string as a column holds it: PostgreSQL refuses the NUL character in text, which no
// name has, but which a runtime's name may carry (its schema bounds only its length). The record's
// JSON keeps it, escaped.
func text(s string) string { return strings.ReplaceAll(s, "\x00", "") }

// marks are n numbered parameters from $first, comma-separated.
func marks(first, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(first+i))
	}
	return b.String()
}

// encode is a record's JSON, its progress halved until it fits MaxRecordBytes, keeping its
// latest point. The rest of a record is bounded by itself (Observe's bounds).
func encode(r *Record) (string, error) {
	for {
		body, err := json.Marshal(r)
		if err != nil {
			return "", err
		}
		if len(body) <= MaxRecordBytes || len(r.Progress) < 2 {
			return string(body), nil
		}
		c := *r
		c.Progress = nil
		for i, p := range r.Progress {
			if i%2 == 1 || i == len(r.Progress)-1 {
				c.Progress = append(c.Progress, p)
			}
		}
		r = &c
	}
}

func millis(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}

// read takes a reader's slot, waiting for one as long as ctx allows; done gives it back.
func (s *Store) read(ctx context.Context) (done func(), err error) {
	select {
	case s.readers <- struct{}{}:
		return func() { <-s.readers }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ErrNotFound is returned for a run the history does not hold.
var ErrNotFound = errors.New("no such run in the history")

// Get is the record of the run with uid.
func (s *Store) Get(ctx context.Context, uid string) (*Record, error) {
	done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	records, err := s.GetMany(ctx, []string{uid})
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return nil, ErrNotFound
	}
	return records[0], nil
}

// GetMany is the records of the runs of uids that the history holds, in no order.
func (s *Store) GetMany(ctx context.Context, uids []string) ([]*Record, error) {
	var out []*Record
	for chunk := range slices.Chunk(uids, putChunk*10) {
		args := make([]any, len(chunk))
		for i, uid := range chunk {
			args[i] = uid
		}
		records, err := s.query(ctx, `SELECT body FROM runs WHERE uid IN (`+marks(1, len(chunk))+`)`, args...)
		if err != nil {
			return nil, err
		}
		out = append(out, records...)
	}
	return out, nil
}

func (s *Store) query(ctx context.Context, query string, args ...any) ([]*Record, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Record
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		r := &Record{}
		if err := json.Unmarshal([]byte(body), r); err != nil {
			return nil, fmt.Errorf("reading a stored record: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Query selects runs, newest first.
type Query struct {
	// Namespace is the runs' namespace; empty for every namespace.
	Namespace string
	// Name is the runs' TrainJob's name; empty for every name.
	Name string
	// UIDPrefix is how the runs' UIDs begin; empty for any.
	UIDPrefix string
	// States are the states the runs are in (Complete, Failed, Running, ...); empty for any.
	States []string
	// Runtime is the name of the runs' runtime; empty for any.
	Runtime string
	// Creator is the user who created the runs; empty for anyone.
	Creator string
	// Since keeps the runs created at or after it; zero for all.
	Since time.Time
	// Labels selects the runs by their TrainJobs' labels; nil for all.
	Labels labels.Selector
	// Limit is the most runs a page holds; at most MaxPage, which is also the default.
	Limit int
	// Continue is the Continue of the page before, for the next.
	Continue string
}

// MaxPage is the most runs one page holds.
const MaxPage = 500

// Page is one page of runs.
type Page struct {
	Records []*Record
	// Continue, when not empty, asks for the next page.
	Continue string
}

// List is a page of the runs q selects.
func (s *Store) List(ctx context.Context, q Query) (*Page, error) {
	done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.Namespace != "" {
		where = append(where, "namespace = "+arg(q.Namespace))
	}
	if q.Name != "" {
		where = append(where, "name = "+arg(q.Name))
	}
	if q.UIDPrefix != "" {
		if strings.ContainsAny(q.UIDPrefix, `%_\`) {
			return nil, fmt.Errorf("%w: a UID prefix %q", ErrBadSelector, q.UIDPrefix)
		}
		where = append(where, "uid LIKE "+arg(q.UIDPrefix+"%"))
	}
	if len(q.States) > 0 {
		marks := make([]string, len(q.States))
		for i, st := range q.States {
			marks[i] = arg(st)
		}
		where = append(where, "state IN ("+strings.Join(marks, ", ")+")")
	}
	if q.Runtime != "" {
		where = append(where, "runtime_name = "+arg(q.Runtime))
	}
	if q.Creator != "" {
		where = append(where, "creator = "+arg(q.Creator))
	}
	if !q.Since.IsZero() {
		where = append(where, "created_ms >= "+arg(q.Since.UnixMilli()))
	}
	if q.Labels != nil {
		reqs, _ := q.Labels.Requirements()
		if len(reqs) > maxSelectorRequirements {
			return nil, fmt.Errorf("%w: a label selector of %d requirements: at most %d", ErrBadSelector, len(reqs), maxSelectorRequirements)
		}
		for _, req := range reqs {
			cond, err := labelCondition(req, arg)
			if err != nil {
				return nil, err
			}
			where = append(where, cond)
		}
	}
	if q.Continue != "" {
		created, uid, err := decodeContinue(q.Continue)
		if err != nil {
			return nil, err
		}
		where = append(where, "(created_ms < "+arg(created)+" OR (created_ms = "+arg(created)+" AND uid < "+arg(uid)+"))")
	}
	limit := q.Limit
	if limit <= 0 || limit > MaxPage {
		limit = MaxPage
	}
	query := "SELECT body FROM runs"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY created_ms DESC, uid DESC LIMIT " + arg(limit+1)
	records, err := s.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	page := &Page{Records: records}
	if len(records) > limit {
		page.Records = records[:limit]
		last := records[limit-1]
		page.Continue = encodeContinue(last.Created.UnixMilli(), last.UID)
	}
	return page, nil
}

// Bounds of a label selector the history answers: its parameters stay well within what SQLite and
// PostgreSQL take.
const (
	maxSelectorValues       = 100
	maxSelectorRequirements = 20
)

// labelCondition is the SQL condition of one requirement of a label selector.
func labelCondition(req labels.Requirement, arg func(any) string) (string, error) {
	has := func(values []string) string {
		cond := "EXISTS (SELECT 1 FROM run_labels l WHERE l.uid = runs.uid AND l.label_key = " + arg(req.Key())
		if values != nil {
			marks := make([]string, len(values))
			for i, v := range values {
				marks[i] = arg(v)
			}
			cond += " AND l.label_value IN (" + strings.Join(marks, ", ") + ")"
		}
		return cond + ")"
	}
	values := req.ValuesUnsorted()
	if len(values) > maxSelectorValues {
		return "", fmt.Errorf("%w: label selector %q: at most %d values", ErrBadSelector, req.Key(), maxSelectorValues)
	}
	switch req.Operator() {
	case selection.Equals, selection.DoubleEquals, selection.In:
		return has(values), nil
	case selection.NotEquals, selection.NotIn:
		return "NOT " + has(values), nil
	case selection.Exists:
		return has(nil), nil
	case selection.DoesNotExist:
		return "NOT " + has(nil), nil
	default:
		return "", fmt.Errorf("%w: label selector %q: the history selects labels by =, ==, !=, in, notin and existence only", ErrBadSelector, req.String())
	}
}

func encodeContinue(created int64, uid string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(created, 10) + "/" + uid))
}

// ErrBadSelector is returned for a selector the history cannot answer.
var ErrBadSelector = errors.New("a selector the history does not answer")

// ErrBadContinue is returned for a continue token that List did not make.
var ErrBadContinue = errors.New("the continue token is not one the history made")

func decodeContinue(token string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, "", ErrBadContinue
	}
	created, uid, ok := strings.Cut(string(raw), "/")
	ms, err := strconv.ParseInt(created, 10, 64)
	if !ok || err != nil || uid == "" {
		return 0, "", ErrBadContinue
	}
	return ms, uid, nil
}

// UsageQuery asks what runs used, by one of their columns.
type UsageQuery struct {
	// By is what runs are grouped by: "namespace", "creator" or "runtime".
	By string
	// Namespace keeps the runs of one namespace; empty for all.
	Namespace string
	// Since keeps the runs that had not ended by then.
	Since time.Time
	// Now is the end of running runs' use so far.
	Now time.Time
}

// Usage is what the runs of one group used.
type Usage struct {
	Key         string
	Runs        int64
	Failed      int64
	NodeSeconds float64
	GPUSeconds  float64
	// FailuresByReason counts the failed runs by the reason they failed.
	FailuresByReason map[string]int64
}

var usageColumns = map[string]string{"namespace": "namespace", "creator": "creator", "runtime": "runtime_name"}

// UsageBy is what the runs q selects used, by q.By, the most GPU-seconds first. A running
// run's use counts up to q.Now; a run counts whole in any window it overlaps.
func (s *Store) UsageBy(ctx context.Context, q UsageQuery) ([]Usage, error) {
	column, ok := usageColumns[q.By]
	if !ok {
		return nil, fmt.Errorf("usage by %q: by namespace, creator or runtime", q.By)
	}
	done, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	now := arg(q.Now.UnixMilli())
	where := "(ended_ms IS NULL OR ended_ms >= " + arg(q.Since.UnixMilli()) + ")"
	if q.Namespace != "" {
		where += " AND namespace = " + arg(q.Namespace)
	}
	// A running run's use so far: its running seconds before this period, and this period's.
	running := "CASE WHEN running_since_ms IS NULL THEN 0 ELSE (" + now + " - running_since_ms) / 1000.0 END"
	rows, err := s.db.QueryContext(ctx, `
SELECT `+column+`, reason, state, COUNT(*),
    SUM(node_seconds + `+running+` * nodes),
    SUM(gpu_seconds + `+running+` * nodes * gpus_per_node)
FROM runs WHERE `+where+`
GROUP BY `+column+`, reason, state`, args...)
	if err != nil {
		return nil, fmt.Errorf("summing use: %w", err)
	}
	defer rows.Close()
	groups := map[string]*Usage{}
	var order []string
	for rows.Next() {
		var key, reason, state string
		var runs int64
		var nodeSeconds, gpuSeconds float64
		if err := rows.Scan(&key, &reason, &state, &runs, &nodeSeconds, &gpuSeconds); err != nil {
			return nil, err
		}
		u := groups[key]
		if u == nil {
			u = &Usage{Key: key, FailuresByReason: map[string]int64{}}
			groups[key] = u
			order = append(order, key)
		}
		u.Runs += runs
		u.NodeSeconds += nodeSeconds
		u.GPUSeconds += gpuSeconds
		if state == "Failed" {
			u.Failed += runs
			u.FailuresByReason[reason] += runs
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]Usage, 0, len(order))
	for _, k := range order {
		out = append(out, *groups[k])
	}
	slices.SortFunc(out, func(a, b Usage) int {
		if c := cmp.Compare(b.GPUSeconds, a.GPUSeconds); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out, nil
}

// Retention says which runs of deleted TrainJobs the history forgets. The run of a TrainJob that
// exists is kept however old: the cluster holds the TrainJob anyway, and a run forgotten while
// its TrainJob is there would be recorded again from what is left of it, its use counted twice.
type Retention struct {
	// MaxAge forgets the runs whose TrainJobs were deleted longer ago; zero keeps them.
	MaxAge time.Duration
	// MaxRuns keeps that many of the runs of deleted TrainJobs, those deleted last; zero keeps
	// them all.
	MaxRuns int
}

// Prune forgets the runs r says to, as of now, and returns how many.
func (s *Store) Prune(ctx context.Context, r Retention, now time.Time) (int64, error) {
	var forget []string
	var args []any
	if r.MaxAge > 0 {
		args = append(args, now.Add(-r.MaxAge).UnixMilli())
		forget = append(forget, "deleted_ms < $1")
	}
	if r.MaxRuns > 0 {
		// The first run past the count, in the order of their deletions, and every run before it.
		var deleted int64
		var uid string
		err := s.db.QueryRowContext(ctx, `SELECT deleted_ms, uid FROM runs WHERE deleted_ms IS NOT NULL
ORDER BY deleted_ms DESC, uid DESC LIMIT 1 OFFSET `+strconv.Itoa(r.MaxRuns)).Scan(&deleted, &uid)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return 0, fmt.Errorf("finding the oldest run to keep: %w", err)
		default:
			n := len(args)
			args = append(args, deleted, uid)
			forget = append(forget, fmt.Sprintf("(deleted_ms < $%d OR (deleted_ms = $%d AND uid <= $%d))", n+1, n+1, n+2))
		}
	}
	if len(forget) == 0 {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM runs WHERE deleted_ms IS NOT NULL AND (`+strings.Join(forget, " OR ")+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("forgetting old runs: %w", err)
	}
	return res.RowsAffected()
}

// Undeleted is the UIDs of the runs whose TrainJobs' deletion the history has not recorded.
func (s *Store) Undeleted(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT uid FROM runs WHERE deleted_ms IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("reading the runs of TrainJobs not deleted: %w", err)
	}
	defer rows.Close()
	var uids []string
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return nil, err
		}
		uids = append(uids, uid)
	}
	return uids, rows.Err()
}
