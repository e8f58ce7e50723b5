#!/bin/bash
# Ingest A/B of the Embedder's CPU priority: normal (Ray's nice 15) and idle (SCHED_IDLE, the
# root serve_config.yaml's cpu_priority), alternated, each on a fresh service with its own
# Milvus Lite file; the priority set from outside on every Embedder thread (as root), as
# benchmarks.embedder_priority.set_priority does.
cd /work/main
for prio in normal idle normal idle; do
  rm -rf /tmp/ab_ingest_db; mkdir -p /tmp/ab_ingest_db
  sed "s#uri: ./data/memory.db#uri: /tmp/ab_ingest_db/memory.db#" serve_config.yaml > /tmp/serve_ab_ingest.yaml
  setsid .venv/bin/serve run /tmp/serve_ab_ingest.yaml > /work/ab_ingest_prio/serve_$prio.log 2>&1 &
  for i in $(seq 1 80); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
  sleep 5
  .venv/bin/python -c "from benchmarks.embedder_priority import embedder_pid, set_priority; set_priority(embedder_pid(), '$prio')"
  echo "=== $prio $(date +%T) load $(cat /proc/loadavg)"
  timeout 900 .venv/bin/python -m benchmarks.ingest --concurrency 1 --rounds 1 2>&1 | grep -E "^│|median|model alone|ratio"
  pkill -TERM -f "serve run /tmp/serve_ab_ingest"; sleep 12
  .venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
echo done
