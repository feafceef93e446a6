#!/usr/bin/env bash
# Runs every speed benchmark in sequence (they must not share the CPU), logging to
# benchmarks/results/. Usage: nohup bash benchmarks/run_all.sh > benchmarks/results/run_all.log 2>&1 &
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
mkdir -p benchmarks/results
for b in throughput acl_grad_overhead gloss_overhead multi_exit_overhead; do
  if [ -f "benchmarks/results/$b.json" ] && [ -z "${FORCE:-}" ]; then echo "skip $b (done)"; continue; fi
  echo "=== $b $(date -u +%FT%TZ)"
  "$PY" -m "benchmarks.$b" 2>&1 | grep -v "it/s\]" | tee "benchmarks/results/$b.log"
done
echo "=== done $(date -u +%FT%TZ)"
