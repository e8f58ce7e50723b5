#!/bin/bash
# 2026-12-07 afternoon, the final service: item 1 in process (flat_cost, twice), item 2 (lanes, twice), items 1 and 5 through HTTP (full_service alternated), one after another.
cd /work/main
export COLUMNS=200
echo "=== flat_cost inprocess 1 $(date +%T)"; timeout 900 .venv/bin/python benchmarks/flat_cost.py --modes inprocess --totals 1000,100000 --queries 1000 2>&1 | grep -v "Loading weights"
echo "=== lanes 2 $(date +%T)"; (source serve.env; timeout 1200 .venv/bin/python -m benchmarks.lanes --repeat 2 --large-memories 500 --idle-seconds 15) 2>&1 | grep -v "Traceback\|BlockingIO\|The above\|DataDirLocked\|Failed to start"
echo "=== full_service 3 $(date +%T)"; (source serve.env; timeout 1500 .venv/bin/python -m benchmarks.full_service --totals 1000,100000 --rounds 150 --alternate 3) 2>&1 | grep -v "Traceback\|BlockingIO\|The above\|DataDirLocked\|Failed to start"
echo "=== lanes 3 $(date +%T)"; (source serve.env; timeout 1200 .venv/bin/python -m benchmarks.lanes --repeat 2 --large-memories 500 --idle-seconds 15) 2>&1 | grep -v "Traceback\|BlockingIO\|The above\|DataDirLocked\|Failed to start"
echo "=== flat_cost inprocess 2 $(date +%T)"; timeout 900 .venv/bin/python benchmarks/flat_cost.py --modes inprocess --totals 1000,100000 --queries 1000 2>&1 | grep -v "Loading weights"
echo "=== DONE $(date +%T)"
