r"""The G-Loss paper's two cost claims, measured for the protocol's `cost_rules`.

  python -m benchmarks.cost_claims [--rounds 20] [--batches 4] [--term_calls 200] [--record]

On the rules' task (MR) at the study's settings (its stage-1 runs' config overrides: packed
B32 L64 batches from the real train set, balanced CE weights, each method at its preset),
each method gets its own jitted train step, compiled for every batch shape and warmed up
first. Then every round times each method's steps over the same `--batches` real batches (the
first of the epoch), the methods taking turns (the first one changes every round, so drift
hits them alike), and then the G-Loss term alone: the objective's term (graph, propagation
and loss) with its gradient, built by the objective's own builder and jitted apart from the
model, on features of the step's shape, `--term_calls` calls. Dispatching that small a
function costs more than it does inside the step, so its share is an upper bound.

Pause everything else first (the sweep: SIGSTOP, then SIGCONT); the machine's busy share
before the first round is in the JSON. Writes benchmarks/results/cost_claims_<cpu kind>.json;
`--record` also appends one row per method to the rules' record (results/records/cost.jsonl),
which the report decides the claims on (RESULTS.md, cost claims).
"""
import argparse
import os
import time

import numpy as np

from acl_jax import cpuinfo, provenance
from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def task_settings(p, task: str) -> tuple[str, list[str]]:
  """(the task's config file, the config overrides its stage-1 runs were trained with): the
  study's own settings for `task`, read from its CE seed-0 row."""
  from acl_jax.study import records  # pylint: disable=import-outside-toplevel
  rows = records.read_all().get(p.stage_record[1], [])
  row = next((r for r in rows if r["task"] == task and r["method"] == "ce"
              and r["seed"] == 0), None)
  if row is None:
    raise SystemExit(f"No stage-1 CE row of {task} is recorded: the cost claims are measured "
                     "at its settings. Run stage 1 first.")
  return row["config"].partition(":")[0], list(row["set"])


def kind_recorded(rows: list[dict], kind: str) -> bool:
  """Whether a cost record's rows hold a CPU kind's measurement (by the run names' `cpu`, so a
  Zen 3's amd_f25m1 is not a Zen 4's amd_f25m17)."""
  from acl_jax.study import records  # pylint: disable=import-outside-toplevel
  return any(records.parse_name(r["run"]).get("cpu") == kind for r in rows)


def study_config(config_file: str, task: str, method: str, sets: list[str]):
  """The config a sweep run of (task, method) starts from: the file's preset, then `sets`."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  spec = importlib.util.spec_from_file_location("cost_config", os.path.join(REPO, config_file))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config(f"{task},{method}")
  for item in sets:
    path, _, text = item.partition("=")
    *parents, leaf = path.split(".")
    node = c
    for k in parents:
      node = node[k]
    old = node[leaf]
    node[leaf] = (text.lower() in ("1", "true") if isinstance(old, bool)
                  else type(old)(text) if isinstance(old, (int, float)) else text)
  return c


def aux_term(loss_cfg, num_labels: int, last_exit: int, class_weights, calibration):
  """`(feats, key, labels, mask, ids) -> loss`: the objective's auxiliary term (G-Loss's
  graph, propagation and loss) alone, built by the loss family's builder from the context the
  objective builds it from (`objectives.build_objective`)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from acl_jax.train import objectives  # pylint: disable=import-outside-toplevel
  cw = None if class_weights is None else jnp.asarray(class_weights, jnp.float32)
  ctx = objectives.LossContext(num_labels, last_exit, cw, dict(calibration or {}))
  fn = objectives.get_loss(loss_cfg.name).build(loss_cfg, ctx)

  def term(feats, key, labels, mask, ids):
    out = fn(objectives.AuxInputs(None, feats, labels, key, mask, ids))
    return out[0] if isinstance(out, tuple) else out
  return term


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--rounds", type=int, default=20)
  ap.add_argument("--batches", type=int, default=4,
                  help="real train batches: each method's steps in a round")
  ap.add_argument("--term_calls", type=int, default=200, help="G-Loss term calls per round")
  ap.add_argument("--record", action="store_true",
                  help="append the rows to the rules' record (results/records/<record>.jsonl)")
  ap.add_argument("--out", default="")
  a = ap.parse_args()
  if a.rounds < 2 or a.batches < 1 or a.term_calls < 1:
    raise SystemExit("--rounds must be >= 2, --batches and --term_calls >= 1.")
  os.chdir(REPO)  # the study's data_dir is relative to the repository

  from acl_jax import host_heap  # pylint: disable=import-outside-toplevel
  with host_heap.managed():
    run(a)


