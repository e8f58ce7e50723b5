#!/bin/bash
# LoCoMo through the API on a fresh serve run of serve_config.yaml with embedding.model bundled:all-mpnet-base-v2 (serve.env, own Milvus Lite file).
cd /work/main
set -a; . ./serve.env; set +a
rm -rf /tmp/api_mpnet_db; mkdir -p /tmp/api_mpnet_db
.venv/bin/python - <<'PY'
import yaml
c = yaml.safe_load(open("serve_config.yaml"))
m = c["applications"][0]["args"]["config"]["global"]["stores"]["memory"]
m["milvus"]["uri"] = "/tmp/api_mpnet_db/memory.db"
m["embedding"] = {"model": "bundled:all-mpnet-base-v2"}
yaml.safe_dump(c, open("/tmp/serve_api_mpnet.yaml", "w"), sort_keys=False)
PY
setsid .venv/bin/serve run /tmp/serve_api_mpnet.yaml > /work/ab_load/serve_api_mpnet.log 2>&1 < /dev/null &
for i in $(seq 1 160); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
sleep 5
echo "=== locomo api $(date +%T) load $(cat /proc/loadavg)"
timeout 900 .venv/bin/python benchmarks/locomo.py --url http://127.0.0.1:8000 2>&1 | grep -v WARNING
pkill -TERM -f "serve run /tmp/serve_api_mpnet"; sleep 12
.venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
.venv/bin/python -c "from memory_core.testing.haproxy import stop_orphaned_haproxies as s; s()" 2>/dev/null
echo DONE $(date +%T)

