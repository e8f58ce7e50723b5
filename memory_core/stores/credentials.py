"""Credentials of the store backends, read from the environment when a store opens.

The configuration names environment variables (``milvus.token_env``,
``milvus.password_env``, ``valkey.password_env``, ``cache.password_env``,
``qdrant.api_key_env``), never secrets; on Kubernetes the variables come from a Secret
(``env: valueFrom: secretKeyRef``), with ``ray up`` from the environment file every node
exports. Nothing here logs a secret or puts one in an error message.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from valkey.asyncio import Valkey

    from ..config import ValkeyConnectionSettings


def secret_from_env(variable: str, key: str) -> str:
    """The value of environment variable ``variable``, which the configuration key ``key``
    (e.g. ``global.stores.memory.milvus.password_env``) names.

    Raises ``ConfigError`` naming ``key`` and ``variable`` (not the value) when the variable
    is unset or empty."""
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(
            f"{key}: environment variable {variable} is not set (or empty) in this process; it must hold the secret"
        )
    return value


def valkey_client(
    settings: ValkeyConnectionSettings, key: str, *, socket_timeout: float, socket_connect_timeout: float
) -> Valkey:
    """An asyncio Valkey client for ``settings`` (``decode_responses=False``): the URL, the
    username and the password read from ``settings.password_env`` (``key`` is the settings'
    configuration key, for errors), TLS when ``settings.tls`` or a ``valkeys://``/``rediss://``
    URL, verified against ``settings.ca_cert_path`` when given. Connects lazily (no I/O
    here). Timeouts in seconds.

    Raises ``ConfigError`` when the password variable is missing."""
    import valkey.asyncio as avalkey

    url = settings.url
    kwargs: dict[str, Any] = {
        "decode_responses": False,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_connect_timeout,
    }
    if settings.password_env:
        kwargs["password"] = secret_from_env(settings.password_env, f"{key}.password_env")
    if settings.username:
        kwargs["username"] = settings.username
    if settings.tls and url.startswith(("valkey://", "redis://")):
        url = url.replace("valkey://", "valkeys://", 1).replace("redis://", "rediss://", 1)
    if settings.ca_cert_path:
        kwargs["ssl_ca_certs"] = settings.ca_cert_path
    return avalkey.from_url(url, **kwargs)
