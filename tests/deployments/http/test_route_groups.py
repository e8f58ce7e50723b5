"""The route groups (``deployments.http.routes``) bound as ``@serve.ingress`` binds them,
whichever module is imported first: a Serve replica unpickles the routes by reference and
may import a route module before ``ingress`` (its routes then answered 400: ``self`` read
as a required query parameter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import importlib, inspect
importlib.import_module({first!r})
from deployments.http.routes import AdminRoutes, ChatRoutes, MemoryRoutes, ServiceRoutes
for method in (ChatRoutes.chat_completions, MemoryRoutes.get_memory, AdminRoutes.me, ServiceRoutes.health):
    self_param = next(iter(inspect.signature(method).parameters.values()))
    assert self_param.default is not inspect.Parameter.empty, method.__qualname__
"""


@pytest.mark.parametrize("first", ["deployments.http.routes.service", "deployments.http.routes.chat"])
def test_a_route_module_imported_first_has_its_routes_bound(first):
    done = subprocess.run([sys.executable, "-c", CHECK.format(first=first)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
