#!/usr/bin/env bash
# BENCHMARKS.md's per-CPU-kind measurements in one command, on the machine it runs on: the MR
# job against HF PyTorch (vs_hf), where the CE step's time goes (profile_step), the step's
# GEMMs alone in XLA:CPU and torch (gemm_roofline), the XLA:CPU options A/B (xla_flags_ab),
# the dense layers' product-form A/B (dense_ab), and the G-Loss cost claims' rounds
# (cost_claims, into results/records/cost.jsonl: RESULTS.md decides the claims per CPU kind;
# a kind already recorded is refused). Outputs are named by the CPU's vendor, family and
# model, e.g. benchmarks/results/vs_hf_amd_f25m1_mr_full.json.
#
# A timing beside other work is not a measurement: every train.py and eval.py process running
# at nice 19 (a study sweep's runs) is paused with SIGSTOP for the duration and resumed with
# SIGCONT on exit, failure or interrupt included. Ray's own processes are left running, so its
# heartbeats and the runs' claims stay alive.
#
# Usage: bash benchmarks/cpu_kind.sh [vs_hf] [profile] [gemm] [flags] [dense] [cost]
#        (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(vs_hf profile gemm flags dense cost)

kind=$("$PY" -c "from acl_jax import cpuinfo; print(cpuinfo.kind())")
echo "CPU: $("$PY" -c 'from acl_jax import cpuinfo; print(cpuinfo.describe())') -> $kind"

paused=$(ps -eo pid=,ni=,args= | awk '$2 == 19 && /(train|eval)\.py/ && !/awk/ {print $1}' |
  tr '\n' ' ')
resume() { [ -n "$paused" ] && kill -CONT $paused 2>/dev/null; echo "resumed: ${paused:-nothing}"; }
trap resume EXIT
[ -n "$paused" ] && kill -STOP $paused
echo "paused: ${paused:-nothing}"

for s in "${steps[@]}"; do
  echo "=== $s $(date -u +%FT%TZ)"
  case $s in
    vs_hf) "$PY" -m benchmarks.vs_hf --tasks mr --seeds 0 --fresh \
             --out "benchmarks/results/vs_hf_${kind}_mr_full.json" ;;
    profile) "$PY" -m benchmarks.profile_step --seq 64 --top 25 \
               --out "benchmarks/results/profile_step_L64_${kind}.json" ;;
    gemm) "$PY" -m benchmarks.gemm_roofline --rounds 2 \
            --out "benchmarks/results/gemm_roofline_${kind}.json" ;;
    flags) "$PY" -m benchmarks.xla_flags_ab --rounds 2 \
             --out "benchmarks/results/xla_flags_ab_${kind}.json" ;;
    dense) "$PY" -m benchmarks.dense_ab --seq 64 --reps 9 \
             --out "benchmarks/results/dense_ab_${kind}.json" ;;
    cost) "$PY" -m benchmarks.cost_claims --record ;;
    *) echo "unknown step $s: use vs_hf, profile, gemm, flags, dense or cost" >&2; exit 2 ;;
  esac
done
echo "=== done $(date -u +%FT%TZ)"
