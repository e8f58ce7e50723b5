"""The script behind require_user_id_ascii_2026-12-07.txt (run from the repository root:
``.venv/bin/python benchmarks/results/require_user_id_ascii_2026-12-07.py``): a1f0b02's
``require_user_id`` (loaded from git) against this checkout's, on 500 ids of the shape
``benchmarks.lanes`` gives its admin users."""

import subprocess
import sys
import timeit
import types

print("# 500 ids of benchmarks.lanes' admin users (lanes-<run>-seen-<n>) validated by require_user_id, best of 5 x 20 "
      "rounds, ms per 500 ids; 'before' = a1f0b02's memory_core/sanitize.py loaded from git, 'after' = dec0d11's; 2026-12-07")  # fmt: skip
src = subprocess.run(
    ["git", "show", "a1f0b02:memory_core/sanitize.py"], capture_output=True, text=True, check=True
).stdout
old = types.ModuleType("memory_core.old_sanitize")
old.__dict__["__package__"] = "memory_core"
sys.modules["memory_core.old_sanitize"] = old
exec(compile(src, "old_sanitize.py", "exec"), old.__dict__)
from memory_core.sanitize import require_user_id as new  # noqa: E402

ids = [f"lanes-1a2b3c4d-seen-{i}" for i in range(500)]
for name, f in (("before", old.require_user_id), ("after", new)):
    best = min(timeit.repeat(lambda f=f: [f(u) for u in ids], number=20, repeat=5)) / 20 * 1000
    print(f"{name}: {best:.3f} ms")
