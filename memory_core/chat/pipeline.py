"""The memory side of one chat request, independent of Ray and HTTP.

``MemoryPipeline.prepare`` does the memory steps before a chat request is forwarded (the
README's "Architecture" and "Retrieval and the read path"): match a decision, decide whether
memory runs (and why not), retrieve with the last user message (the store embeds it,
concurrently with its lexical search), pass the candidates through the reflection gate and
inject them. ``MemoryPipeline.remember`` does the step after the answer (auto-store of the
turn). Both catch every store/embedder failure: memory must never fail
a chat request; the outcome is reported to a ``MetricsSink``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ..config import RouterConfig
from ..cpu_pool import CpuPool
from ..curation.llm import Complete, LLMUnusable
from ..errors import InvalidInput
from ..sanitize import RequestContext, clean_content, new_memory_id
from ..stores.base import Store
from ..tracing import span, traced
from ..types import WINDOW_CREATED_VIA, Memory, RetrieveOptions, ScoredMemory, WriteResult, utcnow
from .extract import ExtractedMemory, TurnExtraction, extract_turn
from .gate import select_gate
from .inject import content_text, inject_memories, last_user_text
from .llm_extract import llm_extract
from .routing import MemoryPolicy, effective_policy, select_decision, skip_reason
from .tokens import estimate_tokens

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 4096
"""Characters of the last user message used to embed and search (the model reads 256 tokens
at most; an unbounded query would make lexical scoring cost grow with the message)."""
OVERFETCH = 3
"""Candidates fetched per memory the route may inject, before the reflection gate."""


class MetricsSink(Protocol):
    """Where outcomes are counted. ``count(name, tags)``; ``observe(name, value, tags)``. The
    names, labels and label values are those declared in ``chat.metrics.METRICS``."""

    def count(self, name: str, tags: Mapping[str, str] | None = None, value: float = 1.0) -> None: ...

    def observe(self, name: str, value: float, tags: Mapping[str, str] | None = None) -> None: ...


class NullMetrics:
    """A sink that drops everything (library use, unit tests)."""

    def count(self, name: str, tags: Mapping[str, str] | None = None, value: float = 1.0) -> None:
        return None

    def observe(self, name: str, value: float, tags: Mapping[str, str] | None = None) -> None:
        return None


@dataclass
class PreparedChat:
    """The outcome of ``prepare``: the request body to forward and what ``remember`` needs."""

    body: dict[str, Any]
    policy: MemoryPolicy
    user_id: str | None
    project_id: str | None
    conversation_id: str | None
    user_text: str
    skipped: str | None = None
    injected: list[Memory] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def stores_turn(self) -> bool:
        """Whether ``MemoryPipeline.remember`` will extract and store this turn: the policy
        auto-stores, the caller has a user id, and memory was not skipped for a reason that
        also skips storing (a greeting, a punctuation-only turn or a store error still store
        what the rest of the turn states)."""
        return (
            self.skipped in (None, "error", "greeting", "punctuation") and self.policy.auto_store and bool(self.user_id)
        )


EmbedStored = Callable[[list[str]], Awaitable[tuple[list[list[float]], str]]]
"""n stored texts → (n vectors, the model identity that made them), as background work (the
ingress: the Embedder's ``embed(..., background=True)``)."""


class MemoryPipeline:
    """Memory for chat requests. ``store`` is any ``Store`` (the store pool client in the
    service, a plain store in tests): it embeds the query text and the memories it is given
    without a vector with its own embedder, so its model identity holds. ``now`` is
    injectable for tests. ``complete`` (an OpenAI chat completions call) serves the LLM
    extractor when ``memory.extraction.llm.enabled``. ``admit_write(user_id, n)`` (the
    per-user write rate limit, counting the turn's ``n`` memories) is asked before a turn's
    memories are written: ``False`` skips the write, counted as ``memory_extraction{outcome="skipped_rate_limited"}``.
    ``embed_stored`` (``EmbedStored``), when given, embeds a turn's memories before they are
    written, as background work (the service: the Embedder queues them behind the callers who
    wait); the store checks the identity it answers with as for any given vector.

    The pure-CPU steps on the request's text (the reflection gate and injection, the turn's
    extraction) run on ``cpu`` (a ``CpuPool``, by default one of the pipeline's own), never
    on the event loop that serves every request of the replica."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        store: Store,
        metrics: MetricsSink | None = None,
        now: Callable[[], datetime] = utcnow,
        complete: Complete | None = None,
        admit_write: Callable[[str, int], bool] | None = None,
        cpu: CpuPool | None = None,
        embed_stored: EmbedStored | None = None,
    ):
        self.config = config
        self._embed_stored = embed_stored
        self._cpu = cpu if cpu is not None else CpuPool(name="chat")
        self._store = store
        self._admit_write = admit_write
        self.metrics = metrics or NullMetrics()
        self._now = now
        self._complete = complete

    async def prepare(self, body: dict[str, Any], context: RequestContext) -> PreparedChat:
        """Steps 2–7 for a validated chat body and the request's ``context`` (its headers,
        normalised once at the edge and read by ``sanitize.request_context``; the decision
        rules read ``context.headers`` as they are). Never raises for
        store/embedder failures (the request then goes out without memory, outcome
        ``error``)."""
        prepared, reason = self._decide(body, context)
        prepared.skipped = reason
        if reason is not None:
            self.metrics.count("memory_skipped", {"reason": reason, "decision": prepared.policy.decision_name or ""})
            return prepared
        await self._retrieve_and_inject(prepared)
        return prepared

    def _decide(self, body: dict[str, Any], context: RequestContext) -> tuple[PreparedChat, str | None]:
        """Steps 2–3: the matched decision's policy for ``body`` and ``context``, as a
        ``PreparedChat`` of the unchanged body, and why memory is skipped (``skip_reason``;
        ``None``: it runs)."""
        messages = body.get("messages") or []
        user_text = last_user_text(messages)
        model = body.get("model")
        decision = select_decision(self.config, model=model, last_user_message=user_text, headers=context.headers)
        policy = effective_policy(self.config, decision)
        prepared = PreparedChat(
            body=body,
            policy=policy,
            user_id=context.user_id,
            project_id=context.project_id,
            conversation_id=context.conversation_id,
            user_text=user_text,
        )
        last_role = messages[-1].get("role") if messages and isinstance(messages[-1], dict) else None
        reason = skip_reason(
            self.config,
            policy,
            model=model,
            user_id=context.user_id,
            memory_disabled=context.memory_disabled,
            last_user_message=user_text,
            last_role=last_role,
        )
        return prepared, reason

    async def _retrieve_and_inject(self, prepared: PreparedChat) -> None:
        """Steps 4–7 on ``prepared`` (memory runs: it has a user): retrieve with the last user
        message, then the reflection gate and injection on the CPU pool; sets ``injected``,
        ``body`` and ``timings_ms``, or ``skipped = "error"`` when the store or embedder
        fails (counted; the request then goes out without memory)."""
        policy, user_id = prepared.policy, prepared.user_id
        assert user_id is not None  # else skip_reason says "no_user"
        started = time.perf_counter()
        try:
            candidates = await traced(  # span "retrieve" (the store pool carries it to the shard)
                "retrieve",
                self._store.retrieve(
                    RetrieveOptions(
                        user_id=user_id,
                        query=prepared.user_text[
                            :MAX_QUERY_CHARS
                        ],  # embedded by the store, overlapping its lexical search
                        project_id=prepared.project_id,
                        # over-fetch: the gate's dedup may drop near-copies that would otherwise
                        # crowd distinct memories out of the limit
                        limit=min(policy.retrieval_limit * OVERFETCH, 100),
                        threshold=policy.similarity_threshold,
                        hybrid=policy.hybrid,
                        lexical_weight=policy.lexical_weight,
                        temporal_boost=policy.temporal_boost,
                        second_hop=policy.second_hop,
                        diversity=policy.diversity,
                    )
                ),
                {"memory.backend": self.config.memory.backend},
                result_attributes=lambda found: {"memory.candidates": len(found)},
            )
            t_retrieve = time.perf_counter()
            drops: dict[str, int] = {}
            prepared.injected, prepared.body = await self._cpu.run(
                _gate_and_inject, prepared.body, candidates, policy, self._now(), drops
            )
        except Exception as e:  # memory must never fail the chat (steps 4–7)
            log.warning("memory retrieval failed for decision %s: %r", policy.decision_name, e)
            prepared.skipped = "error"
            self.metrics.count("memory_retrieval_errors", {"decision": policy.decision_name or ""})
            self.metrics.count("llm_memory_retrieval_total", {"backend": self.config.memory.backend, "status": "error"})
            return
        t_done = time.perf_counter()
        prepared.timings_ms = {
            "retrieve": (t_retrieve - started) * 1000,  # query embedding included
            "gate_inject": (t_done - t_retrieve) * 1000,
        }
        self._count_injection(prepared, t_retrieve - started, t_done - started, drops)

    def _count_injection(
        self, prepared: PreparedChat, retrieve_s: float, total_s: float, drops: dict[str, int]
    ) -> None:
        """The metrics of a request memory ran for: injected count and tokens, the overhead
        (``total_s``), the retrieval's latency (``retrieve_s``) and hit or miss by backend,
        and the gate's drops by reason."""
        injected, backend = prepared.injected, self.config.memory.backend
        self.metrics.count("memory_injected_total", {"decision": prepared.policy.decision_name or ""})
        self.metrics.observe("memory_injected_count", float(len(injected)), {})
        self.metrics.observe("memory_overhead_ms", total_s * 1000, {})
        by_backend = {"backend": backend}
        status = "hit" if injected else "miss"
        self.metrics.count("llm_memory_retrieval_total", {"backend": backend, "status": status})
        self.metrics.observe("llm_memory_retrieval_latency_seconds", retrieve_s, by_backend)
        self.metrics.observe("llm_memory_retrieval_results", float(len(injected)), by_backend)
        if injected:
            tokens = sum(estimate_tokens(m.content) for m in injected)
            self.metrics.observe("llm_memory_injected_tokens", float(tokens), by_backend)
        for reason, n in drops.items():
            self.metrics.count("llm_memory_gate_drops_total", {"reason": reason}, n)

    async def remember(self, prepared: PreparedChat, response: Mapping[str, Any]) -> list[WriteResult]:
        """Step 10, when the policy auto-stores: what the turn states becomes memories
        (``chat.extract.extract_turn``: typed statements of the user, and every few turns a
        window of the conversation), written through the store's curation (a fact already
        held reinforces its record, a new value supersedes the old one). Source
        ``conversation``; ``created_via`` ``auto_store`` (statements) or ``auto_store_window``.
        Returns the write results (``[]`` when nothing was stored). Never raises: failures
        and skip reasons are counted (``memory_extraction{outcome}``, ``memory_store_errors``)."""
        if not prepared.stores_turn or prepared.user_id is None:
            return []
        settings = self.config.memory.extraction
        messages = prepared.body.get("messages") or []
        answer = _assistant_text(response)
        extraction = await traced(
            "extract",
            self._cpu.run(
                extract_turn,
                messages,
                answer,
                prepared.injected,
                window_turns=settings.window_turns,
                window_every=settings.window_every,
            ),
            result_attributes=_extracted,
        )
        decision = prepared.policy.decision_name or ""
        statements = [m for m in extraction.memories if not m.window]
        via = "auto_store"
        if settings.llm.enabled and self._complete is not None:
            model = settings.llm.model or str(prepared.body.get("model") or "")
            try:
                statements = await traced("extract.llm", llm_extract(self._complete, messages, answer, model))
                via = "llm_extract"
                if not statements:
                    self.metrics.count("memory_extraction", {"outcome": "skipped_llm_nothing", "decision": decision})
            except LLMUnusable as e:  # the rules' statements stand
                log.warning("LLM extractor unusable, rules used: %s", e)
                self.metrics.count("memory_extraction", {"outcome": "llm_error", "decision": decision})
        if via == "auto_store" and extraction.skipped is not None:
            self.metrics.count("memory_extraction", {"outcome": f"skipped_{extraction.skipped}", "decision": decision})
        memories = self._turn_memories(prepared, statements + [m for m in extraction.memories if m.window], via)
        if not memories:
            return []
        if self._admit_write is not None and not self._admit_write(prepared.user_id, len(memories)):
            self.metrics.count("memory_extraction", {"outcome": "skipped_rate_limited", "decision": decision})
            return []
        memories = await self._with_vectors(memories)
        try:
            results = await traced(
                "store",
                self._store.write(memories),
                {"memory.backend": self.config.memory.backend},
                result_attributes=_written,
            )
        except Exception as e:
            log.warning("auto-store failed: %r", e)
            self.metrics.count("memory_store_errors", {"decision": decision})
            return []
        for r in results:
            self.metrics.count("memory_writes", {"outcome": r.outcome.value, "decision": decision})
        self.metrics.count("memory_auto_stored_total", {"decision": decision})
        return results

    async def _with_vectors(self, memories: list[Memory]) -> list[Memory]:
        """``memories`` with their vectors from ``embed_stored`` (as background work: no caller
        waits for a turn's memories) when one was given; unchanged without it or when it
        fails (the store then embeds them itself, as a caller's write)."""
        if self._embed_stored is None:
            return memories
        try:
            # the text the store will keep (``MemoryStore._normalise`` cleans it the same way),
            # so the vector is that text's
            texts = [clean_content(m.content) for m in memories]
        except InvalidInput:
            return memories  # the store refuses or cleans it: it embeds what it keeps
        try:
            vectors, identity = await self._embed_stored(texts)
        except Exception as e:
            log.warning("background embedding of a turn's memories failed, the store embeds them: %r", e)
            return memories
        if len(vectors) != len(memories):
            log.warning("background embedding answered %d vectors for %d memories: unused", len(vectors), len(memories))
            return memories
        return [
            m.model_copy(update={"content": text, "embedding": v, "embedding_identity": identity})
            for m, text, v in zip(memories, texts, vectors, strict=True)
        ]

    def _turn_memories(self, prepared: PreparedChat, kept: list[ExtractedMemory], via: str) -> list[Memory]:
        """The memories a turn leaves (``kept``: its statements, then its window), owned by the
        caller in the request's project and conversation, ``created_via`` ``via`` (a window:
        ``auto_store_window``); each counted in ``memory_extraction{outcome}``."""
        decision = prepared.policy.decision_name or ""
        assert prepared.user_id is not None
        out = []
        for m in kept:
            self.metrics.count(
                "memory_extraction", {"outcome": "window" if m.window else m.type.value, "decision": decision}
            )
            out.append(
                Memory(
                    id=new_memory_id(prepared.user_id),
                    type=m.type,
                    content=m.content,
                    user_id=prepared.user_id,
                    project_id=prepared.project_id,
                    source="conversation",
                    created_via=WINDOW_CREATED_VIA if m.window else via,
                    conversation_id=prepared.conversation_id,
                    created_by_user_id=prepared.user_id,
                    metadata={**m.metadata, "decision": decision, "model": prepared.body.get("model")},
                )
            )
        return out


