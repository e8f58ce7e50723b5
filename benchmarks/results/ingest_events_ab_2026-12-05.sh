#!/bin/bash
# Ingest A/B: the write path before (411a228) and after (185e0ec: an event's identical events found by content,
# only facts ranked; an empty scope answered from a tally), alternated, each on a fresh service with its own Milvus Lite file.
cd /work/main
FILES="memory_core/retrieval/lexical.py memory_core/stores/base.py memory_core/stores/hybrid.py memory_core/stores/curating.py memory_core/stores/user_index.py"
for cfg in old new old new; do
  if [ $cfg = old ]; then git checkout -q 411a228 -- $FILES; else git checkout -q 185e0ec -- $FILES; fi
  rm -rf /tmp/ab_ingest_db; mkdir -p /tmp/ab_ingest_db
  sed "s#uri: ./data/memory.db#uri: /tmp/ab_ingest_db/memory.db#" serve_config.yaml > /tmp/serve_ab_ingest.yaml
  setsid .venv/bin/serve run /tmp/serve_ab_ingest.yaml > /work/ab_ingest/serve_$cfg.log 2>&1 &
  for i in $(seq 1 80); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
  sleep 5
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  timeout 900 .venv/bin/python -m benchmarks.ingest --concurrency 1 --rounds 1 2>&1 | grep -E "^│|median"
  pkill -TERM -f "serve run /tmp/serve_ab_ingest"; sleep 12
  .venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
git checkout -q 185e0ec -- $FILES
git status --short
echo done
