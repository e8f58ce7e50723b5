#!/bin/bash
# lanes A/B: pool.gc_freeze_every_s 0 (CPython's own collector schedule) vs 60 (the default)
cd "$(dirname "$0")/../.."  # the repository root
ROOT=$PWD
mkdir -p /tmp/ab_lanes
# (the recorded run wrote its logs under /work/ab_lanes)
for cfg in ${CFGS:-gc0 gc60}; do
  rm -rf /tmp/ab_lanes_db; mkdir -p /tmp/ab_lanes_db
  .venv/bin/python - "$cfg" <<'PY'
import sys, yaml
c = yaml.safe_load(open("serve_config.yaml"))
g = c["applications"][0]["args"]["config"]["global"]
m = g["stores"]["memory"]
m["milvus"]["uri"] = "/tmp/ab_lanes_db/memory.db"
m["events"] = {**m.get("events", {}), "path": "/tmp/ab_lanes_db/events.sqlite"} if "events" in m else m.get("events")
if m.get("events") is None: m.pop("events", None)
g.setdefault("access", {})["write_rate_limit"] = {"limit": 0, "window_s": 60}
m["pool"]["gc_freeze_every_s"] = 0 if sys.argv[1] == "gc0" else 60
yaml.safe_dump(c, open("/tmp/serve_ab_lanes.yaml", "w"), sort_keys=False)
PY
  (cd /tmp/ab_lanes_db && setsid "$ROOT"/.venv/bin/serve run /tmp/serve_ab_lanes.yaml > /tmp/ab_lanes/serve_$cfg.log 2>&1 < /dev/null &)
  for i in $(seq 1 100); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
  sleep 5
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  PYTHONPATH=. timeout 1500 .venv/bin/python -m benchmarks.lanes --base-url http://127.0.0.1:8000 --ops ${OPS:-batch,consolidate,all4} --repeat 2 --markdown /tmp/ab_lanes/$cfg.md 2>&1 | tail -25
  pkill -TERM -f "serve run /tmp/serve_ab_lanes"; sleep 12
  .venv/bin/ray stop --force >/dev/null 2>&1; sleep 3
done
echo done
