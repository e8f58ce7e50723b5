"""The deployment configs under ``cluster/`` (and the root ``serve_config.yaml``) pass the
validators of the tools that consume them, with no cluster and no network:

- every Serve config file (``**/*serve_config*.yaml``) and the RayService's ``serveConfigV2``:
  Ray's ``ServeDeploySchema``, the project's ``AppArgs`` + ``load_config``, the deployments'
  own ``user_config`` validators, and deployment names the application builds;
- ``cluster/ray-cluster.yaml``: the cluster launcher's ``prepare_config`` + ``validate_config``
  (``ray/autoscaler/ray-schema.json``), as ``ray up`` runs them;
- ``cluster/kuberay/rayservice.yaml``: a ``ray.io/v1`` ``RayService`` whose ``serveConfigV2``
  is the GPU Serve config;
- placement: the head advertises 0 CPUs and no replica of a cluster config fits on it; every
  replica fits on some worker group, and the groups at their maximum size hold every
  deployment at its maximum replica count.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
CLUSTER = REPO_ROOT / "cluster"
GPU_SERVE_CONFIG = CLUSTER / "serve_config.gpu.yaml"
LAUNCHER_CONFIG = CLUSTER / "ray-cluster.yaml"
RAYSERVICE = CLUSTER / "kuberay" / "rayservice.yaml"
SKIP_DIRS = {".venv", "venv", ".git", "node_modules", "data", "build", "dist", "__pycache__"}


def _serve_config_files() -> list[Path]:
    found = []
    for root, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        found += [Path(root) / f for f in files if "serve_config" in f and f.endswith(".yaml")]
    return sorted(found)


SERVE_CONFIG_FILES = _serve_config_files()


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _rayservice_serve_config() -> dict[str, Any]:
    return yaml.safe_load(_load(RAYSERVICE)["spec"]["serveConfigV2"])


# every Serve config document: the files, plus the one embedded in the RayService manifest
SERVE_CONFIGS = {str(p.relative_to(REPO_ROOT)): (lambda p=p: _load(p)) for p in SERVE_CONFIG_FILES}
SERVE_CONFIGS["cluster/kuberay/rayservice.yaml#serveConfigV2"] = _rayservice_serve_config


def _node_serve_config() -> dict[str, Any]:
    """The one-node GPU config ``benchmarks/node_config.py`` derives from the root file (what
    ``benchmarks/gpu_node.sh`` deploys): it must stay valid as the root file changes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("node_config", REPO_ROOT / "benchmarks" / "node_config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.node_config(
        _load(REPO_ROOT / "serve_config.yaml"),
        model="bundled:all-MiniLM-L6-v2",
        device="cuda",
        backend="inmemory",
        ingress_replicas=4,
        embedder_gpus=1.0,
        data_dir="/tmp/node",
    )


SERVE_CONFIGS["benchmarks/node_config.py(serve_config.yaml)"] = _node_serve_config
# the configs meant for a multi-node cluster (the root one runs everything on one machine)
CLUSTER_SERVE_CONFIGS = ["cluster/serve_config.gpu.yaml", "cluster/kuberay/rayservice.yaml#serveConfigV2"]


def test_the_glob_finds_the_known_serve_configs():
    names = {str(p.relative_to(REPO_ROOT)) for p in SERVE_CONFIG_FILES}
    assert {"serve_config.yaml", "cluster/serve_config.gpu.yaml"} <= names


# ---------------------------------------------------------------------------- Serve configs


def _built_deployments(config: Any) -> set[str]:
    """The deployments ``deployments.app.build_application`` binds for this configuration."""
    names = {"Embedder", "StorePool", "MemoryIngress"}
    if not config.global_.upstream.base_url:
        names.add("EchoUpstream")
    if config.memory.curation.enabled:
        names.add("Consolidator")
    return names


