-- What the history keeps about itself: the cluster whose runs it holds (the UID of its
-- namespace kube-system), so that a database given to two clusters' histories is seen as such.

-- +goose Up
CREATE TABLE history_meta (
    meta_key   TEXT PRIMARY KEY,
    meta_value TEXT NOT NULL
);

-- +goose Down
DROP TABLE history_meta;
