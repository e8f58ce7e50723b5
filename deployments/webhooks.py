"""``WebhookDispatcher``: the Serve deployment (one replica, ``num_cpus: 0``) that delivers
the lifecycle events of the outbox to the configured webhooks
(``global.stores.memory.events.webhooks``; ``memory_core.webhooks``). The application graph
holds it only when webhooks are configured (``deployments.app``).

One replica, so each event is sent by one loop; its state is the SQLite outbox, so a
replaced or restarted replica goes on where the last one stopped (at least once: an event
whose 2xx answer was not yet recorded is sent again, with the same ``webhook-id``). It never
touches a chat: the store shards append the events, this loop only reads them.

Every ``poll_interval_s`` one round (``memory_core.webhooks.WebhookDispatcher.run_once``);
each attempt counted in ``memory_webhook_deliveries{outcome}`` (delivered / retry / failed).
Serve's health check fails when the loop has died, so Serve replaces the replica.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ray import serve

from memory_core.event_settings import EventsSettings
from memory_core.events import EventLog
from memory_core.webhooks import WebhookDispatcher as Dispatcher
from memory_core.webhooks import receivers

from .metrics import RayMetrics

log = logging.getLogger("ray.serve")


@serve.deployment
class WebhookDispatcher:
    """Args: ``settings`` (``global.stores.memory.events``). A signing secret variable that
    is unset or too short fails the replica's start (``ConfigError``)."""

    def __init__(self, settings: EventsSettings):
        self.settings = settings
        self._metrics = RayMetrics(names=("memory_webhook_deliveries",))
        self._dispatcher = Dispatcher(
            EventLog(settings.path),
            receivers(settings, os.environ),
            settings.retry.policy(),
            batch=settings.batch,
            on_outcome=lambda endpoint, outcome: self._metrics.count("memory_webhook_deliveries", {"outcome": outcome}),
        )
        self.rounds = 0
        self._task = asyncio.get_event_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                await self._dispatcher.run_once()
            except Exception as e:  # a failed round (the file busy, say) is retried next interval
                log.warning("webhook round failed: %s", type(e).__name__)
            self.rounds += 1
            await asyncio.sleep(self.settings.poll_interval_s)

    async def stats(self) -> dict[str, Any]:
        """``{"rounds", "endpoints": {key: {"pending", "delivered", "failed"}}}`` (tests, operators)."""
        counts = {t.key: vars(self._dispatcher.log.delivery_counts(t.key)) for t in self._dispatcher.targets}
        return {"rounds": self.rounds, "endpoints": counts}

    async def check_health(self) -> None:
        """Serve health check: fails when the loop is no longer running."""
        if self._task.done():
            raise RuntimeError(f"webhook loop stopped: {self._task.exception()!r}")