@pytest.mark.parametrize("name", sorted(SERVE_CONFIGS))
def test_serve_config_passes_serve_schema_and_the_apps_validation(name):
    from ray.serve.schema import ServeDeploySchema

    from deployments.app import DEPLOYMENT_OPTIONS, AppArgs
    from deployments.consolidator import ConsolidatorConfig
    from deployments.embedder import validate_user_config

    doc = SERVE_CONFIGS[name]()
    schema = ServeDeploySchema.model_validate(doc)
    assert [a.name for a in schema.applications] == ["memory-router"]
    (app,) = doc["applications"]
    assert app["import_path"] == "deployments.app:build_app"
    assert app["route_prefix"] == "/"

    # the application's own checks (what build_app runs before binding): extra keys refused
    config = AppArgs.model_validate(app["args"]).load()

    listed = [d["name"] for d in app.get("deployments", [])]
    assert len(listed) == len(set(listed)), f"{name}: a deployment is listed twice"
    assert set(listed) <= set(DEPLOYMENT_OPTIONS), (
        f"{name}: unknown deployments {set(listed) - set(DEPLOYMENT_OPTIONS)}"
    )
    # Serve refuses a config naming a deployment the application does not build
    assert set(listed) <= _built_deployments(config), f"{name}: lists deployments build_app does not create"

    for d in app.get("deployments", []):
        if "user_config" in d and d["name"] == "Embedder":
            validate_user_config(d["user_config"], config.memory.embedding.max_seq_length)
        if "user_config" in d and d["name"] == "Consolidator":
            ConsolidatorConfig.model_validate(d["user_config"])
        auto = d.get("autoscaling_config")
        if auto:
            assert 1 <= auto["min_replicas"] <= auto["max_replicas"]
            assert auto["target_ongoing_requests"] <= d.get(
                "max_ongoing_requests", DEPLOYMENT_OPTIONS[d["name"]].get("max_ongoing_requests", 5)
            )


@pytest.mark.parametrize("name", CLUSTER_SERVE_CONFIGS)
def test_cluster_serve_config_runs_the_cluster_setup(name):
    """The GPU config is the clustered form of the root application: a Milvus server, the
    embedder on the GPU and autoscaling, every built deployment's placement explicit, code
    installed on the nodes (no working_dir)."""
    from deployments.app import AppArgs

    doc = SERVE_CONFIGS[name]()
    (app,) = doc["applications"]
    config = AppArgs.model_validate(app["args"]).load()
    mem = config.memory
    assert mem.backend == "milvus" and not mem.milvus.is_lite
    assert mem.milvus.uri.startswith("http")
    assert mem.pool.shards > 1 and mem.pool.query_embedding == "embedder"
    assert mem.embedding.device == "cuda"
    assert config.global_.upstream.base_url and config.global_.upstream.api_key_env == "UPSTREAM_API_KEY"
    assert "working_dir" not in app.get("runtime_env", {})

    deployments = {d["name"]: d for d in app["deployments"]}
    assert set(deployments) == _built_deployments(config) == {"Embedder", "StorePool", "MemoryIngress", "Consolidator"}
    emb = deployments["Embedder"]
    assert emb["ray_actor_options"]["num_gpus"] > 0
    assert emb["autoscaling_config"]["max_replicas"] > emb["autoscaling_config"]["min_replicas"]
    for other in ("StorePool", "MemoryIngress", "Consolidator"):
        assert deployments[other]["ray_actor_options"].get("num_gpus", 0) == 0
        assert deployments[other]["ray_actor_options"]["num_cpus"] > 0


def test_rayservice_serve_config_is_the_gpu_serve_config():
    assert _rayservice_serve_config() == _load(GPU_SERVE_CONFIG)


def test_serve_schema_refuses_a_local_working_dir():
    """The error this directory's GPU config had: Serve accepts only remote URIs."""
    from pydantic import ValidationError
    from ray.serve.schema import ServeDeploySchema

    doc = _load(GPU_SERVE_CONFIG)
    doc["applications"][0]["runtime_env"]["working_dir"] = "."
    with pytest.raises(ValidationError, match="working_dir"):
        ServeDeploySchema.model_validate(doc)
    doc["applications"][0]["runtime_env"]["working_dir"] = "https://example.com/memory-router-0.1.0.zip"
    ServeDeploySchema.model_validate(doc)


@pytest.mark.parametrize("name", CLUSTER_SERVE_CONFIGS)
def test_store_credentials_are_environment_variable_names(name):
    """The cluster configs name the variables holding the Milvus token and the Valkey cache
    password (no literal secret: a literal ``token`` is refused)."""
    from deployments.app import AppArgs
    from memory_core.errors import ConfigError

    args = copy.deepcopy(SERVE_CONFIGS[name]()["applications"][0]["args"])
    memory = AppArgs.model_validate(args).load().memory
    assert memory.milvus.token_env == "MILVUS_TOKEN" and memory.milvus.token is None
    assert memory.cache.password_env == "VALKEY_PASSWORD"
    args["config"]["global"]["stores"]["memory"]["milvus"]["token"] = "root:Milvus"
    with pytest.raises(ConfigError, match="token_env") as e:
        AppArgs.model_validate(args).load()
    assert "root:Milvus" not in str(e.value)


