r"""Per-exit accuracy curves of multi-exit runs (one curve per run) and a Markdown table.

  python scripts/plot_per_exit.py runs/results/multi_exit/sst2/method=* \
      --out runs/results/multi_exit/sst2/per_exit.png --split dev --metric accuracy
  python scripts/plot_per_exit.py --root runs/results/multi_exit_mean/sst2 \
      --out results/multi_exit_mean/sst2/per_exit.png

Reads each workdir's results.json (written by train.py / eval.py), whose split entry holds
`exit_{m}/{metric}` for every exit, and prints the table it plots. With --root it reads a
sweep's summary.json instead: one curve per setting (method), mean +- std over its seeds as
error bars, and a table of mean ± std with the seed count. --baseline jt adds a table of paired gains: per
exit, each run's metric minus the baseline run's of the same seed (the same data order), mean ±
std over the seeds both have, in points. A method that "lifts the shallow exits most" has its
largest gains at the first exits.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  pylint: disable=wrong-import-position


def per_exit(results: dict, split: str, metric: str) -> dict[int, float]:
  pat = re.compile(rf"exit_(\d+)/{re.escape(metric)}$")
  out = {}
  for k, v in results[split].items():
    m = pat.match(k)
    if m:
      out[int(m.group(1))] = float(v)
  if not out:
    raise SystemExit(f"No exit_<m>/{metric} in the {split!r} results: not a multi-exit run?")
  return dict(sorted(out.items()))


def per_exit_summary(summary: dict, split: str, metric: str) -> dict[str, dict[int, dict]]:
  """{setting: {exit: {"mean", "std", "n"}}} from a sweep summary.json, settings with exits."""
  pat = re.compile(rf"{re.escape(split)}/exit_(\d+)/{re.escape(metric)}$")
  out = {}
  for key, entry in summary.items():
    curve = {int(m.group(1)): v for k, v in entry["metrics"].items() if (m := pat.match(k))}
    if curve:
      out[key] = dict(sorted(curve.items()))
  out = {k: out[k] for k in sorted(out, key=_order)}
  if not out:
    raise SystemExit(f"No {split}/exit_<m>/{metric} in the summary: not a multi-exit sweep?")
  return out


def paired_gains(root: str, baseline: str, split: str,
                 metric: str) -> dict[str, dict[int, list[float]]]:
  """{setting: {exit: [per-seed gain in points over the baseline method's same-seed run]}}."""
  def curve(res):
    return {m: 100 * v for m, v in per_exit(res, split, metric).items()} if split in res else {}
  out = sweep.paired(root, baseline, curve)
  if not out:
    raise SystemExit(f"No run under {root} has a method={baseline} run of the same seed.")
  return {k: out[k] for k in sorted(out, key=_order)}


def gains_table(gains: dict[str, dict[int, list[float]]], baseline: str) -> str:
  exits = sorted({m for g in gains.values() for m in g})
  lines = [f"Paired gain over {baseline} (points; per seed, then mean ± std over seeds)", "",
           "| run | seeds | " + " | ".join(f"exit {m}" for m in exits) + " |",
           "|---|---|" + "---|" * len(exits)]
  for key, g in gains.items():
    cells = []
    for m in exits:
      v = g.get(m, [])
      cells.append("" if not v else f"{np.mean(v):+.2f}"
                   + (f" ± {np.std(v, ddof=1):.2f}" if len(v) > 1 else ""))
    n = min(len(v) for v in g.values())
    lines.append(f"| {_label(key)} | {n} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


# Multi-exit strategies in SPEC §3's order; other settings follow, sorted.
ORDER = ("jt", "2st", "alt", "kd", "acl_cl")


def _order(key: str):
  name = dict(kv.split("=", 1) for kv in key.split(",") if kv).get("method", "")
  return (ORDER.index(name) if name in ORDER else len(ORDER), key)


def _label(key: str) -> str:
  s = dict(kv.split("=", 1) for kv in key.split(",") if kv)
  return s.pop("method", "") + ("" if not s else " [" + ", ".join(f"{k}={v}" for k, v in
                                                                s.items()) + "]")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("workdirs", nargs="*")
  p.add_argument("--root", default="", help="a sweep root: mean +- std over seeds")
  p.add_argument("--labels", nargs="+")
  p.add_argument("--split", default="dev")
  p.add_argument("--metric", default="accuracy")
  p.add_argument("--out", default="per_exit.png")
  p.add_argument("--baseline", default="",
                 help="with --root: also print each method's paired per-exit gain over this "
                 "method (e.g. jt)")
  a = p.parse_args(argv)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  if bool(a.root) == bool(a.workdirs):
    raise SystemExit("Give either workdirs or --root, not both.")
  if a.baseline and not a.root:
    raise SystemExit("--baseline needs --root (a sweep root with seeds to pair).")
  fig, ax = plt.subplots(figsize=(6, 4))
  if a.root:
    curves = per_exit_summary(json.load(open(os.path.join(a.root, "summary.json"))), a.split,
                              a.metric)
    labels = a.labels or [_label(k) for k in curves]
    exits = sorted({m for c in curves.values() for m in c})
    print(f"{a.split} {a.metric} (%), mean ± std over seeds\n")
    print("| run | seeds | " + " | ".join(f"exit {m}" for m in exits) + " | mean |")
    print("|---|---|" + "---|" * (len(exits) + 1))
    for (key, c), lab in zip(curves.items(), labels):
      xs = list(c)
      ax.errorbar(xs, [100 * c[m]["mean"] for m in xs], yerr=[100 * c[m]["std"] for m in xs],
                  marker="o", capsize=3, label=lab)
      cells = [("" if m not in c else f"{100 * c[m]['mean']:.2f}"
                + (f" ± {100 * c[m]['std']:.2f}" if c[m]["n"] > 1 else "")) for m in exits]
      avg = sum(c[m]["mean"] for m in xs) / len(xs)
      print(f"| {lab} | {min(c[m]['n'] for m in xs)} | " + " | ".join(cells)
            + f" | {100 * avg:.2f} |")
    if a.baseline:
      print("\n" + gains_table(paired_gains(a.root, a.baseline, a.split, a.metric), a.baseline))
    _finish(fig, ax, a)
    return
  labels = a.labels or [os.path.basename(os.path.normpath(w)) for w in a.workdirs]
  rows = {}
  for wd, lab in zip(a.workdirs, labels):
    curve = per_exit(json.load(open(os.path.join(wd, "results.json"))), a.split, a.metric)
    rows[lab] = curve
    ax.plot(list(curve), [100 * v for v in curve.values()], marker="o", label=lab)
  exits = sorted({m for c in rows.values() for m in c})
  print("| run | " + " | ".join(f"exit {m}" for m in exits) + " |")
  print("|---|" + "---|" * len(exits))
  for lab, c in rows.items():
    print(f"| {lab} | " + " | ".join(f"{100 * c[m]:.2f}" if m in c else "" for m in exits) + " |")
  _finish(fig, ax, a)


def _finish(fig, ax, a) -> None:
  ax.set_xlabel("exit (layer)")
  ax.set_ylabel(f"{a.split} {a.metric} (%)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
  fig.savefig(a.out, dpi=110)
  print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
  main()