def run(a) -> None:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from acl_jax import data as data_lib  # pylint: disable=import-outside-toplevel
  from acl_jax.study import loader, records, timing  # pylint: disable=import-outside-toplevel
  from acl_jax.train import objectives, scoring  # pylint: disable=import-outside-toplevel
  from acl_jax.train import setup as setup_lib  # pylint: disable=import-outside-toplevel
  from acl_jax.train import step as step_lib  # pylint: disable=import-outside-toplevel

  p = loader.load()
  if not p.cost_rules:
    raise SystemExit("The protocol has no cost_rules.")
  task, record = p.cost_rules[0].task, p.cost_rules[0].record
  term_method = next((r.method for r in p.cost_rules if r.kind == "share"), None)
  if term_method is None or any((r.task, r.record) != (task, record) for r in p.cost_rules):
    raise SystemExit("This script measures cost rules that share one task and record, one "
                     "of them a share rule.")
  kind = cpuinfo.kind()
  if a.record:
    if kind_recorded(records.read_all().get(record, []), kind):
      raise SystemExit(f"{record} already holds this CPU kind's rows ({kind}): remove them "
                       "to measure it again.")
  methods = list(dict.fromkeys(m for r in p.cost_rules for m in (r.method, r.baseline) if m))
  config_file, sets = task_settings(p, task)
  configs = {m: study_config(config_file, task, m, sets) for m in methods}

  c0 = configs[methods[0]]
  s = setup_lib.build(c0, [])
  n_train = len(s.tok["train"])
  total = c0.num_epochs * data_lib.num_train_batches(n_train, c0.batch_size)
  labels = np.asarray(s.tok["train"]["label"])
  class_weights = setup_lib.class_weights(c0, labels, s.task.num_labels)
  params = step_lib.replicate(s.params, s.mesh)  # read by calibration, never donated
  batches = []
  for _, batch in s.train_batches(0):
    batches.append(step_lib.shard_batch(batch, s.mesh))
    if len(batches) == a.batches:
      break
  sc = s.scorer()
  runs = {}
  for m, c in configs.items():
    calibration = objectives.calibrate(
        c.loss, lambda n: scoring.train_features(sc, params, n), c.batch_size,
        jax.device_count(), labels, s.task.num_labels, class_weights)
    # each its own copy of the weights: the step donates its state, as in training
    tr = setup_lib.make_trainer(c, s.model, step_lib.replicate(s.params, s.mesh), s.mesh,
                                num_labels=s.task.num_labels, total_steps=total,
                                class_weights=class_weights, calibration=calibration)
    runs[m] = {"fn": tr.train_step, "state": tr.state, "times": [],
               "calibration": calibration}

  # The term alone on features of the step's shape. Inputs as the step passes them: labels,
  # ids and a packed batch's example mask (whose cond the term takes) are arguments, not
  # constants XLA could fold.
  term = jax.jit(jax.value_and_grad(aux_term(
      configs[term_method].loss, s.task.num_labels, s.model.cfg.exit_layers[-1],
      class_weights, runs[term_method]["calibration"])))
  b = c0.batch_size
  feats = jax.random.normal(jax.random.key(0), (b, s.model.cfg.hidden_size))
  term_args = (jnp.asarray(labels[:b]), jnp.ones((b,), jnp.float32), jnp.arange(b))
  keys = list(jax.random.split(jax.random.key(1), a.term_calls))

  def steps(m):
    """Seconds per step of `m` over the batches."""
    r = runs[m]
    t0 = time.perf_counter()
    for batch in batches:
      r["state"], _ = r["fn"](r["state"], batch)
    jax.block_until_ready(r["state"])
    return (time.perf_counter() - t0) / len(batches)

  def term_seconds():
    """Seconds per call of the term and its gradient."""
    t0 = time.perf_counter()
    jax.block_until_ready([term(feats, k, *term_args) for k in keys])
    return (time.perf_counter() - t0) / len(keys)

  for m in runs:  # compiles each batch shape, then warms up
    runs[m]["compile_s"] = steps(m) * len(batches)
    steps(m)
  term_seconds()
  busy = common.cpu_busy()
  if busy > 0.1:
    print(f"warning: the machine was {100 * busy:.0f}% busy before the first round: pause "
          "the sweep (SIGSTOP) for a measurement.", flush=True)
  terms = []
  for i in range(a.rounds):
    order = methods[i % len(methods):] + methods[:i % len(methods)]
    for m in order:
      runs[m]["times"].append(steps(m))
    terms.append(term_seconds())
    print(f"round {i}: " + ", ".join(f"{m} {runs[m]['times'][-1]:.3f} s/step" for m in methods)
          + f"; G-Loss term {1e3 * terms[-1]:.3f} ms", flush=True)

  out = a.out or os.path.join(REPO, "benchmarks", "results", f"cost_claims_{kind}.json")
  summary = {m: {**common.summarize(r["times"]), "compile_s": r["compile_s"]}
             for m, r in runs.items()}
  common.write_json(out, {"command": common.command_line(), "machine": common.machine_info(REPO),
                          "busy_before": busy, "config": config_file, "set": sets,
                          "step_seconds": {m: r["times"] for m, r in runs.items()},
                          "term_seconds": terms, "summary": summary})
  print(f"wrote {out}")
  if a.record:
    code = [provenance.git_revision(REPO)]
    for m, r in runs.items():
      row = records.make_row(
          sweep=record, run=records.run_name({"task": task, "method": m, "cpu": kind}),
          task=task, method=m, seed=int(configs[m].seed), overrides={"cpu": kind},
          config=f"{config_file}:{task},{m}", set=sets, command=common.command_line(),
          budget={"batch_size": int(c0.batch_size), "max_length": int(c0.task.max_length)},
          step_seconds=[round(t, 6) for t in r["times"]],
          **({"term_seconds": [round(t, 8) for t in terms]} if m == term_method else {}),
          timed_on=timing.machine(), code=code)
      records.append(records.path_of(record), row)
    print(f"recorded in {records.path_of(record)}")


if __name__ == "__main__":
  main()
