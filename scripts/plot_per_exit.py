r"""Per-exit accuracy curves of multi-exit runs (one curve per run) and a Markdown table.

  python scripts/plot_per_exit.py runs/results/multi_exit/sst2/method=* \
      --out runs/results/multi_exit/sst2/per_exit.png --split dev --metric accuracy
  python scripts/plot_per_exit.py --root runs/results/multi_exit_mean/sst2 \
      --out results/multi_exit_mean/sst2/per_exit.png

Reads each workdir's results.json (written by train.py / eval.py), whose split entry holds
`exit_{m}/{metric}` for every exit, and prints the table it plots. With --root it reads a
sweep's summary.json instead: one curve per setting (method), mean +- std over its seeds as
error bars, and a table of mean ± std with the seed count. --vs jt adds a table of paired
gains: per exit, each run's metric minus that of the JT run with the same seed (the same data
order), mean ± std over the seeds and how many seeds were ahead, in points. A method that
"lifts the shallow exits most" has its largest gains at the first exits.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep  # noqa: E402  pylint: disable=wrong-import-position


def exit_values(results: dict, split: str, metric: str) -> dict[int, float]:
  """{exit: value} of one run's results.json split; empty for a run without exits there."""
  pat = re.compile(rf"exit_(\d+)/{re.escape(metric)}$")
  return dict(sorted((int(m.group(1)), float(v)) for k, v in results.get(split, {}).items()
                     if (m := pat.match(k))))


def per_exit(results: dict, split: str, metric: str) -> dict[int, float]:
  out = exit_values(results, split, metric)
  if not out:
    raise SystemExit(f"No exit_<m>/{metric} in the {split!r} results: not a multi-exit run?")
  return out


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
  """{setting: {exit: [per-seed gain in points over the baseline method's same-seed run]}};
  empty when no run has such a partner. Runs without exits on the split are left out."""
  out = sweep.paired(root, baseline,
                     lambda res: {m: 100 * v for m, v in exit_values(res, split, metric).items()})
  return {k: out[k] for k in sorted(out, key=_order)}


def gains_table(gains: dict[str, dict[int, list[float]]], baseline: str, split: str,
                metric: str, labels: dict[str, str] | None = None) -> str:
  """Mean ± std over seeds of each exit's paired gain, and the seeds ahead of the baseline."""
  title = (f"Paired gain over {baseline}, {split} {metric} (points; mean ± std over seeds of "
           "the per-seed differences, seeds ahead / seeds)")
  if not gains:
    return f"{title}: no run has a same-seed {baseline} run to pair with.\n"
  exits = sorted({m for g in gains.values() for m in g})
  lines = [title, "", "| run | " + " | ".join(f"exit {m}" for m in exits) + " |",
           "|---|" + "---|" * len(exits)]
  for key, g in gains.items():
    cells = [f"{sweep.mean_std(g[m], signed=True)} ({sum(x > 0 for x in g[m])}/{len(g[m])})"
             if m in g else "" for m in exits]
    lines.append(f"| {(labels or {}).get(key, _label(key))} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def task_and_model(workdirs) -> str:
  """"task, model" of the runs' config.json files ("/" between values that differ)."""
  seen = {"task": [], "model": []}
  for wd in workdirs:
    cfg = sweep.provenance.run_config(wd) if os.path.isdir(wd) else None
    if cfg:
      seen["task"].append(cfg.get("task", {}).get("name", ""))
      seen["model"].append(os.path.basename(os.path.normpath(cfg.get("model", {}).get("name",
                                                                                     ""))))
  return ", ".join("/".join(dict.fromkeys(v for v in vals if v)) for vals in seen.values()
                   if any(vals))


# Multi-exit strategies in SPEC §3's order; other settings follow, sorted.
ORDER = ("jt", "2st", "alt", "kd", "acl_cl")


def _order(key: str):
  name = sweep.parse_name(key).get("method", "")
  return (ORDER.index(name) if name in ORDER else len(ORDER), key)


def _label(key: str) -> str:
  s = sweep.parse_name(key)
  return s.pop("method", "") + ("" if not s else " [" + ", ".join(f"{k}={v}" for k, v in
                                                                s.items()) + "]")


def main(argv=None):
  """Prints the table(s), writes the plot; returns its title."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("workdirs", nargs="*")
  p.add_argument("--root", default="", help="a sweep root: mean +- std over seeds")
  p.add_argument("--labels", nargs="+",
                 help="curve names: one per workdir, in order; with --root, NAME:LABEL pairs "
                 "renaming the rows the table would print as NAME (e.g. acl_cl:ACL-CL)")
  p.add_argument("--split", default="dev")
  p.add_argument("--metric", default="accuracy")
  p.add_argument("--out", default="per_exit.png")
  p.add_argument("--vs", default="",
                 help="with --root: also print each method's per-exit gain over this method "
                 "(e.g. jt), paired by seed")
  a = p.parse_args(argv)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  if bool(a.root) == bool(a.workdirs):
    raise SystemExit("Give either workdirs or --root, not both.")
  if a.vs and not a.root:
    raise SystemExit("--vs needs --root (a sweep root with seeds to pair).")
  fig, ax = plt.subplots(figsize=(6, 4))
  if a.root:
    curves = per_exit_summary(json.load(open(os.path.join(a.root, "summary.json"))), a.split,
                              a.metric)
    default = {k: _label(k) for k in curves}
    rename = dict(x.partition(":")[::2] for x in a.labels or [])
    unknown = sorted(set(rename) - set(default.values()))
    if unknown or any(not v for v in rename.values()):
      raise SystemExit(f"--labels with --root takes NAME:LABEL pairs, NAME one of "
                       f"{sorted(default.values())}; got {a.labels}.")
    labels = [rename.get(default[k], default[k]) for k in curves]
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
    title = _finish(fig, ax, a, [os.path.join(a.root, d) for d in sorted(os.listdir(a.root))])
    if a.vs:
      print("\n" + gains_table(paired_gains(a.root, a.vs, a.split, a.metric), a.vs, a.split,
                              a.metric, dict(zip(curves, labels))))
    return title
  labels = a.labels or [os.path.basename(os.path.normpath(w)) for w in a.workdirs]
  if len(labels) != len(a.workdirs) or len(set(labels)) != len(labels):
    raise SystemExit(f"--labels needs one distinct label per workdir: got {len(labels)} "
                     f"label(s) {labels} for {len(a.workdirs)} workdir(s)"
                     + ("" if a.labels else "; their folder names repeat, so pass --labels")
                     + ".")
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
  return _finish(fig, ax, a, a.workdirs)


def _finish(fig, ax, a, workdirs) -> str:
  """Axis labels, the title (split, metric, and the runs' task and model), legend, save;
  returns the title."""
  ax.set_xlabel("exit (layer)")
  ax.set_ylabel(f"{a.split} {a.metric} (%)")
  where = task_and_model(workdirs)
  ax.set_title(f"Per-exit {a.split} {a.metric}" + (f": {where}" if where else ""), fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend(title="run")
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
  fig.savefig(a.out, dpi=110)
  print(f"wrote {a.out}", file=sys.stderr)
  return ax.get_title()


if __name__ == "__main__":
  main()
