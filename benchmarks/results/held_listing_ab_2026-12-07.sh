#!/usr/bin/env bash
# A loaded user's listing from the held records: 9afebd6 (sorted at each listing, kept until the next write) against
# the records kept in order (UserIndex.by_time), alternated old/new/new/old; /work/old is a git worktree of 9afebd6
# with this benchmarks/held_listing.py copied in (the index frozen after loading, as a shard leaves it); -m, so that
# each tree imports its own memory_core.
# Output: held_listing_ab_2026-12-07.txt
for tree in /work/old /work/main /work/main /work/old; do
  echo "== $tree ($(git -C $tree rev-parse --short HEAD)$(git -C $tree diff --quiet -- memory_core || echo ' + working tree'))"
  (cd $tree && /work/main/.venv/bin/python -m benchmarks.held_listing --memories 100000 --rounds 7 2>&1)
done
