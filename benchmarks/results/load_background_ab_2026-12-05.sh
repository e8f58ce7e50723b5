#!/bin/bash
# Concurrent chats A/B: before (75f9e7b) and after (aca65eb: a chat turn's memories embedded as
# background work, behind the callers who wait), alternated, each on a fresh service with its own
# Milvus Lite file: python -m benchmarks.load --users 32 --duration 30.
cd /work/main
FILES="deployments/embedder.py deployments/http/routes/base.py deployments/http/routes/assembly.py memory_core/chat/pipeline.py"
for cfg in old new old new; do
  if [ $cfg = old ]; then git checkout -q 75f9e7b -- $FILES; else git checkout -q aca65eb -- $FILES; fi
  rm -rf /tmp/ab_load_db; mkdir -p /tmp/ab_load_db
  sed "s#uri: ./data/memory.db#uri: /tmp/ab_load_db/memory.db#" serve_config.yaml > /tmp/serve_ab_load.yaml
  setsid .venv/bin/serve run /tmp/serve_ab_load.yaml > /work/ab_load/serve_$cfg.log 2>&1 &
  for i in $(seq 1 80); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
  sleep 5
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  timeout 300 .venv/bin/python -m benchmarks.load --users 32 --duration 30 2>&1 | grep -E "'by_kind'|server_timing_p50|model alone|^│ 32"
  pkill -TERM -f "serve run /tmp/serve_ab_load"; sleep 12
  .venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
git checkout -q aca65eb -- $FILES
git status --short
echo done
