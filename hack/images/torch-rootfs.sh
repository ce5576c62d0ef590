#!/bin/sh
# Writes into $1 the root file system of the real node's PyTorch image: Debian bookworm (minbase)
# with Debian's python3-torch (1.13, CPU), /allreduce.py, a two-line gloo all-reduce that
# torchrun (python3 -m torch.distributed.run) runs under the operator's PET_* wiring, and
# /elastic.py, which all-reduces at each size of an elastic run until it has grown. Large
# (see docs/development.md): built by `make images-torch` only, not by CI. Needs root and
# debootstrap (hack/realnode-deps.sh).
set -eu
dir=$1
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
rm -rf "$dir"
debootstrap --variant=minbase --include=python3-torch \
	bookworm "$dir" "${mirror:-http://deb.debian.org/debian}" >"$dir.log" 2>&1 ||
	{ tail -20 "$dir.log" >&2; exit 1; }
cat >"$dir/allreduce.py" <<'PY'
# Every rank adds rank+1; each must then hold 1+2+...+world_size, or the group did not work.
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
want = world * (world + 1) / 2
print(f"rank {rank} of {world}: all-reduce gave {total.item():g}, want {want:g}", flush=True)
assert total.item() == want
dist.destroy_process_group()
PY
cat >"$dir/elastic.py" <<'PY'
# An elastic run: every step all-reduces rank+1 at the world's current size and says so, until
# the world holds GROW_TO processes; five steps at that size, and it is done. torchrun restarts
# the workers when a node joins, at the new size.
import os
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
grow_to = int(os.environ.get("GROW_TO", "2"))
want = world * (world + 1) / 2
step = 0
while world < grow_to or step < 5:
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    print(f"rank {rank} of {world}: step {step}: all-reduce gave {total.item():g}, want {want:g}", flush=True)
    assert total.item() == want
    step += 1
    time.sleep(1)
dist.destroy_process_group()
PY
rm -rf "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
	"$dir"/var/cache/apt/* "$dir"/var/lib/apt/lists/* "$dir"/var/log/* "$dir"/dev/* "$dir.log"
