#!/bin/bash
# Concurrent chats A/B of the write lane (pool.in_shard_write_texts): 0 (every caller write embedded by the Embedder) against 8 (the default: a caller write of at most 8 memories embedded by the store shard, its lane thread at nice 19), alternated, each on a fresh service with its own Milvus Lite file.
cd /work/main
for cfg in lane0 lane8 lane0 lane8; do
  rm -rf /tmp/ab_load_db; mkdir -p /tmp/ab_load_db
  .venv/bin/python - "$cfg" <<'PY'
import sys, yaml
c = yaml.safe_load(open("serve_config.yaml"))
m = c["applications"][0]["args"]["config"]["global"]["stores"]["memory"]
m["milvus"]["uri"] = "/tmp/ab_load_db/memory.db"
if sys.argv[1] == "lane0":
    m["pool"]["in_shard_write_texts"] = 0
yaml.safe_dump(c, open("/tmp/serve_ab_load.yaml", "w"), sort_keys=False)
PY
  setsid .venv/bin/serve run /tmp/serve_ab_load.yaml > /work/ab_load/serve_$cfg.log 2>&1 < /dev/null &
  for i in $(seq 1 80); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
  sleep 5
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  timeout 300 .venv/bin/python -m benchmarks.load --users 32 --duration 30 2>&1 | grep -E "'by_kind'|server_timing_p50|model alone|^│ 32"
  pkill -TERM -f "serve run /tmp/serve_ab_load"; sleep 12
  .venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
echo done
