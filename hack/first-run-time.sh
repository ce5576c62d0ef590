#!/usr/bin/env bash
# hack/first-run-time.sh measures a newcomer's first `make run`: a fresh clone with an empty bin/,
# Go module cache and build cache, from `make run` to the first sample TrainJob's Complete.
#
#   hack/first-run-time.sh DIR [REV]
#
# DIR must not exist: the clone (of REV, this checkout's HEAD by default) goes in DIR/repo, the
# caches in DIR/mod and DIR/cache, make run's output in DIR/run.log and the load average, sampled
# every 30 s, in DIR/load.log. It prints the minutes and seconds to the kubeconfig line and to
# Complete, then stops make run as Ctrl-C does. The machine's load changes the result: compare
# runs only beside their load. Remove DIR with `chmod -R u+w DIR && rm -rf DIR` (the module cache
# is read-only).
set -euo pipefail

src=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
dir=${1:?usage: $0 DIR [REV]}
rev=$(git -C "$src" rev-parse "${2:-HEAD}")
sample=config/samples/trainer_v1alpha1_trainjob_torch.yaml
[ ! -e "$dir" ] || { echo "$dir exists: give a new folder" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
git clone -q "$src" "$dir/repo"
git -C "$dir/repo" checkout -q "$rev"
cd "$dir/repo"

elapsed() { local s=$(($(date +%s) - start)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
start=$(date +%s)
echo "$(date -Is) $rev on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$dir/load.log"
# Its own session, so that the INT below reaches make and its children as Ctrl-C would. The
# manager's health probes off: another make run on the machine holds their port, :8081.
setsid env GOMODCACHE="$dir/mod" GOCACHE="$dir/cache" make run ARGS=--health-probe-bind-address=0 >"$dir/run.log" 2>&1 &
run=$!
(while kill -0 "$run" 2>/dev/null; do echo "$(elapsed) $(cut -d' ' -f1-3 /proc/loadavg)" >>"$dir/load.log"; sleep 30; done) &
stop() { kill -INT -- "-$run" 2>/dev/null || true; wait "$run" 2>/dev/null || true; }
trap stop EXIT

kubeconfig=
until [ -n "$kubeconfig" ]; do
	kill -0 "$run" 2>/dev/null || { tail -n 30 "$dir/run.log"; echo "make run exited before printing the kubeconfig" >&2; exit 1; }
	sleep 2
	kubeconfig=$(grep -m1 -oP '^\s*kubeconfig: \K\S+' "$dir/run.log" || true)
done
echo "kubeconfig after $(elapsed)"
bin/kubectl --kubeconfig "$kubeconfig" apply --server-side -f "$sample"
bin/kubectl --kubeconfig "$kubeconfig" wait --for=jsonpath='{.status.state}'=Complete -f "$sample" --timeout=30m
echo "Complete after $(elapsed) (load average samples in $dir/load.log)"
