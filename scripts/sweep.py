r"""Resumable grid sweeps over config fields, methods and seeds, with a mean +- std table.

  python scripts/sweep.py --root runs/sweeps/sst2 --config configs/glue.py:sst2 \
      --methods ce,scl,acl_embed,acl --seeds 0,1,2 \
      --set task.data_dir=../shared/data/glue --set task.max_train_examples=2000 \
      --grid loss.lam=0.1,0.5,0.9

Every run gets its own workdir under --root, named from its settings
(`method=acl,loss.lam=0.5,seed=1`), and is one `train.py` process, so re-running the same
command skips finished runs (train.py's results.json present) and resumes half-finished ones
from their checkpoints. Each run records the --config and --set it was started with
(`sweep_args.json`): a rerun that asks for others fails on that run instead of mixing them.
The summary (`summary.md`, `summary.json`) gives mean +- std over seeds and the seed count for
every metric of every evaluated split. Extra train.py flags (e.g. `--distributed` on a
multi-host job) go after `--`; `--config...` and `--workdir` may not, as the sweep sets them.

On a multi-host job (TPU pod, GPU cluster) every host runs the same sweep command with
`-- --distributed` and a --root that all hosts share (as Orbax's multi-host checkpoints need
anyway). Process 0 writes results.json; every host reads the same files, so all hosts skip and
resume the same runs and enter each train.py together. Each host logs to its own file in the
workdir (`train.p<I>.log` with `--process_id=I`, else `train.<hostname>.log`).

The runs share JAX's persistent compilation cache (`--compile_cache`, default
`<root>/.jax_cache`; an already set `JAX_COMPILATION_CACHE_DIR` wins): runs that differ only
in seed or loss weights compile the same step, so every run after the first loads it from disk
instead of compiling it again (about 8 s per batch shape for MiniLM on 2 CPU cores). Cached
executables are the same programs, so results do not change.

With `--archive DIR` every finished run's records (config, results, metrics: no checkpoints)
are also copied to DIR/<run name>, a folder that can be committed. On a fresh machine
`scripts/archive_runs.py --restore` puts them back, and the sweep then counts those runs as
done instead of training them again.

  python scripts/sweep.py --root runs/sweeps/sst2 --aggregate_only
"""
import argparse
import itertools
import json
import os
import socket
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from acl_jax import provenance  # noqa: E402  (light: no jax)  pylint: disable=wrong-import-position


def run_name(settings: dict) -> str:
  return ",".join(f"{k}={v}" for k, v in settings.items())


def parse_name(name: str) -> dict:
  """The settings a run or group name spells (`method=acl,loss.lam=0.5,seed=1`), in order."""
  return dict(kv.split("=", 1) for kv in name.split(",") if kv)


def mean_std(values, signed: bool = False) -> str:
  """`mean ± std` (sample std) of values already in display units; one value has no spread."""
  mean = f"{np.mean(values):+.2f}" if signed else f"{np.mean(values):.2f}"
  return mean + (f" ± {np.std(values, ddof=1):.2f}" if len(values) > 1 else "")


def plan(args) -> list[dict]:
  """Every run of the sweep as an ordered dict of settings (method, grid fields, seed)."""
  for kv in args.set or []:
    if kv.partition("=")[0] in ("seed", "workdir"):
      raise SystemExit(f"--set {kv!r}: the sweep sets the seed (--seeds) and the workdir "
                       "(from --root and the run's settings) itself.")
  axes = []
  if args.methods:
    axes.append([("method", m) for m in args.methods.split(",")])
  for g in args.grid or []:
    key, _, values = g.partition("=")
    if not values:
      raise SystemExit(f"--grid {g!r}: expected key=v1,v2,...")
    if key in ("seed", "method", "workdir"):
      raise SystemExit(f"--grid {g!r}: use --seeds / --methods, not a grid over {key}.")
    bad = [v for v in values.split(",") if "/" in v or "=" in v or not v]
    if bad:
      raise SystemExit(f"--grid {g!r}: value {bad[0]!r} cannot be part of a workdir name "
                       "(no '/', '=' or empty values); pass it with --set in a sweep of its "
                       "own --root instead.")
    axes.append([(key, v) for v in values.split(",")])
  axes.append([("seed", s) for s in args.seeds.split(",")])
  return [dict(combo) for combo in itertools.product(*axes)]


def config_arg(args, settings: dict) -> str:
  config = args.config
  if "method" in settings:
    config += ("," if ":" in config else ":") + settings["method"]
  return config


# Each run's record of what the sweep asked of it beyond its name (config and --set flags),
# so a rerun with other flags cannot skip or resume it under settings it was not started with.
RUN_ARGS = "sweep_args.json"


def run_args(args, settings: dict) -> dict:
  return {"config": config_arg(args, settings), "set": sorted(args.set or [])}


