"""The layering of the package, read from the code's own imports (``ast``):

- ``memory_core`` imports no Ray, no FastAPI/Starlette and nothing of ``deployments``;
- inside ``memory_core`` every import goes down the layers (or stays in its own room):
  ``types/errors/sanitize/config`` ← ``embedding``, ``retrieval`` ← ``curation`` ← ``stores`` ← ``chat`` ←
  ``migration``, ``cli``, ``locomo``;
- no import cycle among the modules of ``memory_core`` and ``deployments``;
- no deployment calls ``ray.get`` / ``ray.wait`` (each would block its replica's event loop).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {  # module prefix → (room, rank)
    "memory_core.types": ("base", 0),
    "memory_core.errors": ("base", 0),
    "memory_core.sanitize": ("base", 0),
    "memory_core.config": ("base", 0),
    "memory_core.access": ("access", 0.5),
    "memory_core.embedding": ("embedding", 1),
    "memory_core.retrieval": ("retrieval", 1),
    "memory_core.curation": ("curation", 1.5),
    "memory_core.stores": ("stores", 2),
    "memory_core.chat": ("chat", 3),
    "memory_core.migration": ("tools", 4),
    "memory_core.admin": ("tools", 4),
    "memory_core.cli": ("tools", 4),
    "memory_core.locomo": ("tools", 4),
}
FORBIDDEN_IN_CORE = ("ray", "fastapi", "starlette", "deployments")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved; an
    ``from package import name`` counts the submodule when it is one)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (ROOT / (candidate.replace(".", "/") + ".py")).exists() or (
                    ROOT / candidate.replace(".", "/")
                ).is_dir():
                    out.add(candidate)
    return out


_GRAPH: dict[str, set[str]] = {}


def _graph() -> dict[str, set[str]]:
    if _GRAPH:
        return _GRAPH
    graph = _GRAPH
    for top in ("memory_core", "deployments"):
        for path in (ROOT / top).rglob("*.py"):
            graph[_module_name(path)] = _imports(path)
    return graph


def _layer(module: str) -> tuple[str, int] | None:
    """(room, rank) of a memory_core module; None outside the layered rooms."""
    for prefix, room in sorted(LAYERS.items(), key=lambda kv: -len(kv[0])):
        if module == prefix or module.startswith(prefix + "."):
            return room
    return None


def test_memory_core_imports_no_ray_no_http_framework_and_nothing_of_deployments():
    bad = [
        (module, imported)
        for module, imports in _graph().items()
        if module.startswith("memory_core")
        for imported in imports
        if imported.split(".")[0] in FORBIDDEN_IN_CORE
    ]
    assert bad == []


def test_imports_inside_memory_core_only_go_down_the_layers():
    upward = []
    for module, imports in _graph().items():
        here = _layer(module)
        if here is None or module.startswith("memory_core.testing"):
            continue
        for imported in imports:
            there = _layer(imported)
            if there is None:
                continue
            same_room = there[0] == here[0]
            if not same_room and there[1] >= here[1]:
                upward.append((module, imported))
    assert upward == []


def test_no_import_cycle():
    nodes = set(_graph())
    graph = {m: {i for i in imports if i in nodes} for m, imports in _graph().items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == node:
                continue
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt] if nxt in stack else [node, nxt])
            elif state.get(nxt) is None:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    # a package importing its own submodules (``__init__`` re-exports) is not a cycle of rooms
    real = [c for c in cycles if not all(m.startswith(c[0] + ".") or c[0].startswith(m + ".") or m == c[0] for m in c)]
    assert real == []


def test_no_deployment_blocks_its_event_loop_on_ray_get():
    """A replica runs its constructor and its coroutine methods on its event loop (Serve
    awaits an ``async def __init__``; plain methods go to a thread pool), so a blocking
    ``ray.get`` / ``ray.wait`` there stalls every request of that replica: deployments await
    object refs instead, and use no blocking call anywhere so none moves into a coroutine."""
    offenders = []
    for path in sorted((ROOT / "deployments").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"get", "wait"}
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ray"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
