package history

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"
)

// migrations are the history's schema as SQL files; migrator adds those written in Go.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrator brings a database's schema up to date: the SQL files of migrations, and the
// migrations that are Go (a statement of each engine's own).
func migrator(db *sql.DB, dialect goose.Dialect, opts ...goose.ProviderOption) (*goose.Provider, error) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	opts = append(opts, goose.WithDisableGlobalRegistry(true), goose.WithGoMigrations(deletedColumn(dialect)))
	provider, err := goose.NewProvider(dialect, db, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("reading the history's migrations: %w", err)
	}
	return provider, nil
}

// deletedColumn (migration 3) adds the time a run's TrainJob was deleted as a column, which
// retention reads, filled in from the JSON of the runs stored before (which had it). Not in one
// transaction: filling in a million runs takes minutes, which a transaction would hold the
// table's lock for, and lose whole if the history stopped meanwhile. Each step can be taken
// again, so a history stopped partway (its liveness probe, a rollout) goes on where it was.
func deletedColumn(dialect goose.Dialect) *goose.Migration {
	addColumn := `ALTER TABLE runs ADD COLUMN IF NOT EXISTS deleted_ms BIGINT`
	deleted := `json_extract(body, '$.deleted')`
	if dialect == goose.DialectSQLite3 {
		addColumn = `ALTER TABLE runs ADD COLUMN deleted_ms BIGINT`
	} else {
		// A record's JSON may hold an escaped NUL, which PostgreSQL refuses to read as JSON: read
		// as another character (an escape of the same length, so the escapes around it stay).
		deleted = `REPLACE(body, E'\\u0000', E'\\ufffd')::json ->> 'deleted'`
	}
	up := func(ctx context.Context, db *sql.DB) error {
		has := 0 // PostgreSQL adds the column if it has not
		if dialect == goose.DialectSQLite3 {
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = 'deleted_ms'`).Scan(&has); err != nil {
				return err
			}
		}
		if has == 0 {
			if _, err := db.ExecContext(ctx, addColumn); err != nil {
				return err
			}
		}
		if _, err := db.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS runs_by_deleted ON runs (deleted_ms)`); err != nil {
			return err
		}
		// The ended runs (a deleted TrainJob's run has ended), a thousand at a time in the order
		// of their UIDs; each time read as Go reads it, as Put writes it.
		for last := ""; ; {
			rows, err := db.QueryContext(ctx, `SELECT uid, `+deleted+` FROM runs
WHERE uid > $1 AND ended_ms IS NOT NULL AND deleted_ms IS NULL AND body LIKE '%"deleted":%' ORDER BY uid LIMIT 1000`, last)
			if err != nil {
				return err
			}
			read := 0
			times := map[string]int64{}
			for rows.Next() {
				var uid string
				var at sql.NullString
				if err := rows.Scan(&uid, &at); err != nil {
					rows.Close()
					return err
				}
				read, last = read+1, uid
				if t, err := time.Parse(time.RFC3339Nano, at.String); at.Valid && err == nil {
					times[uid] = t.UnixMilli()
				}
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
			if read == 0 {
				return nil
			}
			if err := setDeleted(ctx, db, times); err != nil {
				return fmt.Errorf("filling in the deletion of the runs up to %q: %w", last, err)
			}
		}
	}
	down := func(ctx context.Context, db *sql.DB) error {
		for _, statement := range []string{`DROP INDEX IF EXISTS runs_by_deleted`, `ALTER TABLE runs DROP COLUMN deleted_ms`} {
			if _, err := db.ExecContext(ctx, statement); err != nil {
				return err
			}
		}
		return nil
	}
	return goose.NewGoMigration(3, &goose.GoFunc{RunDB: up}, &goose.GoFunc{RunDB: down})
}

// setDeleted writes the deletion times of runs, by UID, in one transaction.
func setDeleted(ctx context.Context, db *sql.DB, times map[string]int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after a commit it does nothing
	for uid, ms := range times {
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET deleted_ms = $1 WHERE uid = $2`, ms, uid); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// ClaimCluster records that the history holds the runs of the cluster with id, unless it holds
// another cluster's, and says whether it holds this cluster's alone. A database that two
// clusters' histories were given is marked shared, for both to see, whichever started first.
func (s *Store) ClaimCluster(ctx context.Context, id string) (alone bool, err error) {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO history_meta (meta_key, meta_value) VALUES ('cluster', $1)
ON CONFLICT (meta_key) DO NOTHING`, id); err != nil {
		return false, fmt.Errorf("recording the history's cluster: %w", err)
	}
	meta, err := s.meta(ctx)
	if err != nil {
		return false, err
	}
	if meta["cluster"] != id {
		if _, err := s.db.ExecContext(ctx, `INSERT INTO history_meta (meta_key, meta_value) VALUES ('shared', $1)
ON CONFLICT (meta_key) DO NOTHING`, id); err != nil {
			return false, fmt.Errorf("recording that the history's database is shared: %w", err)
		}
		return false, nil
	}
	_, shared := meta["shared"]
	return !shared, nil
}

// Alive records that the history was recording at t.
func (s *Store) Alive(ctx context.Context, t time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO history_meta (meta_key, meta_value) VALUES ('alive', $1)
ON CONFLICT (meta_key) DO UPDATE SET meta_value = excluded.meta_value`, t.UTC().Format(time.RFC3339Nano))
	return err
}

// LastAlive is the last time Alive recorded; zero if none.
func (s *Store) LastAlive(ctx context.Context) (time.Time, error) {
	meta, err := s.meta(ctx)
	if err != nil || meta["alive"] == "" {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, meta["alive"])
}

func (s *Store) meta(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT meta_key, meta_value FROM history_meta`)
	if err != nil {
		return nil, fmt.Errorf("reading what the history keeps about itself: %w", err)
	}
	defer rows.Close()
	meta := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		meta[k] = v
	}
	return meta, rows.Err()
}
