#!/bin/bash
# lanes A/B, maximal batches only: the service before (f702f42, /work/old) and after (/work/main: consolidation's
# grouping bounds each pair's Jaccard by word sketches; the judge keeps the long forms of a whole batch's notes)
# alternated old/new/new/old, each its own fresh `serve run`.
# The Consolidator's background loop consolidates each batch user while the next batches run.
cd "$(dirname "$0")/../.."
for cfg in ${CFGS:-old new new old}; do
  if [ $cfg = old ]; then dir=/work/old; else dir=/work/main; fi
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  (cd $dir && COLUMNS=200 timeout 900 /work/main/.venv/bin/python -m benchmarks.lanes --ops batch --repeat 4 \
     --idle-seconds 15 --admin-users 0 2>&1 | grep -E "^\| batch|^victim|^\(idle|^- batch")
  /work/main/.venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
echo done
