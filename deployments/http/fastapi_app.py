"""The one FastAPI application of the ingress: its error handlers, middleware and OpenAPI
document. The route groups (``routes``) register their routes on ``app``; ``MemoryIngress``
(``@serve.ingress(app)``) binds them to the replica."""

from __future__ import annotations

import functools

from fastapi import FastAPI

from .audit_hook import AuditHook
from .errors import DOCUMENTED_ERRORS, install_error_handlers
from .headers import BrowserGuard
from .limits import BodyLimit
from .openapi import openapi_document
from .tracing import ChatTracing

app = FastAPI(title="memory-router", version="0.1.0", responses=DOCUMENTED_ERRORS)
install_error_handlers(app)
app.add_middleware(BodyLimit)  # inside the browser guard below; limits.REQUEST_LIMITS (limits.configure_limits)
app.add_middleware(BrowserGuard)  # same origin and a JSON body type for every state-changing request
app.add_middleware(ChatTracing)  # a chat request's root span (memory_core.tracing; no-op when off)
app.add_middleware(AuditHook)  # outermost: appends audited requests' entries after their answer (audit_hook)
app.openapi = functools.partial(openapi_document, app)  # type: ignore[method-assign]