# ---------------------------------------------------------------------------- cluster launcher


def _prepared_launcher_config(doc: dict[str, Any] | None = None) -> dict[str, Any]:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(copy.deepcopy(doc if doc is not None else _load(LAUNCHER_CONFIG)))
    validate_config(config)
    return config


def test_launcher_config_passes_rays_launcher_validation():
    config = _prepared_launcher_config()
    assert config["provider"]["type"] == "aws"
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"]["CPU"] == 0
    assert any("--num-cpus=0" in c for c in config["head_start_ray_commands"])
    gpu = [t for n, t in types.items() if t["resources"].get("GPU", 0) > 0]
    assert gpu and all(t["max_workers"] >= t["min_workers"] for t in types.values())
    # every node installs the project (no working_dir in the Serve config)
    node_setups = [config["head_setup_commands"], config["worker_setup_commands"]]
    node_setups += [t["worker_setup_commands"] for t in types.values() if "worker_setup_commands" in t]
    for commands in node_setups:
        assert any("memory-router[serve]" in c for c in commands), commands


def test_launcher_validation_can_fail():
    from jsonschema import ValidationError

    doc = _load(LAUNCHER_CONFIG)
    doc["available_node_types"]["head"]["resources"]["CPU"] = "zero"
    with pytest.raises(ValidationError):
        _prepared_launcher_config(doc)


# ---------------------------------------------------------------------------- KubeRay


def _kuberay_custom_resources(params: dict[str, str]) -> dict[str, float]:
    """rayStartParams.resources: KubeRay's quoted JSON string, ``'"{\\"name\\": 1}"'``."""
    raw = params.get("resources")
    if raw is None:
        return {}
    return json.loads(raw.strip('"').replace('\\"', '"'))


def _kuberay_group_resources(group: dict[str, Any]) -> dict[str, float]:
    params = group.get("rayStartParams", {})
    (container,) = [c for c in group["template"]["spec"]["containers"] if c["name"].startswith("ray-")]
    limits = container.get("resources", {}).get("limits", {})
    out = {
        "CPU": float(params["num-cpus"]) if "num-cpus" in params else float(limits.get("cpu", 0)),
        "GPU": float(params["num-gpus"]) if "num-gpus" in params else float(limits.get("nvidia.com/gpu", 0)),
    }
    out.update(_kuberay_custom_resources(params))
    return out