def changed_args(workdir: str, want: dict) -> str | None:
  """How the run's recorded sweep arguments differ from `want`; None if equal or unrecorded
  (runs started before the record existed)."""
  path = os.path.join(workdir, RUN_ARGS)
  if not os.path.isfile(path):
    return None
  have = json.load(open(path))
  if have == want:
    return None
  parts = []
  if have.get("config") != want["config"]:
    parts.append(f"--config {have.get('config')} (now {want['config']})")
  gone = sorted(set(have.get("set", [])) - set(want["set"]))
  new = sorted(set(want["set"]) - set(have.get("set", [])))
  if gone or new:
    parts.append(f"--set {' '.join(gone) or '(none)'} (now {' '.join(new) or '(none)'})")
  return "; ".join(parts)


def _load(path: str) -> dict | None:
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def train_command(args, settings: dict, workdir: str) -> list[str]:
  config = config_arg(args, settings)
  cmd = [sys.executable, os.path.join(REPO, "train.py"), "--config", config, "--workdir",
         workdir, f"--config.seed={settings['seed']}", "--config.progress=False"]
  cmd += [f"--config.{kv}" for kv in args.set or []]
  cmd += [f"--config.{k}={v}" for k, v in settings.items() if k not in ("method", "seed")]
  return cmd + args.extra


def child_env(args) -> dict:
  """The environment of each train.py run: ours plus the shared compilation cache."""
  env = dict(os.environ)
  cache = getattr(args, "compile_cache", None)
  if cache is None:
    cache = os.path.join(args.root, ".jax_cache")
  if cache and cache != "none":
    env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.abspath(cache))
  return env


