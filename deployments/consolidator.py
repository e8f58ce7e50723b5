"""``Consolidator``: the background consolidation loop, a Serve deployment with one replica.

Every ``interval_s`` it asks each store shard for the users with writes since their last pass
(``StoreShard.take_dirty_users``, at most ``max_users_per_pass`` per shard) and runs one
consolidation pass for each (``StoreShard.consolidate``: expired memories purged,
near-duplicates merged; ``memory_core.stores.curating``), one user at a time, so the loop's
work per interval is bounded. ``POST /v1/memory/consolidate`` runs a pass for the caller on
demand through the same shard method.

Knobs (``user_config``, applied without a restart): ``enabled`` (bool, default true),
``interval_s`` (float > 0, default 60), ``max_users_per_pass`` (int ≥ 1, default 100).

Metrics (Ray's metrics endpoint, next to ``ray_serve_*``): ``memory_consolidation_passes``
(counter, by ``outcome``: ok / error), ``memory_consolidation_groups`` (counter: groups
merged), ``memory_consolidation_expired`` (counter: memories purged),
``memory_consolidation_pass_seconds`` (histogram: one user's pass); the store shards count
``llm_memory_consolidation_total{backend,event}`` (declared in ``memory_core.chat.metrics``). Serve's health check fails
when the loop has died, so Serve replaces the replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ray import serve

from memory_core.errors import InvalidInput

from .metrics import RayMetrics

log = logging.getLogger("ray.serve")


class ConsolidatorConfig(BaseModel):
    """The ``user_config`` of the ``Consolidator`` deployment."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    interval_s: float = Field(default=60.0, gt=0)
    max_users_per_pass: int = Field(default=100, ge=1)


@serve.deployment
class Consolidator:
    """Args: the ``StorePool`` handle (for the shard handles)."""

    def __init__(self, store_pool):
        self._pool = store_pool
        self.config = ConsolidatorConfig()
        self._wake = asyncio.Event()
        self._metrics = RayMetrics(
            names=(
                "memory_consolidation_passes",
                "memory_consolidation_groups",
                "memory_consolidation_expired",
                "memory_consolidation_pass_seconds",
            )
        )
        self.passes = 0
        self._task = asyncio.get_event_loop().create_task(self._loop())

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Apply ``user_config`` (see the module docstring) and wake the loop, so a shorter
        interval or ``enabled: true`` takes effect now. Raises ``InvalidInput``.

        A coroutine on purpose: Serve runs a synchronous ``reconfigure`` on a thread of its
        pool (``RAY_SERVE_RUN_SYNC_IN_THREADPOOL``, Ray 2.60), and an ``asyncio.Event`` set
        from another thread does not wake the loop that waits on it."""
        try:
            self.config = ConsolidatorConfig.model_validate(user_config or {})
        except ValidationError as e:
            raise InvalidInput(f"Consolidator user_config: {e}") from e
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            if self.config.enabled:
                try:
                    await self.run_once()
                except Exception as e:  # a failed round is logged; the next interval tries again
                    log.warning("consolidation round failed: %r", e)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.interval_s)

    async def run_once(self) -> dict[str, int]:
        """One round over every shard's dirty users; returns ``{"users", "groups",
        "expired", "errors"}``."""
        totals = {"users": 0, "groups": 0, "expired": 0, "errors": 0}
        for shard in await self._pool.shard_handles.remote():
            for user_id in await shard.take_dirty_users.remote(self.config.max_users_per_pass):
                try:
                    report = await shard.consolidate.remote(user_id)
                except Exception as e:
                    totals["errors"] += 1
                    self._metrics.count("memory_consolidation_passes", {"outcome": "error"})
                    log.warning("consolidation pass failed for one user: %r", e)
                    continue
                totals["users"] += 1
                totals["groups"] += report.groups
                totals["expired"] += report.expired
                self._metrics.count("memory_consolidation_passes", {"outcome": "ok"})
                if report.groups:
                    self._metrics.count("memory_consolidation_groups", value=report.groups)
                if report.expired:
                    self._metrics.count("memory_consolidation_expired", value=report.expired)
                self._metrics.observe("memory_consolidation_pass_seconds", report.seconds)
        self.passes += 1
        return totals

    async def stats(self) -> dict[str, Any]:
        """``{"rounds": completed rounds, "config": user_config}`` (tests, operators)."""
        return {"rounds": self.passes, "config": self.config.model_dump()}

    async def check_health(self) -> None:
        """Serve health check: fails when the loop is no longer running."""
        if self._task.done():
            raise RuntimeError(f"consolidation loop stopped: {self._task.exception()!r}")
