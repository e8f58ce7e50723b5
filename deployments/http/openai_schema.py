"""The subset of the OpenAI Chat Completions request schema the ingress validates.

Unknown fields are kept and forwarded to the upstream unchanged (providers add their own).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

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


class StreamOptions(BaseModel):
    """``stream_options`` (only with ``stream: true``): ``include_usage`` asks the upstream
    for a last chunk with the usage."""

    model_config = ConfigDict(extra="allow")

    include_usage: StrictBool | None = None


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` body. ``stream: true`` answers ``text/event-stream``.
    Every string of the body, in any field, must be valid Unicode (no lone surrogate)."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return check_json_text(data, "body")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None

    @model_validator(mode="after")
    def _options_need_stream(self) -> ChatCompletionRequest:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only allowed when stream is true")
        return self
