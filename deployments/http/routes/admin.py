"""``AdminRoutes``: who the caller is (``/v1/me``) and the operator routes under
``/v1/admin`` (users, statistics, API keys), admin only. New admin routes go here."""

import asyncio
from datetime import datetime

from fastapi import Query, Request
from pydantic import ValidationError

from memory_core.admin import DEFAULT_USERS_PAGE, MAX_USERS_PAGE, service_stats, users_page
from memory_core.audit import DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE, MAX_SEQUENCE, AuditPage, AuditQuery
from memory_core.errors import InvalidInput

from ..event_feed import DEFAULT_FEED_PAGE, MAX_FEED_PAGE, EventsOut, feed_page
from ..fastapi_app import app
from ..schemas import CreatedKeyOut, CreateKeyRequest, KeysOut, MeOut, RevokedOut, StatsOut, UsersOut
from .base import IngressBase, OwnerQuery


class AdminRoutes(IngressBase):
    """The identity and operator routes."""

    @app.get("/v1/me", response_model=MeOut)
    async def me(self, request: Request) -> dict:
        """Who the service takes the caller for: user id, role and the access mode."""
        principal = self._caller(request)
        return {"user_id": principal.user_id, "role": principal.role.value, "mode": self.auth.settings.mode}

    @app.get("/v1/admin/users", response_model=UsersOut)
    async def admin_users(
        self,
        request: Request,
        limit: int = Query(DEFAULT_USERS_PAGE, gt=0, le=MAX_USERS_PAGE),
        offset: int = Query(0, ge=0),
    ) -> dict:
        """One page of the users the service has seen (wrote memories or hold a key), sorted
        by id, with the number of their memories (every state) and active keys, and ``total``
        (every user seen); admin only. Counts the page's users only (``admin.users_page``)."""
        self._admin(request, "listing users")
        return await users_page(self.store, self.registry, limit, offset)

    @app.get("/v1/admin/stats", response_model=StatsOut)
    async def admin_stats(self, request: Request) -> dict:
        """Totals: users seen, every memory by state and by type, active keys; admin only.
        One aggregate store call whatever the number of users (``admin.service_stats``)."""
        self._admin(request, "service statistics")
        return await service_stats(self.store, self.registry)

    @app.get("/v1/admin/events", response_model=EventsOut)
    async def admin_events(
        self,
        request: Request,
        user_id: str | None = Query(None, min_length=1),
        kind: list[str] | None = Query(None, description="event kinds (default: every kind)"),
        since: datetime | None = Query(None, description="ISO 8601; inclusive"),
        until: datetime | None = Query(None, description="ISO 8601; exclusive"),
        cursor: str | None = Query(None, description="next_cursor of the previous page"),
        limit: int = Query(DEFAULT_FEED_PAGE, gt=0, le=MAX_FEED_PAGE),
    ) -> dict:
        """The lifecycle event feed of every user (``user_id``: one user's), oldest first,
        filtered by kind and time, paginated by ``cursor``; admin only (``event_feed``). The
        feed's SQLite read runs off the event loop."""
        self._admin(request, "reading the event feed")
        return await asyncio.to_thread(
            feed_page, self.events, user_id=user_id, kinds=kind, since=since, until=until, cursor=cursor, limit=limit
        )

    @app.get("/v1/admin/audit", response_model=AuditPage)
    async def admin_audit(
        self,
        request: Request,
        actor: str | None = Query(None, min_length=1, max_length=256, description="the actor's user id"),
        target_user: str | None = Query(None, min_length=1, max_length=256),
        action: str | None = Query(None, min_length=1, max_length=128, description="e.g. admin.keys.create"),
        since: datetime | None = Query(None, description="ISO 8601, inclusive (no offset: UTC)"),
        until: datetime | None = Query(None, description="ISO 8601, exclusive (no offset: UTC)"),
        cursor: int | None = Query(None, gt=0, le=MAX_SEQUENCE, description="next_cursor of the previous page"),
        limit: int = Query(DEFAULT_AUDIT_PAGE, gt=0, le=MAX_AUDIT_PAGE),
    ) -> dict:
        """The audit log (``memory_core.audit``), newest first, filtered; admin only, and
        itself audited (``admin.audit.read``)."""
        self._admin(request, "reading the audit log")
        try:
            query = AuditQuery(
                actor=actor,
                target_user=target_user,
                action=action,
                since=since,
                until=until,
                cursor=cursor,
                limit=limit,
            )
        except ValidationError as e:
            raise InvalidInput(f"audit query: {e.errors()[0]['msg']}") from e
        return (await asyncio.to_thread(self.audit.log.query, query)).model_dump(mode="json")

    @app.post("/v1/admin/keys", status_code=201, response_model=CreatedKeyOut)
    async def create_key(self, body: CreateKeyRequest, request: Request) -> dict:
        """A new API key for ``user_id`` with ``role``; the key is in this answer only (the
        service keeps its SHA-256). Admin only."""
        self._admin(request, "creating API keys")
        key, record = self.registry.create(body.user_id, body.role, body.name)
        self.audit.note(request, target_user_id=record.user_id, target=record.key_id)
        return {"key": key, **record.public()}

    @app.get("/v1/admin/keys", response_model=KeysOut)
    async def list_keys(self, request: Request, owner: OwnerQuery = None) -> dict:
        """Every API key (of ``user_id`` when given), revoked ones included, never the key
        itself. Admin only."""
        self._admin(request, "listing API keys")
        # a walk of the key table: on a worker thread, never on the ingress's loop
        keys = await asyncio.to_thread(self.registry.keys, owner)
        return {"keys": [k.public() for k in keys]}

    @app.delete("/v1/admin/keys/{key_id}", response_model=RevokedOut)
    async def revoke_key(self, key_id: str, request: Request) -> dict:
        """Revoke a key: from now on it is answered 401. Admin only; 404 for an unknown id."""
        self._admin(request, "revoking API keys")
        record = self.registry.revoke(key_id)
        self.audit.note(request, target_user_id=record.user_id)
        return {"revoked": record.key_id, "revoked_at": record.revoked_at}
