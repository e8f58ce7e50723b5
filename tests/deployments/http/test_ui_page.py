"""The review page file (``deployments/http/ui``) without a browser: what it may contain, the
policy it is served with, and that it stays out of the OpenAPI document. The page itself is
driven in Chromium by ``tests/ui/test_review_page.py``."""

from __future__ import annotations

import base64
import hashlib
import re

from deployments.http.ui import content_security_policy, page
from memory_core.types import MemoryState, MemoryType


def _script() -> str:
    html, _ = page()
    (script,) = re.findall(r"<script>(.*?)</script>", html, re.S)
    return script


def _js_list(name: str) -> list[str]:
    match = re.search(rf"const {name} = \[(.*?)\];", _script(), re.S)
    assert match, name
    return re.findall(r'"([^"]*)"', match.group(1))


def test_the_page_offers_every_state_and_type_of_the_domain():
    assert _js_list("STATES") == [s.value for s in MemoryState]
    assert _js_list("TYPES") == [t.value for t in MemoryType]


def test_no_markup_is_built_from_strings_and_nothing_is_fetched_from_elsewhere():
    html, _ = page()
    script = _script()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler attribute"
    assert not re.search(r"(src|href)\s*=", html), "the page loads nothing but itself"
    assert "http://" not in html and "https://" not in html
    assert len(re.findall(r"<script", html)) == 1 and len(re.findall(r"<style", html)) == 1


def test_policy_allows_exactly_the_inline_script_and_style():
    html, headers = page()
    policy = headers["content-security-policy"]
    assert policy == content_security_policy(html)
    directives = dict(d.split(" ", 1) for d in policy.split("; "))
    (style,) = re.findall(r"<style>(.*?)</style>", html, re.S)
    digest = "'sha256-" + base64.b64encode(hashlib.sha256(_script().encode()).digest()).decode() + "'"
    assert directives["script-src"] == digest
    assert (
        directives["style-src"] == "'sha256-" + base64.b64encode(hashlib.sha256(style.encode()).digest()).decode() + "'"
    )
    assert directives["default-src"] == "'none'" and directives["connect-src"] == "'self'"
    assert directives["img-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert headers["x-content-type-options"] == "nosniff"


def test_policy_of_a_page_without_inline_blocks_allows_no_script():
    policy = content_security_policy("<p>nothing</p>")
    assert "script-src 'none'" in policy and "style-src 'none'" in policy


def test_the_page_is_not_in_the_openapi_document():
    from deployments.http.ingress import app

    schema = app.openapi()
    assert "/v1/memory" in schema["paths"]  # the document has the ingress's routes
    assert not [path for path in schema["paths"] if path.startswith("/ui")]
