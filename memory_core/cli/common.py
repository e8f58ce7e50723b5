"""What every service command of the CLI shares: the connection and identity options (added to
a command by ``service_options``), the HTTP client (retrying 429 after ``Retry-After``), and the
translation of failures into one clear line on stderr and an exit code.

Identity (``access_contract``): ``--api-key`` (or ``$MEMORY_ROUTER_API_KEY``) is sent as
``Authorization: Bearer <key>`` (``api_key`` mode: the key carries the user and role);
``--user`` is sent as ``x-authz-user-id`` and ``--role`` as ``x-authz-role`` (``trusted_header``
mode: the service honours them from trusted proxies only). One of the two is required.
An admin acts on another user's memories with the ``user_id`` query parameter
(``Identity.for_user``).

Errors: the service cannot be reached → ``cannot reach the service at URL``; an error status
→ ``HTTP <status> <code>: <message>`` from the API's ``{"error": {"code", "message"}}`` body
(plus a hint on 401/403/429); all exit ``EXIT_ERROR`` (2).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import typer
from httpx_retries import Retry, RetryTransport
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from ..access import JSON_CONTENT_TYPE, Role
from ..sanitize import ROLE_HEADER, USER_HEADER

API_KEY_ENV = "MEMORY_ROUTER_API_KEY"
URL_ENV = "MEMORY_ROUTER_URL"
DEFAULT_URL = "http://127.0.0.1:8000"

EXIT_PARTIAL = 1
"""Some items failed (import lines, users of ``consolidate --all``); the rest was done."""
EXIT_ERROR = 2
"""Nothing (more) could be done: bad options, the service unreachable or answering an error."""

RETRY_429 = 5
"""How many times a 429 answer is retried (after its ``Retry-After``) before it is an error."""
MAX_RETRY_AFTER_S = 30.0

console = Console(stderr=True, soft_wrap=True)
"""Messages, progress bars and errors: stderr (stdout carries data: an export, a new key, tables)."""
stdout = Console()


BaseUrl = Annotated[str, typer.Option("--base-url", envvar=URL_ENV, help="Service base URL.")]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar=API_KEY_ENV,
        show_envvar=True,
        help="API key, sent as 'Authorization: Bearer' (api_key mode).",
    ),
]
UserOpt = Annotated[
    str | None, typer.Option("--user", "-u", help="Caller id sent as x-authz-user-id (trusted_header mode).")
]
RoleOpt = Annotated[
    Role | None, typer.Option("--role", help="Role sent as x-authz-role with --user (trusted_header mode).")
]
Timeout = Annotated[float, typer.Option("--timeout", min=0.1, help="HTTP timeout in seconds.")]


class CliError(Exception):
    """A failure to report (``message``) and exit with ``code``; ``status``: the HTTP status
    when the service answered with an error."""

    def __init__(self, message: str, code: int = EXIT_ERROR, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


def fail(message: str, code: int = EXIT_ERROR) -> typer.Exit:
    """Print ``error: message`` on stderr; returns the ``typer.Exit(code)`` to raise."""
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    return typer.Exit(code)


@dataclass(frozen=True)
class Identity:
    """Who the CLI is to the service: an API key, or a user id (and role) in headers."""

    api_key: str | None = None
    user: str | None = None
    role: Role | None = None

    @classmethod
    def from_options(cls, api_key: str | None, user: str | None, role: Role | None) -> Identity:
        """Validate the identity options. Raises ``CliError`` when neither ``--api-key`` nor
        ``--user`` is given, when both are, or for ``--role`` without ``--user``."""
        api_key = api_key or None  # an empty $MEMORY_ROUTER_API_KEY is no key
        if api_key and user:
            raise CliError(
                f"give --api-key or --user, not both (unset ${API_KEY_ENV} to use --user in trusted_header mode)"
            )
        if role is not None and not user:
            raise CliError("--role goes with --user (an API key carries its own role)")
        if not api_key and not user:
            raise CliError(
                f"no identity: give --api-key KEY (or set ${API_KEY_ENV}), or --user ID when the service "
                "trusts identity headers (trusted_header mode)"
            )
        return cls(api_key=api_key, user=user, role=role)

    def headers(self) -> dict[str, str]:
        """The request headers carrying this identity (none for ``Identity()``: each request
        sets its own, as ``replay-locomo`` does)."""
        if self.api_key:
            return {"authorization": f"Bearer {self.api_key}"}
        if not self.user:
            return {}
        out = {USER_HEADER: self.user}
        if self.role is not None:
            out[ROLE_HEADER] = self.role.value
        return out

    def describe(self) -> str:
        """For messages: ``API key mr_abc…`` or ``user 'alice' (admin)``; never the whole key."""
        if self.api_key:
            return f"API key {self.api_key[:6]}…"
        return f"user {self.user!r}" + (f" ({self.role.value})" if self.role else "")


def for_user(user_id: str | None) -> dict[str, str]:
    """Query parameters acting on ``user_id``'s memories (``{}``: the caller's own)."""
    return {"user_id": user_id} if user_id else {}


# --------------------------------------------------------------------------- errors
def _retry_after(response: httpx.Response) -> float:
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(response.headers.get("retry-after", "1"))))
    except ValueError:
        return 1.0


def api_error(response: httpx.Response) -> CliError:
    """The ``CliError`` of an error ``response`` (status ≥ 400): ``METHOD PATH: HTTP status
    code: message`` from the API's error body (its text when it has none), and a hint for
    401 (identity), 403 (role or trusted proxy), 404 on ``/v1/admin`` (the service has no
    admin API) and 429 (rate limit). The body must have been read."""
    code, message = "", ""
    try:
        body = response.json()
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            code, message = str(err.get("code") or ""), str(err.get("message") or "")
        elif isinstance(err, str):
            message = err
        elif isinstance(body, dict) and "detail" in body:
            message = str(body["detail"])
    except ValueError:
        pass
    if not message:
        message = response.text.strip()[:500] or response.reason_phrase
    request = response.request
    text = f"{request.method} {request.url.path}: HTTP {response.status_code}" + (f" {code}" if code else "")
    text += f": {message}"
    status = response.status_code
    if status == 401:
        text += (
            f"\nhint: authenticate with --api-key KEY (or ${API_KEY_ENV}); --user ID works only when the "
            "service runs in trusted_header mode"
        )
    elif status == 403 and code == "untrusted_identity":
        text += "\nhint: the service does not take identity headers from this address: use --api-key"
    elif status == 403:
        text += "\nhint: this needs an admin: an admin API key, or --user ID --role admin in trusted_header mode"
    elif status == 404 and request.url.path.startswith("/v1/admin"):
        text += "\nhint: does this service have the admin API (/v1/admin)? check --base-url"
    elif status == 429:
        text += f"\nhint: rate limited after {RETRY_429} retries; try again later (Retry-After: {_retry_after(response):g} s)"
    return CliError(text, status=status)


def transport_error(base_url: str, error: httpx.TransportError, timeout: float | None = None) -> CliError:
    """The ``CliError`` of a failed connection: unreachable, or no answer within ``timeout``."""
    if isinstance(error, httpx.TimeoutException):
        after = f" within {timeout:g} s" if timeout else ""
        return CliError(f"the service at {base_url} did not answer{after} ({type(error).__name__}); raise --timeout")
    return CliError(f"cannot reach the service at {base_url}: {error or type(error).__name__}")


@contextlib.contextmanager
def reported(base_url: str, timeout: float | None = None) -> Iterator[None]:
    """Turn ``CliError``, ``httpx.HTTPStatusError`` and ``httpx.TransportError`` raised inside
    into ``error: ...`` on stderr and ``typer.Exit`` (``EXIT_ERROR`` unless the ``CliError``
    says otherwise)."""
    try:
        yield
    except CliError as e:
        raise fail(e.message, e.code) from e
    except httpx.HTTPStatusError as e:
        raise fail(api_error(e.response).message) from e
    except httpx.TransportError as e:
        raise fail(transport_error(base_url, e, timeout).message) from e


# --------------------------------------------------------------------------- HTTP
def _retry_429() -> Retry:
    """Send again, after ``Retry-After`` (≤ ``MAX_RETRY_AFTER_S``), a request of any method
    answered 429, up to ``RETRY_429`` times: the rate limiter refused it, so nothing was
    done. Nothing else is retried (a failed connection or a timeout is reported at once)."""
    return Retry(
        total=RETRY_429,
        allowed_methods=["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"],
        status_forcelist=[429],
        retry_on_exceptions=(),
        respect_retry_after_header=True,
        max_backoff_wait=MAX_RETRY_AFTER_S,
        backoff_factor=0.5,  # without a Retry-After: 1, 2, 4 … s (capped like Retry-After)
        backoff_jitter=0.0,
    )


@dataclass(frozen=True)
class Service:
    """A running memory-router: ``base_url``, the ``identity`` every request carries, the
    HTTP ``timeout``."""

    base_url: str
    identity: Identity
    timeout: float = 60.0

    def client(self) -> httpx.Client:
        """A client on ``base_url`` sending the identity headers and ``content-type:
        application/json``, retrying 429s."""
        return httpx.Client(transport=RetryTransport(httpx.HTTPTransport(), _retry_429()), **self._client_options())

    def async_client(self) -> httpx.AsyncClient:
        """``client`` for asyncio code (the LoCoMo replay)."""
        return httpx.AsyncClient(
            transport=RetryTransport(httpx.AsyncHTTPTransport(), _retry_429()), **self._client_options()
        )

    def _client_options(self) -> dict[str, Any]:
        # every request says JSON (a state-changing one without it is a 415, body or not);
        # a request that sends another body type (an import's JSON lines) names its own
        headers = {"content-type": JSON_CONTENT_TYPE, **self.identity.headers()}
        return {"base_url": self.base_url.rstrip("/"), "headers": headers, "timeout": self.timeout}

    def call(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
        """``method path`` through ``client``; the JSON body of a success. Raises ``CliError``
        (``api_error``) on an error status, ``httpx.TransportError`` when unreachable."""
        response = client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise api_error(response)
        try:
            return response.json()
        except ValueError as e:
            raise CliError(f"{method} {path}: not a JSON answer: {response.text[:300]!r}") from e

    def reported(self) -> contextlib.AbstractContextManager[None]:
        """``reported`` for this service's URL and timeout."""
        return reported(self.base_url, self.timeout)

    @contextlib.contextmanager
    def session(self) -> Iterator[httpx.Client]:
        """``client()`` inside ``reported()``: the client a command's requests go through, its
        failures (and those of the block) reported as ``error: ...`` and ``typer.Exit``."""
        with self.reported(), self.client() as client:
            yield client


