#!/usr/bin/env bash
# Chat turns/s through Serve on one bigger machine (a GPU node), side by side with the model
# alone, in one run: a one-node Ray cluster, the application deployed with
# benchmarks/node_config.py (the Embedder on the GPU), then benchmarks.load at N users.
#
#   benchmarks/gpu_node.sh MODEL OUT_DIR [USERS=1,8,32,128] [DURATION_S=15]
#
# MODEL: embedding.model (a bundled name or a model directory). Environment: DEVICE (cuda),
# BACKEND (milvus: Milvus Lite; inmemory where Milvus Lite is not installed), INGRESS (4
# ingress replicas), GPUS (1: the Embedder's num_gpus), NUM_CPUS (the node's CPUs for Ray: nproc), PY (python3). Writes OUT_DIR/node.yaml,
# OUT_DIR/serve.log and OUT_DIR/load.txt; stops everything it started (Serve's process group
# with SIGTERM, then `ray stop`). Figures: README "Measured". Uses `python -m`/`-c` entry
# points only, so it also runs where Ray's console scripts are not on PATH.
set -u
MODEL=${1:?model}
OUT=${2:?out dir}
USERS=${3:-1,8,32,128}
DURATION=${4:-15}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
BACKEND=${BACKEND:-milvus}
INGRESS=${INGRESS:-4}
GPUS=${GPUS:-1}
mkdir -p "$OUT"
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
DATA=$(mktemp -d)
"$PY" benchmarks/node_config.py --model "$MODEL" --device "$DEVICE" --backend "$BACKEND" \
  --ingress-replicas "$INGRESS" --embedder-gpus "$GPUS" --data-dir "$DATA" >"$OUT/node.yaml" || exit 1
ray_cli() { "$PY" -c 'import sys; from ray.scripts.scripts import main; sys.argv[0] = "ray"; main()' "$@"; }
GPU_COUNT=0
[ "$DEVICE" = cpu ] || GPU_COUNT=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
ray_cli start --head --num-cpus "${NUM_CPUS:-$(nproc)}" --num-gpus "$GPU_COUNT" --metrics-export-port 8089 \
  --include-dashboard=false --disable-usage-stats >"$OUT/ray_start.log" 2>&1 || { cat "$OUT/ray_start.log"; exit 1; }
setsid "$PY" -c 'import sys; from ray.serve.scripts import cli; sys.argv[0] = "serve"; cli()' \
  run "$OUT/node.yaml" >"$OUT/serve.log" 2>&1 &
SERVE=$!
cleanup() {
  kill -TERM -- "-$SERVE" 2>/dev/null
  sleep 5
  ray_cli stop --force >/dev/null 2>&1
  rm -rf "$DATA"
}
trap cleanup EXIT
started=$(date +%s)
until curl -sf http://127.0.0.1:8000/health >/dev/null; do
  if ! kill -0 "$SERVE" 2>/dev/null || [ $(($(date +%s) - started)) -gt 400 ]; then
    echo "the service did not become healthy"; tail -40 "$OUT/serve.log"; exit 1
  fi
  sleep 2
done
echo "healthy after $(($(date +%s) - started)) s"
"$PY" -m benchmarks.load --url http://127.0.0.1:8000 --users "$USERS" --duration "$DURATION" \
  --model "$MODEL" --device "$DEVICE" --model-batch 256 --metrics-url http://127.0.0.1:8089/metrics 2>&1 | tee "$OUT/load.txt"
