"""The subset of the OpenAI Chat Completions request schema the ingress validates.

Unknown fields are kept and forwarded to the upstream unchanged (providers add their own).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memory_core.sanitize import check_json_text


class ChatMessage(BaseModel):
    """One message; ``content`` is a string, a list of content parts, or null (tool calls)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None

    @field_validator("content")
    @classmethod
    def _text_parts(cls, content):
        if isinstance(content, list):
            for i, part in enumerate(content):
                if part.get("type") == "text" and not isinstance(part.get("text"), str):
                    raise ValueError(f"content[{i}].text must be a string")
        return content


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` body. Streaming is not supported by this service yet.
    Every string of the body, in any field, must be valid Unicode (no lone surrogate)."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return check_json_text(data, "body")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool | None = False
