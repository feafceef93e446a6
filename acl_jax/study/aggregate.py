"""An ad-hoc sweep's summary: every finished run under a root, grouped by its settings but
the seed, as mean ± std over seeds of every metric of every evaluated split, with the config
fields that differ between a group's seeds (`scripts/sweep.py --aggregate_only`).
Imports nothing heavy.
"""
import json
import os

import numpy as np

from acl_jax import provenance  # light: no jax
from acl_jax.study import records, runs as run_reader


def finished(root: str, results: str = "results.json") -> list[tuple[dict, dict]]:
  """(settings, results) of every finished run under root (`runs.RunFolder.finished`);
  `results` is results.json or results_latest.json."""
  out = []
  for name in sorted(os.listdir(root)):
    run = run_reader.read(os.path.join(root, name))
    res = {run_reader.RESULTS: run.results, run_reader.LATEST: run.latest}[results]
    if run.finished and res is not None:
      out.append((records.parse_name(name), res))
  return out


def flat_config(workdir: str) -> dict:
  """The run's config (config.json with its config_history.jsonl applied: e.g. the num_steps
  a resume extended it to) flattened to dotted keys, without the fields that differ run to run
  anyway."""
  out = dict(run_reader.read_config(workdir)[0] or {})
  for k in ("seed", "workdir"):
    out.pop(k, None)
  return out


def config_differences(configs: list[dict]) -> tuple[list[str], list[str]]:
  """(fields set to different values, fields some configs lack) over the configs.

  A field that some configs lack was usually added to the config after those runs; whether its
  absence meant the same as its value now is for the reader to check (the field's comment in
  configs/common.py says).
  """
  configs = [c for c in configs if c]
  keys = sorted({k for c in configs for k in c})
  differ = [k for k in keys if len({json.dumps(c[k]) for c in configs if k in c}) > 1]
  missing = [k for k in keys if k not in differ and any(k not in c for c in configs)]
  return differ, missing


def fmt_cell(values: np.ndarray, seeds: int = 0) -> str:
  """Mean ± std in percent; a single value has no spread to show. The count is shown when it
  is 1 or below the row's `seeds` (some runs lack the metric)."""
  n = len(values)
  cell = f"{100 * values.mean():.2f}" + (f" ± {100 * values.std(ddof=1):.2f}" if n > 1 else "")
  return cell + (f" (n={n})" if n < max(2, seeds) else "")


def aggregate(root: str, splits=None, results: str = "results.json",
              runs: list[tuple[dict, dict]] | None = None) -> tuple[str, dict]:
  """Mean +- std over seeds of every metric, grouped by the other settings.

  `results` names the per-run file: results.json (the checkpoint model selection kept), or
  e.g. results_latest.json (`eval.py --checkpoint latest`), summarised to summary_latest.*.

  The seeds of a group should differ in the seed alone. Fields of their config.json files set
  to different values ("config_differs") or missing from some of them ("config_missing": a run
  trained before the field was added) are listed under the table and in summary.json, so a
  reader can judge whether the group is sound. `runs` (from `finished`) saves reading them again.
  """
  groups: dict[str, dict] = {}
  for settings, res in finished(root, results) if runs is None else runs:
    key = records.run_name({k: v for k, v in settings.items() if k != "seed"})
    g = groups.setdefault(key, {"seeds": [], "values": {}, "configs": []})
    g["seeds"].append(settings.get("seed"))
    g["configs"].append(flat_config(os.path.join(root, records.run_name(settings))))
    for split, vals in res.items():
      if not isinstance(vals, dict) or split in ("train",) or (splits and split not in splits):
        continue
      for m, v in vals.items():
        if isinstance(v, (int, float)) and m != "num_examples":
          g["values"].setdefault(f"{split}/{m}", []).append(float(v))
    if "gate_on_fraction" in res.get("train", {}):
      g["values"].setdefault("train/gate_on_fraction", []).append(res["train"]["gate_on_fraction"])
  cols = sorted({c for g in groups.values() for c in g["values"]})
  summary = {}
  lines = ["| run | seeds | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
  notes = []
  for key, g in groups.items():
    row = {}
    cells = []
    for c in cols:
      v = np.asarray(g["values"].get(c, []), float)
      if len(v):
        row[c] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                  "n": int(len(v))}
        cells.append(fmt_cell(v, len(g["seeds"])))
      else:
        cells.append("")
    summary[key] = {"seeds": g["seeds"], "metrics": row}
    differ, missing = config_differences(g["configs"])
    if differ:
      summary[key]["config_differs"] = differ
    if missing:
      summary[key]["config_missing"] = missing
    if differ or missing:
      notes.append(f"- {key or '(all)'}: " + "; ".join(
          ([f"set differently: {', '.join(differ)}"] if differ else [])
          + ([f"missing from some runs' config.json: {', '.join(missing)}"] if missing else [])))
    lines.append(f"| {key or '(all)'} | {len(g['seeds'])} | " + " | ".join(cells) + " |")
  table = ("Values are mean ± std over seeds, in percent.\n\n" + "\n".join(lines) + "\n")
  if notes:
    table += "\nConfig fields that differ between the seeds of a row:\n" + "\n".join(notes) + "\n"
  stem = "summary" + os.path.splitext(results)[0].removeprefix("results")
  provenance.write_atomic(os.path.join(root, f"{stem}.md"), table)
  provenance.write_atomic(os.path.join(root, f"{stem}.json"), json.dumps(summary, indent=2))
  return table, summary


def check_splits(root: str, runs: list[tuple[dict, dict]], splits: list[str]) -> None:
  """Fails, naming what exists, when root has no finished run (`runs`, from `_read`) or
  they lack a requested split."""
  if not runs:
    raise SystemExit(f"No finished run under {root} (one is finished once train.py has "
                     "written its results.json): nothing to aggregate.")
  have = sorted({k for _, res in runs for k, v in res.items()
                 if isinstance(v, dict) and k != "train"})
  unknown = [x for x in splits if x not in have]
  if unknown:
    raise SystemExit(f"--splits: no run under {root} has {unknown}; the runs have {have}.")
