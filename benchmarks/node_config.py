"""A Serve config for one machine with more cores (and a GPU), derived from ``serve_config.yaml``.

    python benchmarks/node_config.py --model PATH --device cuda --backend inmemory \
        --ingress-replicas 4 --embedder-gpus 1 > /tmp/node.yaml

The root ``serve_config.yaml`` is sized for the 2-core development machine (one replica of
everything, ``num_cpus: 0``, the search query embedded in the store shard on the CPU). On a
bigger node the same application is deployed with: the Embedder on the GPU
(``embedding.device``, ``num_gpus``, batches of up to 256, ``batch_wait_timeout_s`` 3 ms as in
``cluster/serve_config.gpu.yaml``), search queries embedded by that Embedder
(``pool.query_embedding: embedder``: the GPU's batches rather than a CPU copy in the shard),
``--ingress-replicas`` ingress replicas and two echo upstream replicas. Everything else (routing,
access, limits, reflection) is the root file's. The result is checked against
``ray.serve.schema.ServeDeploySchema`` and the application's own config model before it is
printed. Used by ``benchmarks/gpu_node.sh``; figures in README "Measured".
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def node_config(
    base: dict,
    *,
    model: str,
    device: str,
    backend: str,
    ingress_replicas: int,
    embedder_gpus: float,
    data_dir: str,
) -> dict:
    """``base`` (the parsed root ``serve_config.yaml``) re-sized for one bigger node (module
    docstring). Raises ``KeyError`` when ``base`` lacks the application or a deployment."""
    cfg = copy.deepcopy(base)
    app = cfg["applications"][0]
    memory = app["args"]["config"]["global"]["stores"]["memory"]
    memory["backend"] = backend
    if backend == "milvus":
        memory["milvus"]["uri"] = f"{data_dir}/memory.db"
    memory["embedding"] = {"model": model, "device": device}
    memory["pool"] = {"shards": 1, "query_embedding": "embedder"}
    access = app["args"]["config"]["global"]["access"]
    access["api_keys"]["path"] = f"{data_dir}/access.sqlite"
    deployments = {d["name"]: d for d in app["deployments"]}
    embedder = deployments["Embedder"]
    embedder["ray_actor_options"] = {"num_cpus": 1, "num_gpus": embedder_gpus}
    embedder["max_ongoing_requests"] = 512
    embedder["user_config"] = {"max_batch_size": 256, "batch_wait_timeout_s": 0.003}
    ingress = deployments["MemoryIngress"]
    ingress["num_replicas"] = ingress_replicas
    ingress["ray_actor_options"] = {"num_cpus": 1}
    deployments["EchoUpstream"]["num_replicas"] = 2
    deployments["StorePool"]["ray_actor_options"] = {"num_cpus": 1}
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="embedding.model: a bundled name or a model directory")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backend", default="milvus", choices=("milvus", "inmemory"))
    ap.add_argument("--ingress-replicas", type=int, default=4)
    ap.add_argument("--embedder-gpus", type=float, default=1.0)
    ap.add_argument("--data-dir", default="./data")
    ap.add_argument("--base", type=Path, default=ROOT / "serve_config.yaml")
    args = ap.parse_args()
    cfg = node_config(
        yaml.safe_load(args.base.read_text()),
        model=args.model,
        device=args.device,
        backend=args.backend,
        ingress_replicas=args.ingress_replicas,
        embedder_gpus=args.embedder_gpus,
        data_dir=args.data_dir,
    )
    from ray.serve.schema import ServeDeploySchema

    from memory_core.config import load_config

    ServeDeploySchema.model_validate(cfg)
    load_config(cfg["applications"][0]["args"]["config"])  # ConfigError naming the key
    yaml.safe_dump(cfg, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
