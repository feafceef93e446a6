r"""Step time of ACL-Grad against the ungated CE+ACL sum and CE alone (MiniLM-L6, B32 L64).

  python -m benchmarks.acl_grad_overhead [--reps 5] [--model minilm] [--batch 32] [--seq 64]

Variants, timed in alternating repetitions in one process:
  ce           CE only (one gradient)
  acl_sum      CE + lam*ACL-Embed, one gradient of the summed loss (no gate)
  acl_grad     ACL-Grad, angle over all params: two jax.grad calls + lax.cond
  acl_grad_top ACL-Grad, angle on the top layer + heads: the same two jax.grad calls, the
               angle over another parameter partition
Target: acl_grad <= 1.6x ce. Writes benchmarks/results/acl_grad_overhead.json.
"""
import json

from benchmarks import common, variants

VARIANTS = {
    "ce": {"name": "ce"},
    "acl_sum": {"name": "acl_embed", "lam": 0.5},
    "acl_grad": {"name": "acl_embed", "lam": 0.5, "gate": True},
    "acl_grad_top": {"name": "acl_embed", "lam": 0.5, "gate": True, "angle_params": "top"},
}


def main():
  p = variants.arg_parser("acl_grad_overhead.json")
  a = p.parse_args()
  res = variants.time_variants(a.model, a.batch, a.seq, VARIANTS, reps=a.reps)
  rows = [[n, r["median"], r["median"] / res["ce"]["median"],
           r["median"] / res["acl_sum"]["median"]] for n, r in res.items()]
  table = common.markdown_table(["variant", "s/step (median)", "x CE", "x CE+ACL sum"], rows)
  print(f"## ACL-Grad step overhead: {a.model} B{a.batch} L{a.seq}, {a.reps} alternating reps")
  print(table)
  common.write_json(a.out, {**variants.header(), "results": res, "table": table})
  print(json.dumps({n: round(r["median"], 4) for n, r in res.items()}))


if __name__ == "__main__":
  main()
