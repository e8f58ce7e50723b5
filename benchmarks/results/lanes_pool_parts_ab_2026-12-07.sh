#!/bin/bash
# lanes A/B, maximal batches with the victim also writing a note a second: the service before (578c102, /work/old, with
# this tree's benchmarks/lanes.py and hostile.py copied in) and after (/work/main: a write's redaction and screening
# handed to the CPU pool POOL_CALL_CHARS at a time) alternated old/new/new/old, each its own fresh `serve run`.
cd "$(dirname "$0")/../.."
for cfg in ${CFGS:-old new new old}; do
  if [ $cfg = old ]; then dir=/work/old; else dir=/work/main; fi
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  (cd $dir && COLUMNS=200 timeout 900 /work/main/.venv/bin/python -m benchmarks.lanes --ops batch --repeat 4 \
     --idle-seconds 15 --admin-users 0 --victim-writes 2>&1 | grep -E "^\| batch|^victim|^\(|^- batch")
  /work/main/.venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
echo done