def test_rayservice_manifest():
    doc = _load(RAYSERVICE)
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayService"
    assert isinstance(doc["spec"]["serveConfigV2"], str)
    cluster = doc["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == "2.60.0"
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert _kuberay_group_resources(head) == {"CPU": 0.0, "GPU": 0.0}
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert _kuberay_group_resources(groups["gpu-embedder"])["GPU"] == 1
    assert _kuberay_group_resources(groups["gpu-embedder"])["memory_router_gpu"] > 0
    assert _kuberay_group_resources(groups["cpu-workers"])["memory_router_cpu"] > 0
    for g in groups.values():
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
    # the upstream key comes from a Secret, on the group that runs MemoryIngress
    (container,) = groups["cpu-workers"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["UPSTREAM_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "memory-router-secrets",
        "key": "upstream-api-key",
    }
    # ... and the store credentials the serve config names, on the group that runs the store shards
    memory = _rayservice_serve_config()["applications"][0]["args"]["config"]["global"]["stores"]["memory"]
    for variable, key in (
        (memory["milvus"]["token_env"], "milvus-token"),
        (memory["cache"]["password_env"], "valkey-password"),
    ):
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": "memory-router-secrets", "key": key}


def test_the_cluster_configs_keep_serves_proxy_whose_peer_address_the_ingress_checks():
    """Both cluster configs bind the HTTP port on every interface with ``trusted_header`` access:
    behind HAProxy (``serve.env``'s mode) the ingress would see every caller as HAProxy's
    loopback address and the service refuses to start (``check_peer_addresses``), so no node
    of theirs turns HAProxy on (README "Serving mode")."""
    from deployments.serve_env import serve_env

    assert serve_env()["RAY_SERVE_ENABLE_HA_PROXY"] == "1"  # the mode this test keeps out
    cluster = _load(RAYSERVICE)["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        for container in group["template"]["spec"]["containers"]:
            names = {e["name"] for e in container.get("env", [])}
            assert "RAY_SERVE_ENABLE_HA_PROXY" not in names and "RAY_SERVE_THROUGHPUT_OPTIMIZED" not in names
    launcher = _load(LAUNCHER_CONFIG)
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert not any("RAY_SERVE_ENABLE_HA_PROXY" in c for c in launcher[key]), key


# ---------------------------------------------------------------------------- placement


def _launcher_cluster() -> tuple[dict[str, float], list[tuple[str, dict[str, float], int]]]:
    config = _prepared_launcher_config()
    types = config["available_node_types"]
    head = {k: float(v) for k, v in types[config["head_node_type"]]["resources"].items()}
    workers = [
        (n, {k: float(v) for k, v in t["resources"].items()}, t["max_workers"])
        for n, t in types.items()
        if n != config["head_node_type"]
    ]
    return head, workers


def _kuberay_cluster() -> tuple[dict[str, float], list[tuple[str, dict[str, float], int]]]:
    cluster = _load(RAYSERVICE)["spec"]["rayClusterConfig"]
    head = _kuberay_group_resources(cluster["headGroupSpec"])
    workers = [(g["groupName"], _kuberay_group_resources(g), g["maxReplicas"]) for g in cluster["workerGroupSpecs"]]
    return head, workers


CLUSTERS = {
    "ray-cluster.yaml": (_launcher_cluster, "cluster/serve_config.gpu.yaml"),
    "rayservice.yaml": (_kuberay_cluster, "cluster/kuberay/rayservice.yaml#serveConfigV2"),
}


def _replica_demand(d: dict[str, Any]) -> dict[str, float]:
    from deployments.app import DEPLOYMENT_OPTIONS

    opts = d.get("ray_actor_options", DEPLOYMENT_OPTIONS[d["name"]].get("ray_actor_options", {}))
    # Serve gives a replica without num_cpus 1 CPU (ray.serve._private.config.ReplicaConfig)
    demand = {"CPU": float(opts.get("num_cpus", 1)), "GPU": float(opts.get("num_gpus", 0))}
    demand.update({k: float(v) for k, v in opts.get("resources", {}).items()})
    return {k: v for k, v in demand.items() if v > 0}


def _fits(demand: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(k, 0.0) >= v for k, v in demand.items())


def _max_replicas(d: dict[str, Any]) -> int:
    return d["autoscaling_config"]["max_replicas"] if "autoscaling_config" in d else d.get("num_replicas", 1)


@pytest.mark.parametrize("cluster_name", sorted(CLUSTERS))
def test_no_replica_on_the_head_and_every_replica_has_a_worker_group(cluster_name):
    from deployments.app import AppArgs
    from deployments.store_pool import shard_resources

    describe, serve_name = CLUSTERS[cluster_name]
    head, workers = describe()
    assert head.get("CPU") == 0 and head.get("GPU", 0) == 0
    (app,) = SERVE_CONFIGS[serve_name]()["applications"]

    used: dict[str, dict[str, float]] = {name: {} for name, _, _ in workers}
    for d in app["deployments"]:
        demand = _replica_demand(d)
        assert demand, f"{d['name']} asks for nothing: Ray may place it on the head"
        assert not _fits(demand, head), f"{d['name']} ({demand}) fits on the head ({head})"
        homes = [(name, node, n) for name, node, n in workers if _fits(demand, node)]
        assert homes, f"{d['name']} ({demand}) fits on no worker group of {cluster_name}"
        # custom resources pin each deployment to one group; count its peak demand there
        assert len(homes) == 1, f"{d['name']} fits on several groups: {[h[0] for h in homes]}"
        (home, node, _) = homes[0]
        for k, v in demand.items():
            used[home][k] = used[home].get(k, 0.0) + v * _max_replicas(d)
        if d["name"] == "StorePool":  # its shards ask for a sliver of the pool's custom resources, on its group
            shards = AppArgs.model_validate(app["args"]).load().memory.pool.shards
            for k, v in shard_resources(demand).items():
                assert k in node
                used[home][k] += v * shards * _max_replicas(d)

    # at their maximum size the groups hold every deployment at its maximum replica count
    for name, node, max_nodes in workers:
        for k, v in used[name].items():
            assert v <= node.get(k, 0.0) * max_nodes, f"{cluster_name}/{name}: peak {k} {v} > {node[k]} × {max_nodes}"