def _gate_and_inject(
    body: dict[str, Any], candidates: list[ScoredMemory], policy: MemoryPolicy, now: datetime, drops: dict[str, int]
) -> tuple[list[Memory], dict[str, Any]]:
    """Steps 6–7: the memories the reflection gate keeps of ``candidates`` (at most
    ``policy.retrieval_limit``; what it drops counted by reason in ``drops``) and ``body``
    with them injected (``body`` itself when none is kept; it is never mutated)."""
    with span("gate", {"memory.candidates": len(candidates)}) as gated:
        kept = select_gate(policy.reflection).apply(candidates, policy.reflection, now, drops)
        injected = [c.memory for c in kept[: policy.retrieval_limit]]
        if len(kept) > len(injected):
            drops["limit"] = len(kept) - len(injected)
        gated.set_attributes({"memory.kept": len(injected), **{f"memory.dropped.{r}": n for r, n in drops.items()}})
    if not injected:
        return injected, body
    with span("inject", {"memory.injected": len(injected), "memory.placement": policy.placement}):
        new_body = dict(body)
        new_body["messages"] = inject_memories(body.get("messages") or [], injected, policy.placement)
    return injected, new_body


def _extracted(extraction: TurnExtraction) -> dict[str, int | str]:
    """Span attributes of a turn's extraction: ``memory.extracted`` (count) and
    ``memory.skipped`` (the reason, when the turn stated nothing)."""
    out: dict[str, int | str] = {"memory.extracted": len(extraction.memories)}
    if extraction.skipped:
        out["memory.skipped"] = extraction.skipped
    return out


def _written(results: list[WriteResult]) -> dict[str, int]:
    """Span attributes of a write: ``memory.stored`` and ``memory.writes.<outcome>`` counts."""
    out = {"memory.stored": len(results)}
    for r in results:
        key = f"memory.writes.{r.outcome.value}"
        out[key] = out.get(key, 0) + 1
    return out


def _assistant_text(response: Mapping[str, Any]) -> str:
    """Text of the first choice of an OpenAI chat.completion response ("" if none)."""
    try:
        content = response["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return content_text(content)
