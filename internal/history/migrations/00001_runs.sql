-- The runs of TrainJobs, one row per TrainJob's UID, in SQL that SQLite and PostgreSQL both
-- read. Times are Unix milliseconds; body is the whole record as JSON, the columns what is
-- filtered, sorted and summed.

-- +goose Up
CREATE TABLE runs (
    uid              TEXT PRIMARY KEY,
    namespace        TEXT NOT NULL,
    name             TEXT NOT NULL,
    creator          TEXT NOT NULL,
    runtime_kind     TEXT NOT NULL,
    runtime_name     TEXT NOT NULL,
    framework        TEXT NOT NULL,
    queue            TEXT NOT NULL,
    state            TEXT NOT NULL,
    reason           TEXT NOT NULL,
    created_ms       BIGINT NOT NULL,
    ended_ms         BIGINT,
    running_since_ms BIGINT,
    nodes            BIGINT NOT NULL,
    gpus_per_node    BIGINT NOT NULL,
    node_seconds     DOUBLE PRECISION NOT NULL,
    gpu_seconds      DOUBLE PRECISION NOT NULL,
    observed_ms      BIGINT NOT NULL,
    body             TEXT NOT NULL
);
CREATE INDEX runs_by_created ON runs (created_ms DESC, uid DESC);
CREATE INDEX runs_by_namespace ON runs (namespace, created_ms DESC, uid DESC);
CREATE INDEX runs_by_name ON runs (namespace, name, created_ms DESC);
CREATE INDEX runs_by_ended ON runs (ended_ms);

CREATE TABLE run_labels (
    uid         TEXT NOT NULL REFERENCES runs (uid) ON DELETE CASCADE,
    label_key   TEXT NOT NULL,
    label_value TEXT NOT NULL,
    PRIMARY KEY (uid, label_key)
);
CREATE INDEX run_labels_by_label ON run_labels (label_key, label_value);

-- +goose Down
DROP TABLE run_labels;
DROP TABLE runs;
