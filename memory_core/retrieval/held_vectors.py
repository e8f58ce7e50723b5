"""One user's memory vectors held in memory, searchable exactly.

``HeldVectors`` keeps unit float32 vectors as rows of one matrix ``[capacity, dimension]``
(a row per memory id, freed rows reused, the matrix compacted when more than half of it is
free), so an exact cosine top-k over a user's memories is one matrix-vector product, far
cheaper than a backend search round trip (figures: README, "Retrieval and the read path").
``memory_core.stores.hybrid.HybridStore`` uses it for the vector side of a hybrid retrieve.

Memory: rows of 4 bytes × dimension (1.5 KB at 384 dimensions). Growth doubles the capacity,
so after inserts alone there are at most 2 rows per held vector; deletes leave free rows
(reused by the next inserts) until more than half of the used rows are free, when the matrix
is compacted: at worst 4 rows per held vector. No Ray, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from ..types import as_float32

_MIN_CAPACITY = 16


def unit_vector(embedding) -> np.ndarray | None:
    """``embedding`` as a finite 1-D float32 unit vector (cosine = dot product, as a COSINE
    metric backend computes it whether or not it normalised what it stored), else None
    (missing, not 1-D, empty, non-finite or zero)."""
    if embedding is None:
        return None
    vec = np.asarray(embedding, dtype=np.float32)
    if vec.ndim != 1 or not vec.size or not np.isfinite(vec).all():
        return None
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else None


def clamp_cosine(cos: float) -> float | None:
    """``cos`` clamped to [-1, 1] (float32 rounding must not push it past a floor of -1) and
    rounded to float32; None when it is not finite."""
    return as_float32(max(-1.0, min(1.0, cos))) if math.isfinite(cos) else None


def cosine(vec: np.ndarray | None, q: np.ndarray) -> float | None:
    """The one cosine of two unit float32 vectors (``np.dot``, clamped, float32), used for
    every cosine that is compared with a floor or reported, so the same pair always gets the
    same value whichever path found it; None when ``vec`` is missing, of another shape or not
    finite."""
    if vec is None or vec.shape != q.shape:
        return None
    return clamp_cosine(float(np.dot(vec, q)))


class HeldVectors:
    """Unit vectors by memory id, all of one dimension (fixed by the first ``put``).

    Not thread-safe (one event loop, no awaits inside).
    """

    def __init__(self) -> None:
        self._version = 0
        self._clear()

    def _clear(self) -> None:
        """The empty state: no matrix (the first ``put`` fixes the dimension again)."""
        self._rows: np.ndarray | None = None  # [capacity, dimension]
        self._live = np.zeros(0, dtype=bool)  # [capacity]: the row holds a vector
        self._ids: list[str | None] = []  # row → memory id; None: a free row
        self._row_of: dict[str, int] = {}
        self._free: list[int] = []
        self._version += 1

    @property
    def version(self) -> int:
        """A counter that changes whenever the row layout does (a row taken or freed, the
        matrix compacted or cleared): a mask over the rows (``mask``) made at one version is
        valid until it changes. Replacing the vector of a held id keeps it."""
        return self._version

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, memory_id: str) -> bool:
        return memory_id in self._row_of

    @property
    def dimension(self) -> int | None:
        return None if self._rows is None else int(self._rows.shape[1])

    @property
    def capacity(self) -> int:
        return 0 if self._rows is None else int(self._rows.shape[0])

    @property
    def _held(self) -> np.ndarray:
        """The matrix, for code that runs while a row is allocated (it exists from the first
        allocation until the last ``remove`` clears the state)."""
        assert self._rows is not None
        return self._rows

    def get(self, memory_id: str) -> np.ndarray | None:
        """A copy of the vector held for ``memory_id`` (None when none is held)."""
        row = self._row_of.get(memory_id)
        return None if row is None else self._held[row].copy()

    def put(self, memory_id: str, vector) -> bool:
        """Hold ``vector`` (any finite non-zero 1-D array; stored normalised) for ``memory_id``,
        replacing what was held. A vector that is not usable, or of another dimension than
        those held, is not held (and what was held for the id is dropped): returns False."""
        vec = unit_vector(vector)
        if vec is None or (self._rows is not None and vec.shape[0] != self._rows.shape[1]):
            self.remove(memory_id)
            return False
        row = self._row_of.get(memory_id)
        if row is None:
            row = self._allocate(vec.shape[0])
            self._row_of[memory_id] = row
            self._ids[row] = memory_id
            self._live[row] = True
            self._version += 1
        self._held[row] = vec
        return True

    def remove(self, memory_id: str) -> bool:
        """Drop what is held for ``memory_id``; False when nothing was."""
        row = self._row_of.pop(memory_id, None)
        if row is None:
            return False
        self._ids[row] = None
        self._held[row] = 0.0
        self._live[row] = False
        self._free.append(row)
        self._version += 1
        if not self._row_of:
            self._clear()
        elif len(self._free) > _MIN_CAPACITY and len(self._free) * 2 > len(self._ids):
            self._compact()
        return True

    def mask(self, keep: Callable[[str], bool]) -> np.ndarray:
        """The rows whose id ``keep`` accepts, as a boolean array over the rows in use (free
        rows False), for ``top(..., allowed=...)``: one pass over the held ids, valid while
        ``version`` stays the same (a caller that searches many times between writes builds
        it once)."""
        n = len(self._ids)
        return self._live[:n] & np.fromiter((i is not None and keep(i) for i in self._ids), dtype=bool, count=n)

    def mask_of(self, memory_ids: Iterable[str]) -> np.ndarray:
        """The rows of ``memory_ids`` (those held), as a boolean array over the rows in use
        like ``mask``'s; its cost follows the number of ids, not of rows."""
        out = np.zeros(len(self._ids), dtype=bool)
        rows = [r for r in map(self._row_of.get, memory_ids) if r is not None]
        if rows:
            out[rows] = True
        return out

    def top(
        self,
        query: np.ndarray,
        k: int,
        keep: Callable[[str], bool] | None = None,
        *,
        allowed: np.ndarray | None = None,
    ) -> list[tuple[str, float]]:
        """The ``k`` held vectors most cosine-similar to the unit vector ``query`` (shape
        ``[dimension]``), as ``(memory_id, cosine)`` best first, ties by id; only ids for
        which ``keep(id)`` is true when ``keep`` is given, and only rows that ``allowed`` (a
        ``mask`` of this version) marks when it is given. ``[]`` when nothing is held, ``k``
        ≤ 0 or ``query`` is of another dimension. Raises ``ValueError`` for an ``allowed``
        mask of another row count (made at another version)."""
        n = len(self._ids)
        if not self._row_of or k <= 0 or query.shape != (self._held.shape[1],):
            return []
        rows = self._held
        sims = rows[:n] @ query.astype(np.float32, copy=False)
        if allowed is None:
            allowed = self._live[:n] if keep is None else self.mask(keep)
        else:
            if allowed.shape != (n,):
                raise ValueError(f"mask of {allowed.shape} rows for {n} rows in use: made at another version")
            allowed = allowed & self._live[:n]
            if keep is not None:
                allowed = allowed & self.mask(keep)
        sims = np.where(allowed & np.isfinite(sims), sims, -np.inf)
        k = min(k, int(allowed.sum()))
        if k <= 0:
            return []
        part = np.argpartition(-sims, k - 1)[:k]
        # one more than k when the k-th score is tied beyond the partition: ties go by id
        kth = sims[part].min()
        tied = np.flatnonzero(sims >= kth)
        # the matrix product ranks; the reported cosine is ``cosine`` of the row (the same
        # value a loaded copy of the vector gets, to the bit)
        q = query.astype(np.float32, copy=False)
        scored = [(self._ids[r], cosine(rows[r], q)) for r in tied if np.isfinite(sims[r])]
        out = [(i, c) for i, c in scored if i is not None and c is not None]  # finite rows are live: i is set
        out.sort(key=lambda t: (-t[1], t[0]))
        return out[:k]

    def _allocate(self, dimension: int) -> int:
        if self._free:
            return self._free.pop()
        if self._rows is None:
            self._rows = np.zeros((_MIN_CAPACITY, dimension), dtype=np.float32)
            self._live = np.zeros(_MIN_CAPACITY, dtype=bool)
        row = len(self._ids)
        if row >= self._rows.shape[0]:
            grown = np.zeros((2 * self._rows.shape[0], dimension), dtype=np.float32)
            grown[:row] = self._rows
            self._rows = grown
            live = np.zeros(grown.shape[0], dtype=bool)
            live[:row] = self._live
            self._live = live
        self._ids.append(None)
        return row

    def _compact(self) -> None:
        live = [(i, r) for r, i in enumerate(self._ids) if i is not None]
        capacity = max(_MIN_CAPACITY, 1 << (len(live) - 1).bit_length())
        rows = np.zeros((capacity, self._held.shape[1]), dtype=np.float32)
        rows[: len(live)] = self._held[[r for _, r in live]]
        self._rows = rows
        self._live = np.zeros(capacity, dtype=bool)
        self._live[: len(live)] = True
        self._ids = [i for i, _ in live]
        self._row_of = {i: r for r, (i, _) in enumerate(live)}
        self._free = []
        self._version += 1
