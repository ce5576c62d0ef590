-- Indexes for the filters a user gives across namespaces: without them, a page of a rare
-- creator's, runtime's, state's or TrainJob name's runs reads every run (seconds at a million).

-- +goose Up
CREATE INDEX runs_by_name_everywhere ON runs (name, created_ms DESC, uid DESC);
CREATE INDEX runs_by_creator ON runs (creator, created_ms DESC, uid DESC);
CREATE INDEX runs_by_runtime ON runs (runtime_name, created_ms DESC, uid DESC);
CREATE INDEX runs_by_state ON runs (state, created_ms DESC, uid DESC);

-- +goose Down
DROP INDEX runs_by_state;
DROP INDEX runs_by_runtime;
DROP INDEX runs_by_creator;
DROP INDEX runs_by_name_everywhere;
