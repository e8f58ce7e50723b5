#!/usr/bin/env bash
# The first read of a long-notes user (python -m benchmarks.loop_lag --cases first-read: -m, so that each tree imports its own memory_core): 9afebd6 (texts read on the
# loop) against the build thread, alternated old/new/new/old; /work/old is a git worktree of 9afebd6 with this
# loop_lag.py copied in. Output: loop_lag_build_off_loop_ab_2026-12-07.txt
for tree in /work/old /work/main /work/main /work/old; do
  echo "== $tree ($(git -C $tree rev-parse --short HEAD)$(git -C $tree diff --quiet -- memory_core || echo ' + working tree'))"
  (cd $tree && /work/main/.venv/bin/python -c "import memory_core, sys; print(\"memory_core from\", memory_core.__file__)" && /work/main/.venv/bin/python -m benchmarks.loop_lag --cases first-read --rounds 2 2>&1 | grep -v "Loading weights")
done