def run_all(args) -> None:
  runs = plan(args)
  env = child_env(args)
  os.makedirs(args.root, exist_ok=True)
  for i, settings in enumerate(runs):
    wd = os.path.join(args.root, run_name(settings))
    arch = os.path.join(args.archive, run_name(settings)) if args.archive else None
    want = run_args(args, settings)
    problem = None
    if os.path.islink(wd) and not os.path.exists(wd):
      problem = (f"{wd} is a link to a missing run ({os.readlink(wd)}); remove the link to "
                 "train this run here.")
    elif arch and not os.path.lexists(wd) and (os.path.islink(arch)
                                               or provenance.run_finished(arch)):
      problem = (f"{wd} is missing but finished in the archive ({arch}): restore it with "
                 f"scripts/archive_runs.py --restore, or remove it from the archive to train "
                 "it again.")
    elif changed := changed_args(wd, want):
      problem = (f"{wd} was started with {changed}: its results would not be this sweep's. "
                 "Use another --root, or move the run away to train it again.")
    if problem:
      print(f"[{i + 1}/{len(runs)}] FAILED: {problem}", flush=True)
      if not args.keep_going:
        raise SystemExit(1)
      continue
    if provenance.run_finished(wd):
      print(f"[{i + 1}/{len(runs)}] done: {wd}", flush=True)
      archive(args, wd, arch)
      continue
    cmd = train_command(args, settings, wd)
    print(f"[{i + 1}/{len(runs)}] run: {' '.join(cmd)}", flush=True)
    if args.dry_run:
      continue
    os.makedirs(wd, exist_ok=True)
    provenance.write_atomic(os.path.join(wd, RUN_ARGS), json.dumps(want, indent=2))
    log_path = os.path.join(wd, log_name(args.extra))
    with open(log_path, "a") as log:
      rc = subprocess.call(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
      print(f"  FAILED (exit {rc}); see {log_path}", flush=True)
      if not args.keep_going:
        raise SystemExit(rc)
    elif provenance.run_finished(wd):
      archive(args, wd, arch)


def archive(args, wd: str, arch: str | None) -> None:
  """Copies a finished run's records to its --archive folder (nothing without --archive)."""
  if not arch:
    return
  try:
    wrote = provenance.archive_run(wd, arch)
  except (OSError, ValueError) as e:
    print(f"  archive FAILED: {e}", flush=True)
    if not args.keep_going:
      raise SystemExit(1) from e
    return
  if wrote:
    print(f"  archived {', '.join(wrote)} to {arch}", flush=True)


def _read(root: str, results: str = "results.json") -> list[tuple[dict, dict]]:
  """(settings, results) of every finished run under root (see `provenance.run_finished`)."""
  out = []
  for name in sorted(os.listdir(root)):
    run = os.path.join(root, name)
    base = _load(os.path.join(run, "results.json"))
    res = base if results == "results.json" else _load(os.path.join(run, results))
    if base is not None and provenance.run_finished(run, base) and res is not None:
      out.append((parse_name(name), res))
  return out


def paired(root: str, baseline: str, values, results: str = "results.json"
           ) -> dict[str, dict[str, list[float]]]:
  """Per-seed differences to a baseline method: {settings without seed: {name: [diff]}}.

  `values(results_dict)` gives a run's numbers by name. A run is paired with the run of the
  same settings but `method=<baseline>` (same seed: the same data order and initial heads), so
  every other grid field must match too; runs without one, and the baseline's own runs, are
  left out. Lists are in workdir-name order.
  """
  runs = {run_name(s): (s, values(res)) for s, res in _read(root, results) if "method" in s}
  out: dict[str, dict[str, list[float]]] = {}
  for settings, vals in runs.values():
    if settings["method"] == baseline:
      continue
    base = runs.get(run_name({**settings, "method": baseline}))
    if base is None:
      continue
    key = run_name({k: v for k, v in settings.items() if k != "seed"})
    for name, v in vals.items():
      if name in base[1]:
        out.setdefault(key, {}).setdefault(name, []).append(v - base[1][name])
  return out


def flat_config(workdir: str) -> dict:
  """The run's config (config.json with its config_history.jsonl applied: e.g. the num_steps
  a resume extended it to) flattened to dotted keys, without the fields that differ run to run
  anyway."""
  try:
    cfg = provenance.run_config(workdir)
  except (OSError, ValueError, KeyError, TypeError):
    return {}
  if cfg is None:
    return {}
  out = provenance.flatten(cfg)
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
  reader can judge whether the group is sound. `runs` (from `_read`) saves reading them again.
  """
  groups: dict[str, dict] = {}
  for settings, res in _read(root, results) if runs is None else runs:
    key = run_name({k: v for k, v in settings.items() if k != "seed"})
    g = groups.setdefault(key, {"seeds": [], "values": {}, "configs": []})
    g["seeds"].append(settings.get("seed"))
    g["configs"].append(flat_config(os.path.join(root, run_name(settings))))
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


# train.py flags after `--` that would override what the sweep sets per run (and names the
# run's workdir after) or records in sweep_args.json.
_SWEEP_OWNED = ("--config", "--workdir")


def check_extra(extra: list[str]) -> None:
  owned = [x for x in extra if x.split("=", 1)[0].split(".", 1)[0] in _SWEEP_OWNED]
  if owned:
    raise SystemExit(f"After '--': {owned} would override the run's settings, which the sweep "
                     "sets and names its workdirs after; use --set key=value or --grid.")


def log_name(extra: list[str]) -> str:
  """train.log, or one per process on a multi-host job (all hosts run the sweep on one shared
  root): `train.p<process_id>.log`, else `train.<hostname>.log`."""
  pid = [x.split("=", 1)[1] for x in extra if x.startswith("--process_id=")]
  if pid:
    return f"train.p{pid[-1]}.log"
  if any(x.split("=", 1)[0] in ("--distributed", "--coordinator") for x in extra):
    return f"train.{socket.gethostname()}.log"
  return "train.log"


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  argv = argv[:argv.index("--")] if "--" in argv else argv
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--root", required=True, help="folder holding one workdir per run")
  p.add_argument("--config", help="config file with its task argument, e.g. configs/glue.py:rte")
  p.add_argument("--methods", default="", help="comma list of method presets")
  p.add_argument("--grid", action="append", help="key=v1,v2 (repeatable): a grid axis")
  p.add_argument("--set", action="append", help="key=value (repeatable): fixed override")
  p.add_argument("--seeds", default="0")
  p.add_argument("--splits", default="", help="splits to aggregate (default: all)")
  p.add_argument("--dry_run", action="store_true")
  p.add_argument("--keep_going", action="store_true", help="continue after a failed run")
  p.add_argument("--aggregate_only", action="store_true")
  p.add_argument("--archive", default=None,
                 help="folder that keeps a copy of each finished run's records (config, "
                 "results, metrics; no checkpoints) under the run's name, e.g. inside the git "
                 "checkout (scripts/archive_runs.py --restore puts them back)")
  p.add_argument("--compile_cache", default=None,
                 help="JAX compilation cache folder shared by the runs (default "
                 "<root>/.jax_cache; 'none' turns it off)")
  args = p.parse_args(argv)
  # train.py runs with cwd=REPO: an absolute root keeps its workdirs where this process
  # looks for finished runs, whatever the caller's working directory.
  args.root = os.path.abspath(args.root)
  args.archive = args.archive and os.path.abspath(args.archive)
  check_extra(extra)
  args.extra = extra
  if not args.aggregate_only:
    if not args.config:
      raise SystemExit("--config is required unless --aggregate_only.")
    run_all(args)
  if not os.path.isdir(args.root):
    raise SystemExit(f"--root {args.root} does not exist: nothing to aggregate.")
  splits = [s for s in args.splits.split(",") if s]
  runs = _read(args.root)
  if args.dry_run and not runs:
    return
  check_splits(args.root, runs, splits)
  table, _ = aggregate(args.root, splits, runs=runs)
  print(table)


if __name__ == "__main__":
  main()
