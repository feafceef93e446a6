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
claim "ACL is robust to lambda, CE+SCL is not" is about, beside the seed noise of one point
(the std over seeds, pooled over the lambda points): a spread of a few seed stds is noise.
The spread of the means hides how each seed moves, so the table also gives the spread seed by
seed (each seed's best minus worst lambda, mean ± std over seeds), and --vs METHOD pairs it:
every other curve's per-seed spread minus METHOD's on the same seed, and on how many seeds
the curve moved more (the claim, tested seed by seed). --table writes the tables to a file too.

--axis swaps lambda for another swept field, for the same curves and spreads over it (the
G-Loss ablations: --axis loss.gamma_keep, or loss.sigma with --logx).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  pylint: disable=wrong-import-position

# The objective each method's lambda enters (SPEC §2), for the legend.
FORMS = {"scl": "CE+SCL: (1-λ) CE + λ SCL", "acl": "ACL: CE + λ ACL-Embed, ACL-Grad gate",
         "acl_embed": "CE + λ ACL-Embed", "gloss": "CE+G-Loss: (1-λ) CE + λ G-Loss"}


LAM = "loss.lam"


def symbol(axis: str) -> str:
  """The axis in table heads: λ for loss.lam, else the field's own name (gamma_keep)."""
  return "λ" if axis == LAM else axis.rsplit(".", 1)[-1]


def curve_name(settings: dict, axis: str = LAM) -> str:
  """A curve per method and setting other than the axis: "scl", "scl [loss.combine=additive]"."""
  rest = {k: v for k, v in settings.items() if k not in ("method", axis, "seed")}
  name = settings.get("method", "run")
  return name + (" [" + ", ".join(f"{k}={v}" for k, v in rest.items()) + "]" if rest else "")


def form(curve: str) -> str:
  """The legend: the objective lambda enters, as the curve's settings make it."""
  method, _, rest = curve.partition(" [")
  if "loss.combine=additive" in rest and method in ("scl", "gloss"):
    return f"{FORMS[method].split(':')[0]}, additive: CE + λ {method.upper()}"
  return FORMS.get(method, method) + (f" [{rest}" if rest else "")


def curves(summary: dict, metric: str, axis: str = LAM
           ) -> dict[str, list[tuple[float, float, float]]]:
  """{curve: [(axis value, mean, std)]} from a sweep summary, sorted by the axis."""
  out: dict[str, list] = {}
  for name, entry in summary.items():
    settings = sweep.parse_name(name)
    if axis not in settings or metric not in entry["metrics"]:
      continue
    m = entry["metrics"][metric]
    out.setdefault(curve_name(settings, axis), []).append(
        (float(settings[axis]), m["mean"], m["std"]))
  return {k: sorted(v) for k, v in out.items()}


def seed_spreads(root: str, metric: str, results: str = "results.json", axis: str = LAM
                 ) -> dict[str, dict[str, float]]:
  """Each curve's spread over the axis seed by seed: {curve: {seed: max - min}}.

  Only seeds with every axis point the curve has on any seed count (a seed still training
  would show a smaller spread)."""
  split, _, name = metric.partition("/")
  vals: dict[str, dict[str, dict[float, float]]] = {}
  for settings, res in sweep._read(root, results):  # pylint: disable=protected-access
    v = res.get(split, {}).get(name)
    if axis not in settings or "seed" not in settings or not isinstance(v, (int, float)):
      continue
    vals.setdefault(curve_name(settings, axis), {}).setdefault(settings["seed"], {})[
        float(settings[axis])] = float(v)
  out = {}
  for curve, by_seed in vals.items():
    lams = set().union(*by_seed.values())
    out[curve] = {seed: max(p.values()) - min(p.values())
                  for seed, p in sorted(by_seed.items()) if set(p) == lams}
  return out


def paired_spreads(per_seed: dict[str, dict[str, float]], vs: str, axis: str = LAM) -> str:
  """Markdown: every curve's per-seed spread minus the `vs` curve's on the same seed."""
  if vs not in per_seed:
    raise SystemExit(f"--vs {vs}: no such curve with every {axis} point on a seed; curves: "
                     f"{', '.join(sorted(per_seed)) or 'none'}.")
  lines = [f"**Spread over {symbol(axis)}, paired by seed: each curve's minus {vs}'s** "
           f"(points; mean ± std over seeds; on how many seeds the curve moved more than {vs})",
           "",
           f"| curve | spread − {vs}'s spread | moved more on |", "|---|---|---|"]
  for curve, spreads in per_seed.items():
    seeds = [s for s in spreads if s in per_seed[vs]]
    if curve == vs or not seeds:
      continue
    diffs = [100 * (spreads[s] - per_seed[vs][s]) for s in seeds]
    lines.append(f"| {curve} | {sweep.mean_std(diffs, signed=True)} | "
                 f"{sum(d > 0 for d in diffs)}/{len(diffs)} |")
  return "\n".join(lines) + "\n"


def spread_table(cs: dict, metric: str, seeds: dict[str, int],
                 per_seed: dict[str, dict[str, float]] | None = None, axis: str = LAM) -> str:
  """Markdown: per method, the mean at every axis point and the spread (max - min) over the
  axis, and (from `seed_spreads`) the spread seed by seed."""
  per_seed = per_seed or {}
  sym = symbol(axis)
  lams = sorted({lam for pts in cs.values() for lam, _, _ in pts})
  head = (["method"] + [f"{sym}={lam:g}" for lam in lams]
          + ["spread (max-min)", f"worst {sym}", "seed std (pooled)", "spread / seed std",
             "spread per seed", "seeds"])
  lines = [f"**{metric}** (%, mean over seeds)", "", "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  for method, pts in cs.items():
    by = {lam: mean for lam, mean, _ in pts}
    worst = min(by, key=by.get)
    spread = max(by.values()) - by[worst]
    row = [method] + [f"{100 * by[lam]:.2f}" if lam in by else "—" for lam in lams]
    row += [f"{100 * spread:.2f}", f"{worst:g}"]
    if seeds[method] > 1:  # the seed noise one lambda point carries, pooled over the points
      pooled = (sum(std ** 2 for _, _, std in pts) / len(pts)) ** 0.5
      row += [f"{100 * pooled:.2f}", f"{spread / pooled:.1f}" if pooled > 0 else "—"]
    else:
      row += ["—", "—"]
    own = per_seed.get(method, {})
    row.append(f"{sweep.mean_std([100 * v for v in own.values()])} (n={len(own)})" if own
               else "—")
    row.append(str(seeds[method]))
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("root")
  p.add_argument("--metric", default="dev/accuracy")
  p.add_argument("--out", default="lambda.png")
  p.add_argument("--table", default="", help="also write the spread table here (Markdown)")
  p.add_argument("--summary", default="summary.json",
                 help="the sweep summary under root (summary_latest.json: final weights)")
  p.add_argument("--baseline", default="",
                 help="a summary.json whose method=ce entry is drawn as a band")
  p.add_argument("--axis", default=LAM, help="the swept field on the x axis")
  p.add_argument("--logx", action="store_true", help="a log-scale x axis (e.g. loss.sigma)")
  p.add_argument("--vs", default="",
                 help="a curve (e.g. acl) every other curve's per-seed spread is paired with")
  a = p.parse_args(argv)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  summary = json.load(open(os.path.join(a.root, a.summary)))
  cs = curves(summary, a.metric, a.axis)
  if not cs:
    raise SystemExit(f"No {a.axis} runs with {a.metric} in {a.root}/{a.summary}.")
  seeds = {}
  for name, entry in summary.items():
    s = sweep.parse_name(name)
    if a.axis in s and a.metric in entry["metrics"]:
      n = entry["metrics"][a.metric]["n"]
      m = curve_name(s, a.axis)
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
                capsize=3, label=f"{form(method)} (n={seeds[method]})")
  ax.set_xlabel("lambda" if a.axis == LAM else a.axis)
  if a.logx:
    ax.set_xscale("log")
  ax.set_ylabel(f"{a.metric} (%)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  for path in (a.out, a.table):  # the caller's output folders need not exist yet
    if path:
      os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(a.out, dpi=110)
  # The runs' own files behind the summary: summary_latest.json <- results_latest.json.
  per_seed = seed_spreads(a.root, a.metric, "results" + a.summary.removeprefix("summary"),
                          a.axis)
  table = spread_table(cs, a.metric, seeds, per_seed, a.axis)
  if a.vs:
    table += "\n" + paired_spreads(per_seed, a.vs, a.axis)
  print(table)
  if a.table:
    with open(a.table, "w") as f:
      f.write(table)
  print(f"wrote {a.out}")


if __name__ == "__main__":
  main()
