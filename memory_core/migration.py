"""Moving memories: JSONL export/import (content and metadata, never vectors) and re-embedding
migration from the store of one embedding identity to the store of another.

Export format (``application/x-ndjson``): one JSON object per line, the fields of
``Memory.public()`` (``id, type, content, user_id, project_id, source, created_via,
conversation_id, created_by_user_id, created_at, updated_at, access_count, last_accessed,
importance, metadata``). Vectors are left out on purpose: they belong to one model identity and
the importing side re-embeds with its own model.

A complete export ends with one end line, ``{"end_of_export": {"memories": N, "unreadable":
[ids]}}`` (``export_end_line``): ``N`` memory lines were sent, and the ids in ``unreadable``
are records the store holds but could not read (``ListResult.unreadable``), left out: an
export with any is partial. An export without its end line did not complete. A failure once
lines were sent ends the stream with an error line, ``{"error": {"code", "message"}}``
(``export_error_line``), and no end line. ``check_export_end`` is the one check of a
received export; import skips the end line.

Import is idempotent and scoped to the importing user: a line keeps its ``id`` when that id
was issued for the importing user (their own export), and otherwise gets a deterministic id
scoped to the importing user (``import_id``; reported in ``renamed``); a line without ``id``
gets one derived from its content and ``created_at``. A line whose memory the user already
holds (under either id), or whose fact one of their records holds (curation merges it into
that record without reinforcing it), counts as a skipped duplicate, so re-importing a file
changes nothing, whatever each line did the first time. What the importer is told never
depends on another user's memories: ids of two users never coincide
(``sanitize.new_memory_id``).

Enumerating users: the store contract has no "list all users" (a backend-specific scan would
break the contract and leak across tenants), so ``migrate`` takes an explicit list of user ids.
``load_user_ids`` reads such a list from a file (one id per line, ``#`` comments, ``-`` for
stdin); operators produce it from their identity provider or from the store's admin tooling.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import (
    DuplicateMemory,
    InvalidInput,
    MemoryError_,
    MigrationError,
    RequestTooLarge,
    StoreClosed,
    StoreUnavailable,
)
from .sanitize import (
    INT64_MAX,
    Content,
    ConversationId,
    Instant,
    Metadata,
    PastTime,
    ProjectId,
    Source,
    check_json_text,
    is_memory_id,
    is_scoped_to,
    require_memory_id,
    require_user_id,
    scoped_memory_id,
)
from .stores.base import list_pages
from .types import IMPORT_CREATED_VIA, ListQuery, Memory, MemoryType, WriteOutcome

log = logging.getLogger(__name__)

EXPORT_MEDIA_TYPE = "application/x-ndjson"
PAGE_SIZE = 500
DEFAULT_CONCURRENCY = 16
"""Concurrent ``store()`` calls during import/migration (lets the Embedder batch them)."""

_FATAL = (StoreClosed, StoreUnavailable)
"""Errors that abort an import/migration instead of failing one line."""


# --------------------------------------------------------------------------- reports
class ImportFailure(BaseModel):
    """One line that could not be imported (``line`` is 1-based)."""

    line: int
    error: str


class ImportRenamed(BaseModel):
    """A line whose memory was stored under another id than the line gave (``line`` 1-based):
    the line's id was not issued for the importing user (``import_id``)."""

    line: int
    id: str
    new_id: str


class ImportReport(BaseModel):
    """Result of ``import_lines``; ``model_dump()`` is the HTTP response body of
    ``POST /v1/memory/import``. ``imported`` + ``skipped_duplicates`` + ``len(failed)`` = the
    non-blank lines other than an export's end line; ``renamed`` lists the imported or skipped lines whose memory has another
    id than the line gave."""

    imported: int = 0
    skipped_duplicates: int = 0
    failed: list[ImportFailure] = Field(default_factory=list)
    renamed: list[ImportRenamed] = Field(default_factory=list)


class UserMigration(BaseModel):
    """Per-user outcome: ``source``/``target`` counts after the run, ``migrated`` written now,
    ``skipped_existing`` already present in the target (an earlier run)."""

    user_id: str
    source: int = 0
    migrated: int = 0
    skipped_existing: int = 0
    target: int = 0


class MigrationReport(BaseModel):
    """Result of ``migrate``."""

    users: list[UserMigration] = Field(default_factory=list)
    reembedded: bool = True

    @property
    def migrated(self) -> int:
        return sum(u.migrated for u in self.users)

    @property
    def skipped_existing(self) -> int:
        return sum(u.skipped_existing for u in self.users)


