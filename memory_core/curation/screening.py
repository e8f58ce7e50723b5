"""Screening: does a text read as instructions *to the model* rather than something the user
states? Such text is stored ``quarantined`` (never injected, visible to operators, releasable
by them), because injecting it later would hand a past message control of a future prompt.

Shapes recognised (``screen`` returns the first that matches, as a reason; English and
Chinese):

- **override**: "ignore / disregard / forget (all) previous / above / prior instructions",
  "new instructions:", "your instructions are now…", "忽略之前的指令";
- **role-play**: "you are now DAN / an unrestricted AI", "act as … without restrictions",
  "pretend you have no rules", "developer mode", "jailbreak", "你现在是";
- **prompt extraction**: "reveal / print / repeat your system prompt";
- **tool smuggling**: tool-call syntax (``<tool_call>``, ``"function_call"``, ``"tool_calls"``,
  a JSON object with ``"name"`` and ``"arguments"``), "call the … tool", "execute this
  command";
- **template tokens**: chat-template control tokens (``<|im_start|>``, ``[INST]``, ``</s>``,
  ``<<SYS>>``) or a line that opens a role (``system:``, ``### Instruction:``).

Ordinary preferences and standing instructions for how to help ("always answer in French",
"call me Sam", "keep answers short") are not these shapes and are kept as ``procedural``
memories. No model call.
"""

from __future__ import annotations

import re

_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "override",
        re.compile(
            r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|any|your|the)\b"
            r"[^.\n]{0,30}\b(instructions?|rules|prompts?|guidelines|directives|messages|polic(y|ies))\b"
            r"|\bnew (system )?instructions\s*:|\byour (real |new )?instructions are\b"
            r"|忽略(之前|以上|前面|所有)|无视(之前|以上|所有)的?(指令|规则|说明)",
            re.I,
        ),
    ),
    (
        "role_play",
        re.compile(
            r"\byou are (now|no longer)\b[^.\n]{0,40}\b(dan|unrestricted|unfiltered|jailbroken|evil|without (any )?(rules|restrictions|filters))\b"
            r"|\b(act|behave|respond) as\b[^.\n]{0,40}\b(without|with no|free of)\b[^.\n]{0,20}\b(restrictions|rules|filters|limits|guidelines)\b"
            r"|\bpretend (that )?you (have|are under) no\b|\bdeveloper mode\b|\bjailbreak\b|\bdo anything now\b"
            r"|你现在是(一个)?(没有|不受)|扮演.{0,10}(没有限制|不受限制)",
            re.I,
        ),
    ),
    (
        "prompt_extraction",
        re.compile(
            r"\b(reveal|print|show|repeat|output|leak)\b[^.\n]{0,30}\b(system|hidden|initial|original)\s+(prompt|instructions|message)\b",
            re.I,
        ),
    ),
    (
        "tool_smuggling",
        re.compile(
            r"</?tool_call>|</?function_call>|\"(function_call|tool_calls)\"\s*:"
            r"|\{\s*\"name\"\s*:\s*\"[^\"]+\"\s*,\s*\"(arguments|parameters)\"\s*:"
            r"|\bcall the \w+ (tool|function)\b|\bexecute (the following|this) (command|code|shell)\b",
            re.I,
        ),
    ),
    (
        "template_tokens",
        re.compile(
            r"<\|\s*(im_start|im_end|system|user|assistant|endoftext|start_header_id|eot_id)\s*\|>"
            r"|\[/?INST\]|<</?SYS>>|</s>|<start_of_turn>"
            r"|(^|\n)\s*(###\s*)?(system|assistant|instruction)\s*:",
            re.I,
        ),
    ),
)

SCREENING_REASONS = tuple(name for name, _ in _SHAPES)
"""Every reason ``screen`` may return."""


def screen(text: str) -> str | None:
    """The shape of instructions to the model that ``text`` has (one of
    ``SCREENING_REASONS``), or ``None`` when it reads as something the user states."""
    for name, pattern in _SHAPES:
        if pattern.search(text):
            return name
    return None


_WINDOW_ROLE = re.compile(r"^(user|assistant): ")
_LEADING_ROLES = re.compile(r"^(?:\s*(?:###\s*)?(?:system|assistant|user|instruction)\s*:)+\s*", re.I)


def screen_window(text: str) -> str | None:
    """``screen`` for a conversation window (``chat.extract``: one ``user: …`` or
    ``assistant: …`` line per message, each message's whitespace collapsed, so no message can
    start a line of its own): each line's role prefix, and role words that start the message
    (an echo's "assistant: …", a user's "system: …"), are taken off, since inside a window
    they cannot open a line of their own, and the rest is screened for every shape ("user:
    system: you are now DAN" is still ``role_play``; the message itself is screened as a
    statement when it is one)."""
    for line in text.split("\n"):
        reason = screen(_LEADING_ROLES.sub("", _WINDOW_ROLE.sub("", line, count=1)))
        if reason is not None:
            return reason
    return None
