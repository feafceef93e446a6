r"""Early-exit sweeps over seeds: per strategy and threshold, mean ± std of the metric change
and of the layer speed-up, from every run's `early_exit_<policy>_<split>.json` under a root.

  python eval.py --workdir <root>/method=kd,seed=1 ... --exit_policy entropy \
      --thresholds 0.05,0.1,0.2 --exit_repeats 0        # untimed is enough here
  python scripts/early_exit_seeds.py runs/results/multi_exit_mean/sst2 --out table.md \
      --plot quality_speed_seeds.png

The change is in points against the same run's full model (final exit). The second table
picks, per strategy, the threshold with the largest mean layer speed-up whose mean change
stays above --max_drop points, and says whether every seed stayed above it too. Wall-clock
speed-ups are not averaged: they are timed on one seed (BENCHMARKS.md). --plot draws the same
means as quality-speed curves, one per strategy over its thresholds, with ± 1 std bars on both
axes.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  pylint: disable=wrong-import-position
from plot_per_exit import ORDER  # noqa: E402  pylint: disable=wrong-import-position


def collect(root: str, name: str) -> dict[str, dict[float, list[dict]]]:
  """{group: {threshold: [one row per seed]}} from `root/method=*,...,seed=*/name`.

  A group is a run's settings without the seed: the method alone, or the method followed by
  its other grid settings (`acl_cl,loss.lam=0.5`), so only seeds are pooled.
  """
  out: dict[str, dict[float, list[dict]]] = {}
  for run in sorted(os.listdir(root)):
    path = os.path.join(root, run, name)
    if not run.startswith("method=") or not os.path.isfile(path):
      continue
    settings = sweep.parse_name(run)
    rest = sweep.run_name({k: v for k, v in settings.items() if k not in ("method", "seed")})
    group = settings["method"] + ("," + rest if rest else "")
    for r in json.load(open(path))["rows"]:
      out.setdefault(group, {}).setdefault(float(r["threshold"]), []).append(r)
  if not out:
    raise SystemExit(f"No {name} under {root}/method=*: run eval.py --exit_policy first.")

  def order(kv):
    method = kv[0].split(",")[0]
    return (ORDER.index(method) if method in ORDER else len(ORDER), kv[0])
  return dict(sorted(out.items(), key=order))


def _sd(values) -> float:
  return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _change_and_speed(rows: list[dict]) -> tuple[list[float], list[float]]:
  """Per seed: the metric change against the full model (points) and the layer speed-up."""
  return ([100 * (r["metric"] - r["full_metric"]) for r in rows],
          [r["layer_speedup"] for r in rows])


def tables(data: dict, max_drop: float) -> str:
  ms = sweep.mean_std
  lines = ["| strategy | threshold | full-model metric | change (points) | layer speed-up | seeds |",
           "|---|---|---|---|---|---|"]
  best = ["", f"Largest mean layer speed-up with a mean change above -{max_drop:g} points:", "",
          "| strategy | threshold | change (points) | layer speed-up | every seed above? | seeds |",
          "|---|---|---|---|---|---|"]
  for method, by_t in data.items():
    pick = None
    for t, rows in sorted(by_t.items()):
      drop, speed = _change_and_speed(rows)
      lines.append(f"| {method} | {t:g} | {ms([100 * r['full_metric'] for r in rows])} | "
                   f"{ms(drop)} | {ms(speed)}x | {len(rows)} |")
      if np.mean(drop) > -max_drop and (pick is None or np.mean(speed) > pick[2]):
        pick = (t, drop, float(np.mean(speed)), speed)
    if pick is None:
      best.append(f"| {method} | — | — | — | — | — |")
    else:
      t, drop, _, speed = pick
      every = "yes" if min(drop) > -max_drop else f"no (worst {min(drop):.2f})"
      best.append(f"| {method} | {t:g} | {ms(drop)} | {ms(speed)}x | {every} | {len(drop)} |")
  return "\n".join(lines + best) + "\n"


def plot(data: dict, out: str, max_drop: float) -> None:
  """Mean change against mean layer speed-up per strategy, with seed-std bars on both axes."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6, 4))
  seeds = set()
  for method, by_t in data.items():
    ts = sorted(by_t)
    drop, speed = zip(*(_change_and_speed(by_t[t]) for t in ts))
    seeds.update(len(d) for d in drop)
    ax.errorbar([np.mean(v) for v in speed], [np.mean(v) for v in drop],
                xerr=[_sd(v) for v in speed], yerr=[_sd(v) for v in drop], marker="o", ms=3,
                capsize=2, label=method)
  ax.axhline(-max_drop, color="grey", ls="--", lw=0.8, label=f"-{max_drop:g} points")
  ax.set_xlabel("layer speed-up (x, mean over seeds)")
  ax.set_ylabel("change vs full model (points)")
  n = "/".join(str(k) for k in sorted(seeds))
  ax.set_title(f"Early exit over seeds (n={n} per point)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=110)
  plt.close(fig)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("root")
  p.add_argument("--policy", default="entropy")
  p.add_argument("--split", default="dev")
  p.add_argument("--max_drop", type=float, default=1.0, help="points")
  p.add_argument("--out", default="")
  p.add_argument("--plot", default="", help="PNG of the quality-speed means over seeds")
  a = p.parse_args(argv)
  data = collect(a.root, f"early_exit_{a.policy}_{a.split}.json")
  text = tables(data, a.max_drop)
  print(text)
  if a.out:
    with open(a.out, "w") as f:
      f.write(text)
  if a.plot:
    plot(data, a.plot, a.max_drop)


if __name__ == "__main__":
  main()