class MigrationProgress(BaseModel):
    """Progress of one user: ``done`` of ``total`` memories handled (migrated or skipped)."""

    user_id: str
    done: int
    total: int


# --------------------------------------------------------------------------- lines
EXPORT_FIELDS = tuple(k for k in Memory.model_fields if k not in ("embedding", "embedding_identity"))


def memory_to_export_line(memory: Memory) -> str:
    """One export line for ``memory`` (JSON object, no trailing newline, no vector)."""
    line = json.dumps(memory.public(), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    # keep one record per line for every line splitter: escape the Unicode line separators
    # (they can only occur inside JSON strings, where the escape means the same character)
    return line.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")


class ImportLine(BaseModel):
    """The fields of one export line, checked by the same rules as ``POST /v1/memory``
    (``api_models``); unknown keys (and ``embedding``/``embedding_identity``) are ignored."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    type: MemoryType = MemoryType.SEMANTIC
    content: Content
    user_id: str | None = None
    project_id: ProjectId | None = None
    source: Source = "api"
    created_via: Source | None = None
    conversation_id: ConversationId | None = None
    created_by_user_id: str | None = None
    created_at: PastTime | None = None
    updated_at: Instant | None = None
    access_count: int = Field(default=0, ge=0, le=INT64_MAX)
    last_accessed: Instant | None = None
    importance: float = Field(default=0.5, ge=0, le=1)
    metadata: Metadata = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return check_json_text(data, "line")


class ParsedLine(BaseModel):
    """An import line: the ``memory`` to store (its ``id`` already the one it gets, see
    ``import_id``) and the id the line gave (``None`` when it gave none)."""

    memory: Memory
    given_id: str | None = None


def import_id(user_id: str, given_id: str | None, content: str, created_at: Any) -> str:
    """The id an imported memory of ``user_id`` gets: the line's own id when it was issued for
    this user (``sanitize.is_scoped_to``: a user's export re-imported keeps its ids), else the
    id scoped to this user derived from the line's id (an id of another user, or from before
    owner tags), or, for a line without id, from its content and date. Deterministic (a
    re-import finds what it imported before) and independent of what other users hold."""
    if given_id is not None:
        return given_id if is_scoped_to(given_id, user_id) else scoped_memory_id(user_id, "id:" + given_id)
    return scoped_memory_id(user_id, "content:" + json.dumps([content, created_at], ensure_ascii=False))


def parse_import_line(line: str, *, user_id: str | None, created_by: str | None = None) -> ParsedLine:
    """The memory described by one export line (without vector; the store re-embeds it).

    ``user_id`` is the importing user: a line without ``user_id`` is assigned to it, a line
    of another user is refused. With ``user_id=None`` the line must name its user. The
    memory's id is ``import_id`` of the line's id (which must have the memory id format when
    given). With an importing ``user_id``, ``created_via`` is ``import`` and
    ``created_by_user_id`` that user, or ``created_by`` when someone else imports for it (an
    admin; a line cannot claim another creator); without one,
    ``created_via`` defaults to ``import``. Field values follow the rules of
    ``POST /v1/memory``.

    Raises ``InvalidInput`` (not JSON, not an object, a malformed id, missing/empty content,
    user mismatch, invalid field values, naming the field). Callers prefix the message with
    the line number.
    """
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise InvalidInput(f"not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise InvalidInput("each line must be a JSON object")
    try:
        fields = ImportLine.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise InvalidInput(f"{loc}: {first['msg']}" if loc else str(first["msg"])) from e
    except ValueError as e:  # a rule raised outside a field (InvalidInput)
        raise InvalidInput(str(e)) from e
    given_id = fields.id
    if given_id is not None:
        require_memory_id(given_id)
    line_user = fields.user_id
    if user_id is not None:
        require_user_id(user_id)
        if line_user not in (None, "", user_id):
            raise InvalidInput("line belongs to another user than the importing user")
        owner = user_id
    elif not line_user:
        raise InvalidInput("user_id is missing")
    else:
        owner = require_user_id(line_user)
    values = fields.model_dump(exclude={"id", "user_id", "created_via", "created_by_user_id"})
    created = data.get("created_at")
    memory = Memory(
        **values,
        id=import_id(owner, given_id, fields.content, created if isinstance(created, str) else None),
        user_id=owner,
        # provenance is what happened here: the importing user wrote it through the import
        # pipeline; ``source`` keeps where it came from
        created_via=IMPORT_CREATED_VIA if user_id is not None else (fields.created_via or IMPORT_CREATED_VIA),
        created_by_user_id=(created_by or user_id) if user_id is not None else fields.created_by_user_id,
    )
    return ParsedLine(memory=memory, given_id=given_id)


# --------------------------------------------------------------------------- export
EXPORT_END = "end_of_export"
"""The key of the line every complete export ends with (``export_end_line``)."""


def export_end_line(memories: int, unreadable: Iterable[str] = ()) -> str:
    """The end line of a complete export (no trailing newline): ``{"end_of_export":
    {"memories": memories, "unreadable": [ids...]}}``, ``memories`` the number of memory lines
    before it, ``unreadable`` the ids of records left out because they could not be read."""
    body = {"memories": memories, "unreadable": sorted(set(unreadable))}
    return json.dumps({EXPORT_END: body}, sort_keys=True, separators=(",", ":"))


def export_error_line(error: BaseException) -> str:
    """The line an export stream ends with when it fails after sending lines (no trailing
    newline): ``{"error": {"code", "message"}}``, the HTTP error body; a memory_core error
    keeps its code and message, any other is ``export_failed`` naming only its type."""
    if isinstance(error, MemoryError_):
        code, message = error.code, str(error)
    else:
        code, message = "export_failed", f"the export failed ({type(error).__name__})"
    return json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False, separators=(",", ":"))


def export_end(line: str) -> dict[str, Any] | None:
    """The body of an end line (``{"memories": int, "unreadable": [str]}``), or ``None`` when
    ``line`` is anything else (a memory line, an error line, not JSON)."""
    if EXPORT_END not in line:  # a memory line holds the key only inside a JSON string
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or set(data) != {EXPORT_END}:
        return None
    body = data[EXPORT_END]
    if (
        isinstance(body, dict)
        and isinstance(body.get("memories"), int)
        and isinstance(body.get("unreadable"), list)
        and all(isinstance(i, str) for i in body["unreadable"])
    ):
        return body
    return None


def check_export_end(last: str | None, lines: int) -> dict[str, Any]:
    """The one check of a received export: ``last`` is its last non-blank line (``None``: no
    line at all) and ``lines`` the number of its non-blank lines, the end line included.
    Returns the end line's body (``{"memories", "unreadable"}``; ``unreadable`` non-empty: a
    partial export). Raises ``MigrationError`` when the export failed (it ends with an error
    line, whose code and message the error gives) or is incomplete (it does not end with an
    end line, or the end line counts another number of memory lines)."""
    if last is not None:
        try:
            data = json.loads(last)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict) and set(data) == {"error"} and isinstance(data["error"], dict):
            error = data["error"]
            raise MigrationError(f"the export failed: {error.get('code')}: {error.get('message')}")
    end = export_end(last) if last is not None else None
    if end is None:
        raise MigrationError("the export is incomplete: it does not end with its end_of_export line")
    if end["memories"] != lines - 1:
        raise MigrationError(
            f"the export is incomplete: its end line counts {end['memories']} memories, {lines - 1} arrived"
        )
    return end


async def export_user(store, user_id: str, *, page_size: int = PAGE_SIZE) -> AsyncIterator[str]:
    """Every memory of ``user_id`` as export lines, newest first, then the end line
    (``export_end_line``: the count, and the ids of records that could not be read), each
    ending in ``\\n`` (ready to stream as ``application/x-ndjson``). Pages through
    ``store.list``; a memory is emitted once even if concurrent writes shift the pages
    (memories written during the export may be missing, deleted ones may still appear). The
    first page is read before the first line is yielded. Raises what ``store.list`` raises
    (then no end line is yielded)."""
    seen: set[str] = set()
    unreadable: set[str] = set()
    async for page in list_pages(store, ListQuery(user_id=user_id, limit=page_size)):
        unreadable.update(page.unreadable)
        for memory in page.memories:
            if memory.id not in seen:
                seen.add(memory.id)
                yield memory_to_export_line(memory) + "\n"
    yield export_end_line(len(seen), unreadable - seen) + "\n"


async def open_export(store, user_id: str, *, page_size: int = PAGE_SIZE) -> AsyncIterator[str]:
    """The lines of ``export_user``, its first page already read: raises what ``store.list``
    raises for it (before a response is started, the caller answers an error status).
    Returns the stream of lines; when a later page fails, the stream yields
    ``export_error_line`` of the error (a failure a reader of the body recognises: an error
    line, no end line) and then raises it again, so an HTTP server aborts the chunked
    transfer instead of ending the body cleanly."""
    lines = export_user(store, user_id, page_size=page_size)
    first = await anext(lines)

    async def stream() -> AsyncIterator[str]:
        yield first
        try:
            async for line in lines:
                yield line
        except Exception as e:
            log.warning("the export of a user failed after its first page: %s", type(e).__name__)
            yield export_error_line(e) + "\n"
            raise

    return stream()


async def _all_memories(store, user_id: str, page_size: int = PAGE_SIZE) -> list[Memory]:
    out: dict[str, Memory] = {}
    async for page in list_pages(store, ListQuery(user_id=user_id, limit=page_size)):
        for m in page.memories:
            out.setdefault(m.id, m)
    return list(out.values())


# --------------------------------------------------------------------------- import
async def _aiter(lines: Iterable[str] | AsyncIterable[str]) -> AsyncIterator[str]:
    if isinstance(lines, AsyncIterable):
        async for line in lines:
            yield line
    else:
        for line in lines:
            yield line


def count_import_lines(lines: Sequence[str], max_lines: int) -> int:
    """The lines of an import that may hold a memory (what ``import_lines`` may write: one
    memory at most each; blank lines and an export's end line do not count), counted before
    any store work. Raises ``RequestTooLarge`` (413) when there are more than ``max_lines``
    (``global.limits.import_lines``), naming the limit."""
    count = sum(1 for line in lines if line.strip() and export_end(line) is None)
    if count > max_lines:
        raise RequestTooLarge(
            f"this import has {count} lines: the limit is {max_lines} lines per request "
            "(global.limits.import_lines); send the file in chunks (memory-router import --chunk-lines)"
        )
    return count


DROPPED_LINE = (
    "not stored: every sentence holds a secret or personal value whose redaction policy is drop "
    "(global.stores.memory.redaction)"
)
"""The ``failed`` reason of an import line whose memory redaction dropped whole."""


async def import_lines(
    store,
    lines: Iterable[str] | AsyncIterable[str],
    *,
    user_id: str | None = None,
    created_by: str | None = None,
    on_progress: Callable[[ImportReport], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> ImportReport:
    """Import export lines into ``store`` (which embeds each memory with its own model).

    Blank lines and an export's end line (``export_end``) are ignored; line numbers in ``failed``/``renamed`` are 1-based positions in
    ``lines``. Each line's memory gets ``import_id`` (its own id when issued for the user,
    else an id scoped to the user, listed in ``renamed``) and is written with
    ``store.write`` (curation, when ``store`` curates). A memory the user already holds
    under the line's id or that id, or whose fact a record of the user already holds (the
    write's outcome ``reinforced``: curation merges an imported memory without reinforcing
    it, see ``stores.curating``) → ``skipped_duplicates``; a line that refines a record
    is imported into that record (in ``renamed`` when the line gave another id). Importing
    the same lines again changes no record, whatever the first import did; a bad line, content the store
    refuses or a memory redaction drops whole (``DROPPED_LINE``) → ``failed`` (with the reason). Nothing here depends on other users' memories.
    ``on_progress(report)`` is called after each line. Up to ``concurrency`` memories are
    stored at once.

    Raises ``StoreClosed`` / ``StoreUnavailable`` (the import stops; lines already stored stay,
    and rerunning the import is safe).
    """
    importer = _LineImporter(store, ImportReport(), on_progress, asyncio.Semaphore(max(1, concurrency)))
    tasks: set[asyncio.Task] = set()
    try:
        async for number, raw in _memory_lines(lines):
            parsed = importer.parse(number, raw, user_id=user_id, created_by=created_by)
            if parsed is None:
                continue
            await importer.slots.acquire()  # released by store_line
            task = asyncio.create_task(importer.store_line(number, parsed))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            _raise_fatal(tasks)  # surface fatal errors early
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    return importer.finished()


async def _memory_lines(lines: Iterable[str] | AsyncIterable[str]) -> AsyncIterator[tuple[int, str]]:
    """``(1-based position, line)`` of each line that may hold a memory: blank lines and an
    export's end line (``export_end``) are skipped, but counted in the positions."""
    number = 0
    async for raw in _aiter(lines):
        number += 1
        if raw.strip() and export_end(raw) is None:
            yield number, raw