@dataclass(frozen=True)
class ServiceOptions:
    """A service command's connection and identity options as given (``service_options``):
    nothing is checked until ``service()``."""

    base_url: str
    api_key: str | None
    user: str | None
    role: Role | None
    timeout: float

    def service(self) -> Service:
        """The ``Service`` of these options; prints the identity error and exits 2 when they
        give none (``Identity.from_options``)."""
        try:
            return Service(self.base_url, Identity.from_options(self.api_key, self.user, self.role), self.timeout)
        except CliError as e:
            raise fail(e.message, e.code) from e


def service_options(
    *, timeout: float, role_option: Any = RoleOpt
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator of a service command ``command(..., options: ServiceOptions)``. The function it
    returns is what typer registers: ``command``'s own parameters (without ``options``), then
    ``--base-url`` (``$MEMORY_ROUTER_URL``), ``--api-key`` (``$MEMORY_ROUTER_API_KEY``),
    ``--user``, the role option (``role_option``: ``RoleOpt``'s ``--role``, or another option in
    its place, as ``keys create`` has ``--as-role``) and ``--timeout`` (default ``timeout``), in
    that order in the help; it calls ``command`` with the five gathered in ``options``."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True)
        shared = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)
            for name, annotation, default in (
                ("base_url", BaseUrl, DEFAULT_URL),
                ("api_key", ApiKey, None),
                ("user", UserOpt, None),
                ("role", role_option, None),
                ("timeout", Timeout, timeout),
            )
        ]

        @functools.wraps(command)
        def run(
            *args: Any,
            base_url: str,
            api_key: str | None,
            user: str | None,
            role: Role | None,
            timeout: float,
            **kwargs: Any,
        ) -> None:
            command(*args, options=ServiceOptions(base_url, api_key, user, role, timeout), **kwargs)

        run.__signature__ = own.replace(  # type: ignore[attr-defined]
            parameters=[p for p in own.parameters.values() if p.name != "options"] + shared
        )
        return run

    return decorate


def progress(*, transient: bool = False) -> Progress:
    """The CLI's progress bar (description, bar, n/total, elapsed) on stderr."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
    )


def new_table(*headers: str, title: str | None = None) -> Table:
    """A rich table whose cells fold when the terminal is narrow: ids and messages are never
    cut short with an ellipsis."""
    return Table(*(Column(h, overflow="fold") for h in headers), title=title)
