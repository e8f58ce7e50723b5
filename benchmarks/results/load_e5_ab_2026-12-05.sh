cd /work/main
for cfg in noe5 e5 noe5 e5; do
  rm -rf /tmp/ab_$cfg.db
  setsid .venv/bin/serve run /tmp/serve_$cfg.yaml > /work/serve_ab_$cfg.log 2>&1 &
  for i in $(seq 1 60); do sleep 3; curl -sf localhost:8000/health >/dev/null && break; done
  sleep 5
  echo "=== $cfg $(date +%T) load $(cat /proc/loadavg)"
  timeout 600 .venv/bin/python -m benchmarks.load --users 1,32 --duration 20 --metrics-url http://127.0.0.1:8089/metrics 2>&1 | grep -E "^│|model alone"
  shard=$(grep -l "e5-small" /proc/[0-9]*/maps 2>/dev/null | head -1)
  for p in $(pgrep -f "ray::StoreShard"); do echo "shard $p cpu_ticks $(awk '{print $14+$15}' /proc/$p/stat) e5mapped=$(grep -c e5-small /proc/$p/maps)"; done
  pkill -TERM -f "serve run /tmp/serve_$cfg"; sleep 10
done
echo done
