#!/bin/bash
# Items 3 and 4 on the stop's code: N = 1, 8, 32, 128 then N = 32 once more, each a fresh serve run of serve_config.yaml with serve.env and its own Milvus Lite file; then benchmarks.ingest on a fresh one.
cd /work/main
set -a; . ./serve.env; set +a
for users in 1,8,32,128 32; do
  rm -rf /tmp/ab_load_db; mkdir -p /tmp/ab_load_db
  .venv/bin/python - <<'PY'
import yaml
c = yaml.safe_load(open("serve_config.yaml"))
m = c["applications"][0]["args"]["config"]["global"]["stores"]["memory"]
m["milvus"]["uri"] = "/tmp/ab_load_db/memory.db"
yaml.safe_dump(c, open("/tmp/serve_load.yaml", "w"), sort_keys=False)
PY
  setsid .venv/bin/serve run /tmp/serve_load.yaml > /work/ab_load/serve_$users.log 2>&1 < /dev/null &
  for i in $(seq 1 80); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
  sleep 5
  echo "=== users $users $(date +%T) load $(cat /proc/loadavg)"
  timeout 580 .venv/bin/python -m benchmarks.load --users $users --duration 20 --cpu-by-process 2>&1 | grep -v WARNING
  pkill -TERM -f "serve run /tmp/serve_load"; sleep 12
  .venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
  .venv/bin/python -c "from memory_core.testing.haproxy import stop_orphaned_haproxies as s; s()" 2>/dev/null
done
# item 4: bulk ingest of one account and of many, a fresh service per concurrency as benchmarks.ingest starts it
cd /work/main
set -a; . ./serve.env; set +a
rm -rf /tmp/ab_load_db; mkdir -p /tmp/ab_load_db
setsid .venv/bin/serve run /tmp/serve_load.yaml > /work/ab_load/serve_ingest.log 2>&1 < /dev/null &
for i in $(seq 1 80); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
sleep 5
echo "=== ingest $(date +%T) load $(cat /proc/loadavg)"
timeout 900 .venv/bin/python -m benchmarks.ingest --url http://127.0.0.1:8000 --concurrency 1,2 --rounds 2 2>&1 | grep -v WARNING
pkill -TERM -f "serve run /tmp/serve_load"; sleep 12
.venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
.venv/bin/python -c "from memory_core.testing.haproxy import stop_orphaned_haproxies as s; s()" 2>/dev/null
echo DONE