def _raise_fatal(tasks: set[asyncio.Task]) -> None:
    """Raise the exception of the first finished task that failed (a ``_FATAL`` error: the
    line tasks catch every other)."""
    for t in [t for t in tasks if t.done() and t.exception() is not None]:
        raise t.exception()  # type: ignore[misc]


@dataclass
class _LineImporter:
    """The state of one ``import_lines`` call: the ``store``, the ``report`` so far, the
    ``on_progress`` callback (after each line) and ``slots``, the bound on memories stored at
    once (acquired before ``store_line``, which releases it)."""

    store: Any
    report: ImportReport
    on_progress: Callable[[ImportReport], None] | None
    slots: asyncio.Semaphore

    def progress(self) -> None:
        """Tell ``on_progress`` the report so far."""
        if self.on_progress is not None:
            self.on_progress(self.report)

    def parse(self, number: int, raw: str, *, user_id: str | None, created_by: str | None) -> ParsedLine | None:
        """Line ``number`` parsed (``parse_import_line``); ``None`` when it is bad (then in
        ``failed``, with the reason)."""
        try:
            return parse_import_line(raw, user_id=user_id, created_by=created_by)
        except InvalidInput as e:
            self.report.failed.append(ImportFailure(line=number, error=str(e)))
            self.progress()
            return None

    def note_renamed(self, number: int, parsed: ParsedLine, held_by: str | None = None) -> None:
        """List line ``number`` in ``renamed`` when the id it gave is not the id its memory is
        held under (``held_by``, by default the line's ``import_id``)."""
        new_id = held_by or parsed.memory.id
        if parsed.given_id is not None and parsed.given_id != new_id:
            self.report.renamed.append(ImportRenamed(line=number, id=parsed.given_id, new_id=new_id))

    async def store_line(self, number: int, parsed: ParsedLine) -> None:
        """Store line ``number``'s memory (``write_line``) and count its outcome; a
        ``DuplicateMemory`` is resolved by ``written_meanwhile``, another ``MemoryError_`` is
        a ``failed`` line, a ``_FATAL`` error propagates. Releases a slot; reports progress."""
        try:
            await self.write_line(number, parsed)
        except DuplicateMemory:
            await self.written_meanwhile(number, parsed)
        except _FATAL:
            raise
        except MemoryError_ as e:
            self.report.failed.append(ImportFailure(line=number, error=str(e)))
        finally:
            self.slots.release()
        self.progress()

    async def write_line(self, number: int, parsed: ParsedLine) -> None:
        """A memory the user holds under the line's id or its ``import_id`` is a skipped
        duplicate; else it is written (``store.write``, curation when ``store`` curates): a
        fact the user already held is merged into that record (``reinforced``: a skipped
        duplicate, which a repeat leaves as it is), one redaction drops whole is ``failed``
        (``DROPPED_LINE``), anything else imported."""
        memory = parsed.memory
        ids = [memory.id] + ([parsed.given_id] if parsed.given_id not in (None, memory.id) else [])
        held = await self.store.get_many(ids, memory.user_id)  # the user's own memories only
        if held:
            self.report.skipped_duplicates += 1
            self.note_renamed(number, parsed, held[0].id)
            return
        (result,) = await self.store.write([memory])
        if result.outcome == WriteOutcome.DROPPED:  # nothing was stored: not imported
            self.report.failed.append(ImportFailure(line=number, error=DROPPED_LINE))
            return
        if result.outcome == WriteOutcome.REINFORCED:
            self.report.skipped_duplicates += 1
        else:
            self.report.imported += 1
        self.note_renamed(number, parsed, result.memory.id)

    async def written_meanwhile(self, number: int, parsed: ParsedLine) -> None:
        """After a ``DuplicateMemory``: written meanwhile by this user (a concurrent import):
        a skipped duplicate; else the astronomically unlikely collision of two scoped ids: a
        ``failed`` line. Either way not this line's doing."""
        if await self.store.get_many([parsed.memory.id], parsed.memory.user_id):
            self.report.skipped_duplicates += 1
            self.note_renamed(number, parsed)
        else:
            self.report.failed.append(ImportFailure(line=number, error="id conflict: import the line without its id"))

    def finished(self) -> ImportReport:
        """The report, ``failed`` and ``renamed`` sorted by line."""
        self.report.failed.sort(key=lambda f: f.line)
        self.report.renamed.sort(key=lambda r: r.line)
        return self.report


