"""Settings of the event feed and its webhooks: ``global.stores.memory.events``
(``EventsSettings``; the log itself is ``memory_core.events``).

Under ``global.stores.memory`` because the store shards write the events (they see every
lifecycle change, ``memory_core.stores.recording``) and are given exactly these settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .errors import ConfigError
from .events import EventKind, RetryPolicy

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
MIN_WEBHOOK_SECRET_BYTES = 24
"""The shortest signing secret accepted (Standard Webhooks: 24 to 64 bytes)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class WebhookEndpoint(_Strict):
    """One receiver: ``url`` (http or https, no credentials), ``secret_env`` (the environment
    variable holding its signing secret, ``whsec_`` + base64 as Standard Webhooks gives it),
    ``kinds`` (the event kinds it gets; empty: every kind), ``name`` (its key in the outbox and
    the metrics; default: the url), ``timeout_s`` per attempt."""

    url: str
    secret_env: str = Field(pattern=_ENV_NAME)
    secret: Any = None
    """Refused when set (a literal secret); see ``secret_env``."""
    kinds: list[EventKind] = Field(default_factory=list)
    name: str | None = Field(default=None, min_length=1, max_length=200)
    timeout_s: float = Field(default=10.0, gt=0, le=120)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.fullmatch(r"https?://[^/?#@\s]+(/[^#\s]*)?", url):
            raise ValueError(f"url must be an http(s)://host[:port][/path] URL without credentials, got {url!r}")
        return url

    @model_validator(mode="after")
    def _no_literal_secret(self) -> WebhookEndpoint:
        if self.secret is not None:
            raise ValueError(
                "secret: a literal secret in the configuration is refused (it would travel in the Serve config); "
                "put it in an environment variable and name the variable in secret_env"
            )
        return self

    @property
    def key(self) -> str:
        """The endpoint's key in the outbox: ``name``, else the url."""
        return self.name or self.url

    def signing_secret(self, environ: Mapping[str, str]) -> str:
        """The secret in ``environ[secret_env]``. Raises ``ConfigError`` when it is unset or
        decodes to fewer than ``MIN_WEBHOOK_SECRET_BYTES`` bytes (never echoing it)."""
        import base64
        import binascii

        value = environ.get(self.secret_env, "")
        try:
            raw = base64.b64decode(value.removeprefix("whsec_") + "==", validate=False)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) < MIN_WEBHOOK_SECRET_BYTES:
            raise ConfigError(
                f"events.webhooks[{self.key}].secret_env: the variable {self.secret_env} is unset or not a base64 "
                f"secret of at least {MIN_WEBHOOK_SECRET_BYTES} bytes (whsec_...)"
            )
        return value


class WebhookRetrySettings(_Strict):
    """``RetryPolicy`` of the deliveries: backoff from ``initial_delay_s`` doubling up to
    ``max_delay_s`` (equal jitter), at most ``max_attempts`` attempts within ``max_age_s``."""

    initial_delay_s: float = Field(default=1.0, gt=0)
    max_delay_s: float = Field(default=300.0, gt=0)
    max_attempts: int = Field(default=12, ge=1)
    max_age_s: float = Field(default=86400.0, gt=0)

    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.initial_delay_s, self.max_delay_s, self.max_attempts, self.max_age_s)


class EventsSettings(_Strict):
    """``global.stores.memory.events``: ``enabled`` (record lifecycle events; default on),
    ``path`` (the SQLite file of the feed and outbox), ``webhooks`` (receivers; none: no
    dispatcher is deployed), ``retry``, ``poll_interval_s`` (how often the dispatcher looks
    for new events) and ``batch`` (deliveries per endpoint per round, sent concurrently)."""

    enabled: bool = True
    path: str = "./data/events.sqlite"
    webhooks: list[WebhookEndpoint] = Field(default_factory=list)
    retry: WebhookRetrySettings = Field(default_factory=WebhookRetrySettings)
    poll_interval_s: float = Field(default=1.0, gt=0, le=60)
    batch: int = Field(default=50, ge=1, le=1000)

    @model_validator(mode="after")
    def _unique_endpoints(self) -> EventsSettings:
        keys = [w.key for w in self.webhooks]
        if len(set(keys)) != len(keys):
            raise ValueError("webhooks: two endpoints have the same name (or url)")
        if self.webhooks and not self.enabled:
            raise ValueError("webhooks need enabled: true (they deliver the recorded events)")
        return self
