r"""lambda-sensitivity curves from a sweep over loss.lam (scripts/sweep.py summary.json).

  python scripts/sweep.py --root runs/sweeps/rte_lam --config configs/glue.py:rte \
      --methods scl,acl --grid loss.lam=0.1,0.3,0.5,0.7,0.9 --seeds 0,1,2 ...
  python scripts/plot_lambda.py runs/sweeps/rte_lam --metric dev/accuracy --out lam.png \
      --baseline runs/sweeps/rte/summary.json

One curve per method, mean +- std over seeds as error bars; --baseline draws the CE run of
another sweep (its `method=ce` entry) as a band. lambda does not weigh the same thing in both
methods: CE+SCL trains (1-lambda) CE + lambda SCL, so lambda 0.9 leaves CE a tenth of its
weight, while ACL trains CE + lambda ACL-Embed with CE always at full weight (SPEC §2). The
printed table gives each method's spread over lambda (best mean minus worst mean), the number
claim "ACL is robust to lambda, CE+SCL is not" is about.
"""
import argparse
import json
import os

# The objective each method's lambda enters (SPEC §2), for the legend.
FORMS = {"scl": "CE+SCL: (1-λ) CE + λ SCL", "acl": "ACL: CE + λ ACL-Embed, ACL-Grad gate",
         "acl_embed": "CE + λ ACL-Embed", "gloss": "CE+G-Loss: (1-λ) CE + λ G-Loss"}


def curves(summary: dict, metric: str) -> dict[str, list[tuple[float, float, float]]]:
  out: dict[str, list] = {}
  for name, entry in summary.items():
    settings = dict(kv.split("=", 1) for kv in name.split(","))
    if "loss.lam" not in settings or metric not in entry["metrics"]:
      continue
    m = entry["metrics"][metric]
    out.setdefault(settings.get("method", "run"), []).append(
        (float(settings["loss.lam"]), m["mean"], m["std"]))
  return {k: sorted(v) for k, v in out.items()}


def spread_table(cs: dict, metric: str, seeds: dict[str, int]) -> str:
  """Markdown: per method, the mean at every lambda and the spread (max - min) over lambda."""
  lams = sorted({lam for pts in cs.values() for lam, _, _ in pts})
  head = ["method"] + [f"λ={lam:g}" for lam in lams] + ["spread (max-min)", "worst λ", "seeds"]
  lines = [f"**{metric}** (%, mean over seeds)", "", "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  for method, pts in cs.items():
    by = {lam: mean for lam, mean, _ in pts}
    worst = min(by, key=by.get)
    row = [method] + [f"{100 * by[lam]:.2f}" if lam in by else "—" for lam in lams]
    row += [f"{100 * (max(by.values()) - by[worst]):.2f}", f"{worst:g}", str(seeds[method])]
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("root")
  p.add_argument("--metric", default="dev/accuracy")
  p.add_argument("--out", default="lambda.png")
  p.add_argument("--baseline", default="",
                 help="a summary.json whose method=ce entry is drawn as a band")
  a = p.parse_args(argv)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  summary = json.load(open(os.path.join(a.root, "summary.json")))
  cs = curves(summary, a.metric)
  if not cs:
    raise SystemExit(f"No loss.lam runs with {a.metric} in {a.root}/summary.json.")
  seeds = {}
  for name, entry in summary.items():
    s = dict(kv.split("=", 1) for kv in name.split(","))
    if a.metric in entry["metrics"]:
      n = entry["metrics"][a.metric]["n"]
      m = s.get("method", "run")
      seeds[m] = min(seeds.get(m, n), n)
  fig, ax = plt.subplots(figsize=(6.5, 4))
  if a.baseline:
    ce = json.load(open(a.baseline)).get("method=ce", {}).get("metrics", {}).get(a.metric)
    if ce is None:
      raise SystemExit(f"--baseline {a.baseline}: no method=ce entry with {a.metric}.")
    lo, hi = 100 * (ce["mean"] - ce["std"]), 100 * (ce["mean"] + ce["std"])
    ax.axhspan(lo, hi, color="gray", alpha=0.2)
    ax.axhline(100 * ce["mean"], color="gray", ls="--", label=f"CE (n={ce['n']}, ± std)")
  for method, pts in cs.items():
    lam, mean, std = zip(*pts)
    ax.errorbar(lam, [100 * m for m in mean], yerr=[100 * s for s in std], marker="o",
                capsize=3, label=f"{FORMS.get(method, method)} (n={seeds[method]})")
  ax.set_xlabel("lambda")
  ax.set_ylabel(f"{a.metric} (%)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(a.out, dpi=110)
  print(spread_table(cs, a.metric, seeds))
  print(f"wrote {a.out}")


if __name__ == "__main__":
  main()