# --------------------------------------------------------------------------- migration
def load_user_ids(source: str | Path | Iterable[str]) -> list[str]:
    """User ids from a file (one per line, ``#`` comments and blank lines ignored, ``-`` =
    stdin) or from an iterable of ids; order kept, duplicates removed. Raises
    ``InvalidInput`` when the file cannot be read or holds no id."""
    if isinstance(source, (str, Path)):
        try:
            text = sys.stdin.read() if str(source) == "-" else Path(source).read_text()
        except OSError as e:
            raise InvalidInput(f"cannot read user list {source}: {e}") from e
        items: Iterable[str] = text.splitlines()
    else:
        items = source
    ids = [s.split("#", 1)[0].strip() for s in items]
    ids = list(dict.fromkeys(i for i in ids if i))
    if not ids:
        raise InvalidInput("the user list is empty")
    return ids


async def migrate(
    source_store,
    target_store,
    user_ids: Iterable[str] | AsyncIterable[str],
    *,
    on_progress: Callable[[MigrationProgress], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> MigrationReport:
    """Copy every memory of ``user_ids`` from ``source_store`` to ``target_store``.

    When the stores have different identities each memory is stored *without* its vector,
    so the target's embed function re-embeds it with the new model; with the same identity
    (e.g. moving between backends) vectors are copied. Everything else (id, timestamps,
    access counts, metadata) is kept. The source is only read (``list``), never modified.

    Resumable and idempotent: ids already in the target are skipped. After each user the
    counts are checked: every source id must be in the target and the totals must match.

    Raises ``MigrationError`` (count check failed, or the target refused a memory),
    ``StoreClosed``/``StoreUnavailable`` (rerun to resume).
    """
    reembed = not (source_store.identity is not None and source_store.identity == target_store.identity)
    report = MigrationReport(reembedded=reembed)
    async for user_id in _aiter(user_ids):
        report.users.append(
            await _migrate_user(source_store, target_store, user_id, reembed, on_progress, max(1, concurrency))
        )
    return report


async def _migrate_user(
    source_store,
    target_store,
    user_id: str,
    reembed: bool,
    on_progress: Callable[[MigrationProgress], None] | None,
    concurrency: int,
) -> UserMigration:
    """One user of ``migrate`` (see there): copy what the target lacks, then check the counts."""
    require_user_id(user_id)
    memories = [
        m if is_memory_id(m.id) else m.model_copy(update={"id": scoped_memory_id(user_id, "id:" + m.id)})
        for m in await _all_memories(source_store, user_id)
    ]  # a record from before the id format gets its scoped id (the target refuses others)
    result = UserMigration(user_id=user_id, source=len(memories))
    ids = [m.id for m in memories]
    existing: set[str] = set()
    for i in range(0, len(ids), PAGE_SIZE):
        existing.update(m.id for m in await target_store.get_many(ids[i : i + PAGE_SIZE], user_id))
    todo = [m for m in memories if m.id not in existing]
    result.skipped_existing = len(memories) - len(todo)
    done = result.skipped_existing
    if on_progress is not None:
        on_progress(MigrationProgress(user_id=user_id, done=done, total=len(memories)))
    sem = asyncio.Semaphore(concurrency)
    errors: list[str] = []

    async def copy(memory: Memory) -> None:
        nonlocal done
        if reembed:
            memory = memory.model_copy(update={"embedding": None, "embedding_identity": None})
        async with sem:
            try:
                await target_store.store(memory)
                result.migrated += 1
            except DuplicateMemory:
                result.skipped_existing += 1  # written meanwhile (concurrent run)
            except _FATAL:
                raise
            except MemoryError_ as e:
                errors.append(f"{memory.id}: {e}")
        done += 1
        if on_progress is not None:
            on_progress(MigrationProgress(user_id=user_id, done=done, total=len(memories)))

    await asyncio.gather(*(copy(m) for m in todo))
    if errors:
        raise MigrationError(f"user {user_id!r}: {len(errors)} memories refused by the target: {errors[:5]}")
    present: set[str] = set()
    for i in range(0, len(ids), PAGE_SIZE):
        present.update(m.id for m in await target_store.get_many(ids[i : i + PAGE_SIZE], user_id))
    source_total = (await source_store.list(ListQuery(user_id=user_id, limit=1))).total
    result.target = (await target_store.list(ListQuery(user_id=user_id, limit=1))).total
    missing = len(set(ids) - present)
    if missing or result.target != source_total:
        raise MigrationError(
            f"user {user_id!r}: count check failed: source {source_total}, target {result.target}, "
            f"{missing} source memories missing in the target"
        )
    return result
