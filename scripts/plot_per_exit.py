r"""Per-exit accuracy curves of multi-exit runs (one curve per run) and a Markdown table.

  python scripts/plot_per_exit.py runs/results/multi_exit/sst2/method=* \
      --out runs/results/multi_exit/sst2/per_exit.png --split dev --metric accuracy

Reads each workdir's results.json (written by train.py / eval.py), whose split entry holds
`exit_{m}/{metric}` for every exit, and prints the table it plots.
"""
import argparse
import json
import os
import re


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


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("workdirs", nargs="+")
  p.add_argument("--labels", nargs="+")
  p.add_argument("--split", default="dev")
  p.add_argument("--metric", default="accuracy")
  p.add_argument("--out", default="per_exit.png")
  a = p.parse_args(argv)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  labels = a.labels or [os.path.basename(os.path.normpath(w)) for w in a.workdirs]
  rows = {}
  fig, ax = plt.subplots(figsize=(6, 4))
  for wd, lab in zip(a.workdirs, labels):
    curve = per_exit(json.load(open(os.path.join(wd, "results.json"))), a.split, a.metric)
    rows[lab] = curve
    ax.plot(list(curve), [100 * v for v in curve.values()], marker="o", label=lab)
  ax.set_xlabel("exit (layer)")
  ax.set_ylabel(f"{a.split} {a.metric} (%)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(a.out, dpi=110)
  exits = sorted({m for c in rows.values() for m in c})
  print("| run | " + " | ".join(f"exit {m}" for m in exits) + " |")
  print("|---|" + "---|" * len(exits))
  for lab, c in rows.items():
    print(f"| {lab} | " + " | ".join(f"{100 * c[m]:.2f}" if m in c else "" for m in exits) + " |")
  print(f"\nwrote {a.out}")


if __name__ == "__main__":
  main()
