#!/usr/bin/env bash
# Start the main job exactly as the README does (`serve run serve_config.yaml`, embedded
# defaults) in a scratch directory on a free port, run the e2e suite against it, stop it.
# To run e2e against a service you started yourself: MEMORY_ROUTER_URL=http://host:port pytest e2e
set -euo pipefail
# job control: a background job of a non-interactive shell would otherwise ignore SIGINT,
# and `serve run` shuts the application and its local Ray down cleanly on SIGINT
set -m
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${VENV_BIN:-$repo/.venv/bin}"
# Ray Serve's throughput mode, as `make run` serves (serve.env); a value already exported wins
while IFS='=' read -r name value || [[ -n "$name" ]]; do
  if [[ "$name" =~ ^[A-Z_][A-Z0-9_]*$ ]]; then export "$name=${!name-$value}"; fi
done < "$repo/serve.env"
# its fixed ports (HAProxy's stats and metrics, the fallback proxy) moved to free ones, and
# the ingress replica's drain at its stop 1 s instead of 30 (HAProxy alone is in front), so
# SIGINT stops it in time: memory_core.testing.haproxy.set_local_service_defaults
# (and the HTTP port, picked in the same process: free_port never hands out a port twice)
eval "$(PYTHONPATH="$repo" "$bin/python" -c 'from memory_core.testing.haproxy import set_local_service_defaults as d; from memory_core.testing.net import free_port; import os, shlex; v = {**d(dict(os.environ)), "E2E_HTTP_PORT": str(free_port())}; print("; ".join(f"export {k}={shlex.quote(x)}" for k, x in v.items()))')"
stop_orphaned_haproxies() {  # throughput mode (serve.env): a HAProxy that outlived its Ray instance
  PYTHONPATH="$repo" "$bin/python" -c 'from memory_core.testing.haproxy import stop_orphaned_haproxies as s; s()' || true
}
work="$(mktemp -d)"
port="$E2E_HTTP_PORT"
"$bin/python" - "$repo/serve_config.yaml" "$work/serve_config.yaml" "$port" <<'PY'
import sys, yaml
src, dst, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = yaml.safe_load(open(src))
cfg["http_options"]["port"] = port
yaml.safe_dump(cfg, open(dst, "w"), sort_keys=False)
PY
cd "$work"
stop_orphaned_haproxies  # one left by an earlier Ray instance would hold the ports ours binds
"$bin/serve" run serve_config.yaml > "$work/serve.log" 2>&1 &
serve_pid=$!
cleanup() {
  kill -INT "$serve_pid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 1; done
  kill -TERM "$serve_pid" 2>/dev/null || true
  for _ in $(seq 1 10); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 1; done
  kill -9 "$serve_pid" 2>/dev/null || true
  stop_orphaned_haproxies
  rm -rf "$work"
}
trap cleanup EXIT
url="http://127.0.0.1:$port"
for i in $(seq 1 240); do
  if curl -fsS "$url/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$serve_pid" 2>/dev/null; then echo "serve run exited:"; tail -50 "$work/serve.log"; exit 1; fi
  sleep 1
done
curl -fsS "$url/health" >/dev/null || { echo "service not healthy after 240 s"; tail -50 "$work/serve.log"; exit 1; }
echo "e2e: service up at $url (started in $i s)"
cd "$repo"
MEMORY_ROUTER_URL="$url" "$bin/pytest" -q -p no:cacheprovider e2e
