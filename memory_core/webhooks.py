"""Webhook delivery of memory events: ``WebhookDispatcher`` reads the outbox of an
``events.EventLog`` and POSTs each event, signed by the Standard Webhooks scheme
(``standardwebhooks.Webhook.sign``: headers ``webhook-id`` = the event id, the same on every
retry; ``webhook-timestamp``; ``webhook-signature`` ``v1,<base64 HMAC-SHA256>``), to each
configured endpoint with ``httpx``.

At least once: an event leaves the outbox only when its endpoint answered 2xx; any other
answer, a timeout or a connection error is retried after ``RetryPolicy``'s backoff until its
attempts or age are spent (then ``failed``: counted, kept in the feed). In order per memory:
``EventLog.due`` hands out only the earliest pending event of each memory, so event n+1 of a
memory is sent after event n was delivered (or failed); events of different memories go out
concurrently, ``batch`` at a time per endpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from standardwebhooks.webhooks import Webhook

from .event_settings import EventsSettings, WebhookEndpoint
from .events import EventKind, EventLog, MemoryEvent, PendingDelivery, RetryPolicy, utcnow, webhook_payload

log = logging.getLogger(__name__)


def signed_request(secret: str, event: MemoryEvent, when: datetime | None = None) -> tuple[bytes, dict[str, str]]:
    """The body (compact JSON of ``events.webhook_payload``) and headers of the webhook for
    ``event``, signed with ``secret`` (``whsec_``+base64) at ``when`` (default now)."""
    when = (when or utcnow()).astimezone(UTC)
    body = json.dumps(webhook_payload(event), separators=(",", ":"), sort_keys=True)
    signature = Webhook(secret).sign(event.event_id, when, body)
    headers = {
        "content-type": "application/json",
        "webhook-id": event.event_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
    }
    return body.encode("utf-8"), headers


@dataclass(frozen=True)
class Receiver:
    """A configured endpoint with its signing secret (read from the environment)."""

    endpoint: WebhookEndpoint
    secret: str = field(repr=False)  # never in a log line or a traceback's locals

    @property
    def key(self) -> str:
        return self.endpoint.key

    @property
    def kinds(self) -> list[EventKind] | None:
        return list(self.endpoint.kinds) or None


def receivers(settings: EventsSettings, environ: Mapping[str, str]) -> list[Receiver]:
    """Every endpoint of ``settings`` with its secret. Raises ``ConfigError`` (a secret
    variable unset or too short), so the dispatcher fails at start."""
    return [Receiver(w, w.signing_secret(environ)) for w in settings.webhooks]


class WebhookDispatcher:
    """Delivers the outbox of ``log`` to ``targets``. ``on_outcome(endpoint, outcome)`` is
    called once per attempt with ``delivered``, ``retry`` or ``failed``. ``client``: the
    ``httpx.AsyncClient`` to send with (default: one of its own, no redirects followed)."""

    def __init__(
        self,
        log: EventLog,
        targets: Sequence[Receiver],
        policy: RetryPolicy,
        *,
        batch: int = 50,
        client: httpx.AsyncClient | None = None,
        on_outcome: Callable[[str, str], None] | None = None,
        now: Callable[[], datetime] = utcnow,
        rng: random.Random | None = None,
    ):
        self.log = log
        self.targets = list(targets)
        self.policy = policy
        self.batch = batch
        self._client = client or httpx.AsyncClient(follow_redirects=False)
        self._on_outcome = on_outcome
        self._now = now
        self._rng = rng or random.Random()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def run_once(self) -> dict[str, int]:
        """One round: new events enqueued for every endpoint, then up to ``batch`` due
        deliveries per endpoint sent. Returns ``{"delivered", "retry", "failed"}`` counts."""
        totals = {"delivered": 0, "retry": 0, "failed": 0}
        for target in self.targets:
            self.log.enqueue(target.key, target.kinds, self._now())
            due = self.log.due(target.key, self._now(), self.batch)
            outcomes = await asyncio.gather(*(self._send(target, d) for d in due))
            for outcome in outcomes:
                totals[outcome] += 1
        return totals

    async def _send(self, target: Receiver, delivery: PendingDelivery) -> str:
        event = delivery.event
        body, headers = signed_request(target.secret, event, self._now())
        try:
            answer = await self._client.post(
                target.endpoint.url, content=body, headers=headers, timeout=target.endpoint.timeout_s
            )
            error = None if 200 <= answer.status_code < 300 else f"status {answer.status_code}"
        except httpx.HTTPError as e:
            error = type(e).__name__
        if error is None:
            self.log.delivered(target.key, event.sequence or 0)
            outcome = "delivered"
        else:
            again = self.log.attempt_failed(target.key, delivery, error, self.policy, self._now(), self._rng)
            outcome = "retry" if again else "failed"
            if not again:
                log.warning("webhook delivery of event %s to %s failed for good: %s", event.event_id, target.key, error)
        if self._on_outcome is not None:
            try:
                self._on_outcome(target.key, outcome)
            except Exception:  # a metric must not stop deliveries
                log.debug("on_outcome failed", exc_info=True)
        return outcome
