#!/bin/bash
# Ingest A/B: the write path before (7936b33) and after (38f4f40) the candidate-search speedup,
# alternated, each on a fresh service with its own Milvus Lite file.
cd /work/main
FILES="memory_core/embedding/coverage.py memory_core/stores/user_index.py memory_core/stores/hybrid.py"
for cfg in old new old new; do
  if [ $cfg = old ]; then git checkout -q 7936b33 -- $FILES; else git checkout -q 38f4f40 -- $FILES; fi
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
git checkout -q 38f4f40 -- $FILES
git status --short
echo done
