r"""Step time of the multi-exit strategies, and of gated ACL-CL's backward passes (MiniLM-L6).

  python -m benchmarks.multi_exit_overhead [--reps 5] [--model minilm] [--batch 32] [--seq 64]

A head on every layer, mean-pooled exits (the RESULTS.md multi-exit setting). Variants, timed in
alternating repetitions in one process:
  jt            joint training: sum of every exit's CE, one gradient
  kd            JT plus distillation from the final exit, one gradient
  acl_cl_sum    ACL-CL without the gate: every term in one gradient
  acl_cl_last   ACL-CL gated as SPEC §2.5 (multi_exit.gate_ce="last"): the angle between the
                final exit's CE and ACL gradients, the lower exits' losses added outside the
                gate; three jax.grad calls
  acl_cl_all    gate_ce="all": the angle against every exit's CE; two jax.grad calls
  acl_cl_top    gate_ce="last" with loss.angle_params="top": the angle on the top layer and
                the heads (the same three full gradients, another partition for the angle)
Writes benchmarks/results/multi_exit_overhead.json.
"""
import json

from benchmarks import common, variants

_ACL = {"name": "acl_embed", "lam": 0.5, "tau": 0.3}
VARIANTS = {
    "jt": {"name": "ce", "multi_exit": {"strategy": "jt"}},
    "kd": {"name": "ce", "multi_exit": {"strategy": "kd"}},
    "acl_cl_sum": {**_ACL, "multi_exit": {"strategy": "acl_cl"}},
    "acl_cl_last": {**_ACL, "gate": True, "multi_exit": {"strategy": "acl_cl", "gate_ce": "last"}},
    "acl_cl_all": {**_ACL, "gate": True, "multi_exit": {"strategy": "acl_cl", "gate_ce": "all"}},
    "acl_cl_top": {**_ACL, "gate": True, "angle_params": "top",
                   "multi_exit": {"strategy": "acl_cl", "gate_ce": "last"}},
}


def main():
  p = variants.arg_parser("multi_exit_overhead.json")
  p.add_argument("--variants", default=",".join(VARIANTS),
                 help=f"comma-separated subset of {list(VARIANTS)}")
  a = p.parse_args()
  names = [v for v in a.variants.split(",") if v]
  unknown = sorted(set(names) - set(VARIANTS))
  if unknown or not names:
    p.error(f"--variants: unknown {unknown or 'empty list'}; known: {list(VARIANTS)}")
  res = variants.time_variants(a.model, a.batch, a.seq, {n: VARIANTS[n] for n in names},
                               reps=a.reps, exits="all", exit_pooling="mean")
  base = names[0]
  ungated = "acl_cl_sum" if "acl_cl_sum" in res else base
  rows = [[n, r["median"], r["median"] / res[base]["median"],
           r["median"] / res[ungated]["median"], r["compile_s"]] for n, r in res.items()]
  table = common.markdown_table(["variant", "s/step (median)", f"x {base}", f"x {ungated}",
                                 "first call s"], rows)
  print(f"## Multi-exit step time: {a.model} B{a.batch} L{a.seq}, exits on every layer "
        f"(mean-pooled), {a.reps} alternating reps")
  print(table)
  common.write_json(a.out, {**variants.header(), "results": res, "table": table})
  print(json.dumps({n: round(r["median"], 4) for n, r in res.items()}))


if __name__ == "__main__":
  main()
