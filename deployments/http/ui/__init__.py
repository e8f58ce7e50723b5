"""The memory review page served at ``GET /ui``: one static file (``index.html``: HTML, CSS
and vanilla JavaScript, no build step, nothing fetched but this service's own API), read once
from the package.

The page is answered with a Content-Security-Policy that allows exactly its own inline script
and style (by their SHA-256 digests), requests to this origin and nothing else: no other
script, no inline event handler, no image, no frame. The page renders every memory as text
(``textContent``), so memory content cannot become markup; the policy is a second wall should
that ever break.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources

from starlette.responses import HTMLResponse

PAGE = "index.html"
_INLINE = re.compile(r"<(script|style)>(.*?)</\1>", re.S)


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def content_security_policy(html: str) -> str:
    """The policy for ``html``: its inline ``<script>`` and ``<style>`` blocks allowed by
    digest, ``fetch`` to the page's own origin, everything else refused."""
    scripts = [_digest(body) for tag, body in _INLINE.findall(html) if tag == "script"]
    styles = [_digest(body) for tag, body in _INLINE.findall(html) if tag == "style"]
    return "; ".join(
        [
            "default-src 'none'",
            "script-src " + " ".join(scripts or ["'none'"]),
            "style-src " + " ".join(styles or ["'none'"]),
            "connect-src 'self'",
            "img-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


@functools.cache
def page() -> tuple[str, dict[str, str]]:
    """The page's HTML and its response headers (read and computed once per process)."""
    html = resources.files(__name__).joinpath(PAGE).read_text(encoding="utf-8")
    headers = {
        "content-security-policy": content_security_policy(html),
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-cache",
    }
    return html, headers


def review_page_response() -> HTMLResponse:
    """``GET /ui``: the review page with its security headers."""
    html, headers = page()
    return HTMLResponse(html, headers=headers)
