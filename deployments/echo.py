"""``EchoUpstream``: an offline OpenAI-compatible chat model.

It answers with a deterministic echo of the messages it received, one line per message
(``"<role>: <text>"``), so tests and operators can see exactly what the ingress injected.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from ray import serve

from memory_core.chat.inject import content_text
from memory_core.chat.tokens import estimate_tokens


def echo_completion(body: dict[str, Any]) -> dict[str, Any]:
    """Pure: an OpenAI ``chat.completion`` object echoing ``body["messages"]``.

    ``id`` is a digest of the messages (deterministic); ``usage`` uses the heuristic token
    estimate of ``memory_core.chat.tokens``.
    """
    messages = body.get("messages") or []
    lines = [f"{m.get('role')}: {content_text(m.get('content'))}" for m in messages]
    text = "\n".join(lines)
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]
    prompt_tokens = sum(estimate_tokens(line) for line in lines)
    completion_tokens = estimate_tokens(text)
    return {
        "id": f"chatcmpl-echo-{digest}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "echo"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


@serve.deployment
class EchoUpstream:
    """Offline upstream model; ``chat(body)`` returns ``echo_completion(body)``."""

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return echo_completion(body)
