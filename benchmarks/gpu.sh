#!/usr/bin/env bash
# Train-step throughput and MFU of acl-jax on an accelerator, in under 8 minutes:
#   bash benchmarks/gpu.sh               # from the repo root
#   bash benchmarks/gpu.sh --profile     # the fixed-cost check: CE bf16 at both shapes,
#                                        # profiled, the cost beyond the ops named in ms
#   GPU_SMOKE=1 bash benchmarks/gpu.sh   # tiny shapes, any backend (CPU too), under a minute
# CE and ACL-Grad (gated, angle over all params) at BERT-base and MiniLM-L6 shape, B32 L128,
# float32 and bfloat16, random-init weights, and HF PyTorch's BERT-base step in a child
# process (bf16 autocast; eager after the first objective and dtype at both shapes,
# torch.compile last, stopped after 240 s or at the budget). It uses the machine's own Python and its preinstalled
# jax, flax and optax (no package index, data or checkpoint is needed; torch and transformers
# where installed). Extra arguments go to benchmarks/gpu_step.py (see its --help).
# tests/test_gpu_step.py runs GPU_SMOKE=1 ... --profile on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
# A second run on the same machine loads its compiled steps instead of compiling them again.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/acl_jax_gpu_cache}"
GPU_SMOKE="${GPU_SMOKE:-0}" "$PY" - <<'PYEOF'
import os, sys
import jax, flax, optax
d = jax.devices()[0]
print(f"jax {jax.__version__} on {d.platform}: {d.device_kind} x{jax.device_count()}")
if d.platform == "cpu" and os.environ["GPU_SMOKE"] != "1":
  sys.exit("No accelerator visible to JAX (is its CUDA plugin installed?): the full shapes "
           "would take hours on a CPU. Run GPU_SMOKE=1 bash benchmarks/gpu.sh to check the "
           "script here.")
PYEOF
if [[ "${GPU_SMOKE:-0}" == "1" ]]; then
  exec timeout 300 "$PY" -m benchmarks.gpu_step --smoke "$@"
fi
# 420 s of cases at most (a case in flight finishes), inside a hard 470 s stop.
exec timeout 470 "$PY" -m benchmarks.gpu_step --budget 420 "$@"
