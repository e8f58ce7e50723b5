#!/bin/bash
# lanes A/B, consolidation only: the service before (1f0d5c9, /work/old) and after (the consolidation in the background lane
# , /work/main) alternated old/new/new/old, each its own fresh `serve run`
cd "$(dirname "$0")/../.."  # recorded: old = a worktree of 1f0d5c9 at /work/old, new = /work/main with the code committed as c7d2a2e + bd74dd5
for cfg in ${CFGS:-old new new old}; do
  if [ $cfg = old ]; then dir=/work/old; else dir=/work/main; fi
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  (cd $dir && COLUMNS=200 timeout 900 /work/main/.venv/bin/python -m benchmarks.lanes --ops consolidate --repeat 4 \
     --large-memories 1000 --idle-seconds 15 --admin-users 0 2>&1 | grep -E "^\| consolidate|^victim|^\(idle|^- consolidate")
  /work/main/.venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
echo done
