"""``python -m memory_core.cli``: the ``memory-router`` command."""

from . import app

app()
