r"""Step time of CE+G-Loss against CE (and CE+SCL) at batch 32, 64 and 128 (MiniLM-L6, L64).

  python -m benchmarks.gloss_overhead [--batches 32,64,128] [--seq 64] [--reps 5]

G-Loss builds the batch graph and solves label propagation with jnp.linalg.solve inside the
step; the paper reports graph construction plus propagation under 2% of epoch time. Target:
ratio <= 1.05. CE+SCL is timed alongside because the paper also reports a G-Loss epoch as
faster than an SCL one on MR (27.77 s against 33.04 s). Writes
benchmarks/results/gloss_overhead.json.
"""
from benchmarks import common, variants

VARIANTS = {"ce": {"name": "ce"}, "gloss": {"name": "gloss", "lam": 0.8, "sigma": 0.667},
            "scl": {"name": "scl", "lam": 0.9, "tau": 0.3}}


def main():
  p = variants.arg_parser("gloss_overhead.json", one_batch=False)
  p.add_argument("--batches", default="32,64,128")
  a = p.parse_args()
  out, rows = {}, []
  for b in (int(x) for x in a.batches.split(",")):
    res = variants.time_variants(a.model, b, a.seq, VARIANTS, reps=a.reps)
    out[b] = res
    ce, gl, scl = (res[k]["median"] for k in ("ce", "gloss", "scl"))
    rows.append([b, ce, gl, scl, gl / ce, gl / scl])
    print(f"B{b}: ce {ce:.3f}s gloss {gl:.3f}s scl {scl:.3f}s", flush=True)
  table = common.markdown_table(["batch", "CE s/step", "G-Loss s/step", "SCL s/step",
                                 "G-Loss / CE", "G-Loss / SCL"], rows)
  print(f"## G-Loss step overhead: {a.model} L{a.seq}, {a.reps} alternating reps")
  print(table)
  common.write_json(a.out, {**variants.header(), "results": out, "table": table})


if __name__ == "__main__":
  main()
