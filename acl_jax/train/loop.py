"""The training loop: build the pieces from a config, train with exact resume, evaluate.

Resume order: the workdir's newest intact checkpoint, else the pretrained init. Data order is a
pure function of (seed, epoch) and a step's randomness of (state.rng, state.step), so a resumed
run reproduces the uninterrupted one bit for bit on the same machine. A resume trains the same
run: it may change only provenance.RESUMABLE_FIELDS, and records those changes beside
config.json (`check_same_run`, `record_config`).
"""
import dataclasses
import json
import logging
import math
import os
import time
from typing import Any

import jax
import numpy as np

from acl_jax import data as data_lib
from acl_jax import metrics as metrics_lib
from acl_jax import provenance
from acl_jax.models import hf
from acl_jax.provenance import write_atomic
from acl_jax.train import checkpoint as ckpt_lib
from acl_jax.train import objectives, optim, step as step_lib
from acl_jax.train.state import TrainState

log = logging.getLogger(__name__)


def is_main() -> bool:
  return jax.process_index() == 0


def _cache_dir() -> str:
  return os.environ.get("ACL_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache",
                                                      "acl_jax", "tokens"))


@dataclasses.dataclass
class Setup:
  """Everything built from a config before the first step."""
  config: Any
  task: data_lib.TaskData
  tokenizer: Any
  model: Any
  params: Any
  tok: dict  # split name -> tokenised dataset
  boundaries: tuple
  mesh: Any


def _subsample(ds, n: int, seed: int):
  if n and len(ds) > n:
    return ds.shuffle(seed=seed).select(range(n))
  return ds


def _check_splits(task, splits) -> None:
  missing = [s for s in splits if s not in task.splits]
  if missing:
    raise ValueError(f"Split {missing[0]!r} not in task {task.name}; has {sorted(task.splits)}.")


def load_model(config, num_labels: int, with_tokenizer: bool = True):
  """(model, pretrained params, tokenizer) that a run's config trains (hf.load_pretrained)."""
  # .get: workdirs written before model.exit_pooling / model.head existed.
  overrides = {"exit_pooling": config.model.get("exit_pooling", "cls")}
  if config.model.dropout >= 0:
    overrides.update(hidden_dropout=config.model.dropout, attention_dropout=config.model.dropout)
  return hf.load_pretrained(
      config.model.name, num_labels, exits=config.model.exits,
      head=config.model.get("head", "") or None, dtype=config.model.dtype, seed=config.seed,
      ignore_head=config.model.get("ignore_head", False), with_tokenizer=with_tokenizer,
      **overrides)


def build(config, splits=()) -> Setup:
  """Loads the task, model and tokenised splits named by the config; `splits` the caller will
  read must exist (checked before the model loads)."""
  t = config.task
  files = {k: v for k, v in (("train", t.train_file), ("dev", t.dev_file),
                              ("test", t.test_file)) if v}
  task = data_lib.load_task(
      t.name, t.data_dir or None, text=t.text, val_fraction=t.val_fraction,
      split_seed=t.split_seed, on_empty=t.on_empty, text_column=t.text_column,
      text_pair_column=t.text_pair_column or None, label_column=t.label_column,
      files=files or None, main_metric=t.main_metric or None,
      # .get: workdirs written before the hub task existed.
      hub_id=t.get("hub_id", ""), hub_config=t.get("hub_config", ""),
      hub_splits=dict(t.splits) if "splits" in t else None)
  _check_splits(task, splits)
  model, params, tokenizer = load_model(config, task.num_labels)
  tok = {}
  for split, ds in task.splits.items():
    n = t.max_train_examples if split == "train" else t.max_eval_examples
    ds = _subsample(ds, n, config.seed if split == "train" else 0)
    tok[split] = data_lib.tokenize_dataset(ds, tokenizer, t.max_length, cache_dir=_cache_dir())
  boundaries = data_lib.bucket_boundaries(t.max_length, t.num_buckets)
  return Setup(config, task, tokenizer, model, params, tok, boundaries, step_lib.make_mesh())


def predict(setup: Setup, eval_step, params, ds, with_features: bool = False):
  """Predictions of every exit for every example of `ds`, in dataset order.

  Returns:
    preds: [num_exits, n] int argmax predictions.
    feats: [n, d] last-exit features, or None.
  """
  preds, feats, index = [], [], []
  for batch in data_lib.eval_batches(ds, setup.config.eval_batch_size, setup.boundaries,
                                     jax.process_index(), jax.process_count(),
                                     setup.tokenizer.pad_token_id or 0):
    batch["index"] = batch["index"].astype(np.int32)
    sharded = step_lib.shard_batch(batch, setup.mesh)
    logits, f = eval_step(params, sharded)
    # Rows come back in global eval-batch order; `index` (-1 = padding) maps them to examples.
    index.append(step_lib.to_host(sharded["index"]))
    preds.append(step_lib.to_host(logits).argmax(-1))
    if with_features:
      feats.append(step_lib.to_host(f)[-1])
  index = np.concatenate(index)
  keep = index >= 0
  n = len(ds)
  if keep.sum() != n or len(np.unique(index[keep])) != n:
    raise RuntimeError(f"Evaluation covered {len(np.unique(index[keep]))} of {n} examples.")
  inv = np.argsort(index[keep])  # eval order -> dataset order
  out_preds = np.concatenate(preds, axis=1)[:, keep][:, inv]
  out_feats = np.concatenate(feats)[keep][inv] if with_features else None
  return out_preds, out_feats


def evaluate(setup: Setup, eval_step, params, split: str, with_features: bool = False,
             dump_path: str | None = None, per_class: bool = False) -> dict:
  """Exact metrics of every exit over a whole split (padding rows masked out).

  Returns a dict with the task's metrics of the last exit, `exit_{m}/{metric}` for every exit
  when there are several, silhouette scores of the last exit's features when asked, and with
  `per_class` the last exit's {label name: precision, recall, f1, support} as "per_class".
  With `dump_path` (needs with_features), process 0 saves the last exit's features, labels,
  predictions and label embeddings there (npz) for plots such as t-SNE.
  """
  ds = setup.tok[split]
  k = setup.task.num_labels
  all_preds, feats = predict(setup, eval_step, params, ds, with_features)
  labels = np.asarray(ds["label"], np.int64)
  names = setup.task.metrics
  out = metrics_lib.compute(all_preds[-1], labels, k, names)
  if per_class:
    out["per_class"] = metrics_lib.per_class(all_preds[-1], labels, setup.task.label_names)
  exits = setup.model.cfg.exit_layers
  if len(exits) > 1:
    for e, m in enumerate(exits):
      for name, v in metrics_lib.compute(all_preds[e], labels, k, names).items():
        out[f"exit_{m}/{name}"] = v
    for name in names:  # what multi-exit runs select checkpoints on
      out[f"exit_mean/{name}"] = float(np.mean([out[f"exit_{m}/{name}"] for m in exits]))
  if with_features:
    # pylint: disable-next=import-outside-toplevel
    from acl_jax.losses import silhouette_defined, silhouette_scores
    num_classes = len(np.unique(labels))
    if silhouette_defined(num_classes, len(labels)):
      out.update(silhouette_scores(feats, labels))
    else:  # e.g. a small max_eval_examples: the run's other metrics still count
      log.warning("No silhouette on %s: it needs 2 to N-1 classes, and the split has %d "
                  "classes in %d examples.", split, num_classes, len(labels))
    if dump_path and is_main():
      from acl_jax.models import label_embeddings  # pylint: disable=import-outside-toplevel
      np.savez(dump_path, feats=feats, labels=labels, preds=all_preds[-1],
               label_emb=np.asarray(label_embeddings(jax.device_get(params), exits[-1])),
               label_names=np.asarray(setup.task.label_names))
  out["num_examples"] = len(ds)
  return out


def _jsonl_step(line: str):
  """The step of one metrics.jsonl line; None for a blank or half-written (crashed) line."""
  try:
    return json.loads(line).get("step", 0) if line.strip() else None
  except ValueError:
    return None


class MetricWriter:
  """JSONL + TensorBoard on process 0. On resume, drops records past the restored step."""

  def __init__(self, workdir: str, resume_step: int):
    self.on = is_main()
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.tb = None
    if not self.on:
      return
    if os.path.exists(self.path):
      with open(self.path) as f:
        kept = [ln for ln in f if (st := _jsonl_step(ln)) is not None and st <= resume_step]
      write_atomic(self.path, "".join(kept))
    try:
      from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
      self.tb = SummaryWriter(os.path.join(workdir, "tb"))
    except ImportError:
      log.warning("tensorboardX not installed; writing JSONL only.")

  def write(self, step: int, kind: str, values: dict) -> None:
    if not self.on:
      return
    rec = {"step": int(step), "kind": kind, **{k: float(v) for k, v in values.items()}}
    with open(self.path, "a") as f:
      f.write(json.dumps(rec) + "\n")
    if self.tb is not None:
      for k, v in values.items():
        self.tb.add_scalar(f"{kind}/{k}", float(v), int(step))
      self.tb.flush()

  def close(self):
    if self.tb is not None:
      self.tb.close()


def params_fingerprint(params) -> str:
  """sha256 of this process's replica of the params: equal on every host of a sound run."""
  import hashlib  # pylint: disable=import-outside-toplevel
  h = hashlib.sha256()
  for x in jax.tree.leaves(params):
    h.update(np.asarray(x.addressable_data(0)).tobytes())
  return h.hexdigest()[:16]


def check_finite(step: int, m: dict) -> None:
  """Raises on a NaN/Inf loss or gradient, naming the step and the bad terms.

  The gradient norm is checked too: a non-finite gradient under finite losses would corrupt
  the parameters and surface one step later, under the wrong term.
  """
  bad = sorted(k for k, v in m.items()
               if (k.startswith(("loss", "gate/norm")) or k == "grad_norm")
               and not math.isfinite(float(v)))
  if bad:
    raise FloatingPointError(
        f"Non-finite loss or gradient at step {step}: " +
        ", ".join(f"{k}={float(m[k])}" for k in bad) +
        ". Lower optim.lr, check the loss hyperparameters, or try model.dtype=float32.")


def _train_features(setup: Setup, eval_step, n: int) -> np.ndarray:
  """[<= n, d] the pretrained model's last-exit features of a seeded sample of train."""
  sub = _subsample(setup.tok["train"], n, 0)
  return predict(setup, eval_step, setup.params, sub, with_features=True)[1]


def _gloss_sigma(setup: Setup, eval_step, meta: dict, start: int) -> float | None:
  """G-Loss's kernel width (None for other losses): the config's, or with sigma_mode "sqrt"
  the heuristic on pretrained train features (<= 2000 examples; kept in meta for resumes).

  A fresh run also probes the graph on those features: if most edges sit at the weight floor
  (objectives.gloss_floor_share), G-Loss learns next to nothing, and a warning says so.
  """
  cfg = setup.config
  if cfg.loss.name != "gloss":
    return None
  feats = None
  sigma = float(cfg.loss.sigma)
  if cfg.loss.sigma_mode == "sqrt":
    from acl_jax.losses import sigma_sqrt_heuristic  # pylint: disable=import-outside-toplevel
    if meta.get("sigma") is None:
      feats = _train_features(setup, eval_step, 2000)
      meta["sigma"] = float(sigma_sqrt_heuristic(feats))
    sigma = meta["sigma"]
    log.info("G-Loss sigma (sqrt heuristic on pretrained train features): %.4f", sigma)
  if start == 0:
    # One graph per device, unless loss.gloss_global gathers the global batch.
    size = cfg.batch_size // (1 if cfg.loss.gloss_global else jax.device_count())
    n = 4 * size
    share = objectives.gloss_floor_share(
        (feats if feats is not None else _train_features(setup, eval_step, n))[:n], sigma, size)
    log.info("G-Loss at sigma=%.4g: %.1f%% of batch-graph edges at the weight floor on "
             "pretrained train features.", sigma, 100 * share)
    if share > objectives.FLOOR_SHARE_WARN:
      log.warning(
          "G-Loss at sigma=%.4g learns next to nothing: on pretrained train features, %.1f%% "
          "of the edges of a %d-node batch graph (all but the strongest) have a kernel weight "
          "below the weight floor (%g of the strongest edge's), where they carry no gradient; "
          "at 100%% G-Loss is a constant with zero gradient. Raise loss.sigma (SPEC: 0.667) "
          "or use loss.sigma_mode=sqrt.", sigma, 100 * share, size, objectives.DEFAULT_W_FLOOR)
  return sigma


def _flat_config(cfg) -> dict:
  return provenance.flatten(json.loads(cfg.to_json_best_effort()))


def config_changes(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
  """{field: (old value, new value)} between two flattened configs, over the fields both have."""
  return {k: (old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]}


def _fmt_changes(changes: dict) -> str:
  return ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())


def _read_run_config(workdir: str, before_step: int | None = None) -> dict | None:
  """provenance.run_config, flattened; None (with a warning) when it cannot be read."""
  try:
    cfg = provenance.run_config(workdir, before_step)
  except (ValueError, KeyError, TypeError):
    log.warning("Could not read the config records of %s; config.json is rewritten with the "
                "current config.", workdir)
    return None
  return None if cfg is None else provenance.flatten(cfg)


def check_same_run(workdir: str, cfg) -> None:
  """Refuses to resume a workdir's checkpoint with a config that trains something else.

  A resume may change provenance.RESUMABLE_FIELDS only (how long and how often to train,
  evaluate and log; the optimizer's settings). Any other changed field is named, old -> new,
  in one error, before anything loads.
  """
  if not provenance.checkpoint_steps(workdir):
    return  # nothing to resume: the run starts over and config.json is rewritten
  old = _read_run_config(workdir)
  if old is None:
    return
  fixed = {k: v for k, v in config_changes(old, _flat_config(cfg)).items()
           if not provenance.is_resumable(k)}
  if fixed:
    raise ValueError(
        f"{workdir} holds a checkpoint of a run with another config: {_fmt_changes(fixed)}. "
        "These fields say what is trained, so resuming would mix two runs in one workdir (a "
        "resume may change only provenance.RESUMABLE_FIELDS: the optimizer, num_steps, eval, "
        "checkpoint and logging cadence). Use a new --workdir, or set the fields back to "
        "resume this run.")


def record_config(workdir: str, cfg, start: int, resumed: bool) -> None:
  """Writes the run's config records (process 0 only).

  A fresh run writes config.json and no history. A resume from step `start` keeps config.json
  (the config the run started with) and appends the fields it changes to config_history.jsonl
  as {"step": start, "changes": {field: [old, new]}}; entries of steps from `start` on are
  dropped first, as the steps they describe are retrained (like metrics.jsonl's records).
  """
  cfg_path = os.path.join(workdir, "config.json")
  hist_path = os.path.join(workdir, provenance.CONFIG_HISTORY)
  old = _read_run_config(workdir, before_step=start) if resumed else None
  if old is None:
    write_atomic(cfg_path, cfg.to_json_best_effort(indent=2))
    if os.path.exists(hist_path):
      os.remove(hist_path)
    return
  history = provenance.read_config_history(workdir)
  kept = [e for e in history if e["step"] < start]
  changes = config_changes(old, _flat_config(cfg))
  if changes:
    kept.append({"step": start, "changes": {k: list(v) for k, v in changes.items()}})
    log.warning("Resuming at step %d with %s: recorded in %s (config.json keeps the config "
                "the run started with).", start, _fmt_changes(changes), provenance.CONFIG_HISTORY)
  if kept != history:
    write_atomic(hist_path, "".join(json.dumps(e) + "\n" for e in kept))


def _check_before_loading(cfg) -> None:
  """Config errors that need no data or model, raised before the slow loading starts."""
  for key, low in (("batch_size", 1), ("eval_batch_size", 1), ("num_steps", 0),
                   ("eval_every", 0), ("checkpoint_every", 0), ("early_stop_patience", 0)):
    if cfg[key] < low:
      raise ValueError(f"{key} must be >= {low}, got {cfg[key]}: set --config.{key}.")
  if cfg.num_steps == 0 and cfg.num_epochs < 1:
    raise ValueError(f"num_epochs must be >= 1 when num_steps is 0, got {cfg.num_epochs}: set "
                     "--config.num_epochs or --config.num_steps.")
  for key in ("batch_size", "eval_batch_size"):
    if cfg[key] % jax.device_count():
      raise ValueError(f"{key} {cfg[key]} must be divisible by the device count "
                       f"{jax.device_count()}: set --config.{key} to a multiple of it.")
  # The loss name and its hyperparameters (tau, gamma, gate, ...), on stand-in sizes; the
  # real objective is built once the task's label count is known.
  objectives.build_objective(cfg.loss, num_labels=2, last_exit=1,
                             sigma=1.0 if cfg.loss.sigma_mode == "sqrt" else None)


def _check_not_pruned(workdir: str) -> None:
  """A finished run (results.json with its training record) whose latest checkpoint is gone
  would silently train again from step 0 and overwrite its results: refuse."""
  if provenance.run_finished(workdir) and not provenance.checkpoint_steps(workdir):
    raise ValueError(f"{workdir} holds a finished run (results.json) but no checkpoint to "
                     "resume from (ckpt/ was deleted, e.g. by checkpoint.keep_train_state="
                     "False): training would restart from step 0 and overwrite its results. "
                     "Use a new --workdir, or move results.json away to retrain it here.")


def train_and_evaluate(config, workdir: str) -> dict:
  """Trains per `config` in `workdir` (resuming if it holds a checkpoint); returns results."""
  os.makedirs(workdir, exist_ok=True)
  cfg = config
  _check_before_loading(cfg)
  _check_not_pruned(workdir)
  check_same_run(workdir, cfg)
  # From the model's config.json alone, before any data is read.
  hf.check_max_length(cfg.model.name, cfg.task.max_length)
  setup = build(config)
  n_train = len(setup.tok["train"])
  steps_per_epoch = data_lib.num_train_batches(n_train, cfg.batch_size)
  if steps_per_epoch < 1:
    raise ValueError(f"{n_train} training examples make no batch of {cfg.batch_size}.")
  total = cfg.num_steps if cfg.num_steps > 0 else cfg.num_epochs * steps_per_epoch
  eval_every = cfg.eval_every or steps_per_epoch
  ckpt_every = cfg.checkpoint_every or eval_every

  class_weights = None
  if cfg.loss.class_weights == "balanced":
    from acl_jax.losses import balanced_class_weights  # pylint: disable=import-outside-toplevel
    class_weights = balanced_class_weights(np.asarray(setup.tok["train"]["label"]),
                                           setup.task.num_labels)

  eval_step = step_lib.make_eval_step(setup.model, setup.mesh)
  params = step_lib.replicate(setup.params, setup.mesh)
  setup.params = params
  ckpts = ckpt_lib.Checkpoints(workdir)
  multi = objectives.multi_exit_from_config(cfg.multi_exit, len(setup.model.cfg.exit_layers),
                                            total)
  tx = make_tx(cfg, total, multi)
  lr_groups = optim.lr_groups(**_lr_args(cfg, total, multi))  # logged host-side
  state = TrainState.create(params, tx, cfg.seed)
  state = step_lib.replicate(state, setup.mesh)
  # The newest intact checkpoint (an unreadable one is set aside and logged).
  restored = ckpts.restore(state)
  meta = {}
  if restored is not None:
    state, meta = restored
    log.info("Resumed from %s at step %d.", workdir, int(state.step))
  start = int(state.step)
  sigma = _gloss_sigma(setup, eval_step, meta, start)
  objective = objectives.build_objective(cfg.loss, num_labels=setup.task.num_labels,
                                         last_exit=setup.model.cfg.num_layers,
                                         class_weights=class_weights, sigma=sigma,
                                         multi_exit=multi)
  meta.setdefault("best_metric", None)
  meta.setdefault("best_step", None)
  meta.setdefault("evals_since_best", 0)
  meta = ckpts.sync_best(state, meta)
  # Every code revision that trained this run (a resume may come from newer code): results
  # that mix revisions can be told apart later.
  rev = provenance.git_revision()
  revs = meta.setdefault("code_versions", [])
  if revs and rev not in revs:
    log.warning("%s was trained by code %s and resumes with %s.", workdir, revs[-1], rev)
  if rev not in revs:
    revs.append(rev)
  meta["param_shapes"] = ckpt_lib.param_shapes(state.params)
  meta["num_labels"] = setup.task.num_labels
  meta["total_steps"] = total
  # A multi-exit model is selected on the mean over its exits: the last exit alone would,
  # e.g., keep a 2ST checkpoint from before stage 2 trained the lower exits.
  main_metric = (f"exit_mean/{setup.task.main_metric}" if multi else setup.task.main_metric)
  writer = MetricWriter(workdir, start)
  if is_main():
    record_config(workdir, cfg, start, resumed=restored is not None)
    provenance.write_labels(workdir, setup.task.label_names)
    log.info("%s: %d train examples, %d steps/epoch, %d steps, objective %s, %d device(s).",
             setup.task.name, n_train, steps_per_epoch, total, objective.name,
             jax.device_count())

  train_step = step_lib.make_train_step(setup.model, objective, tx, setup.mesh)
  # Each batch's rows are shuffled, so a device's shard is a random draw of the batch, not a
  # length stratum, and the row order is the same on every device count.
  batches = data_lib.train_batches(setup.tok["train"], cfg.batch_size, cfg.seed, start,
                                   setup.boundaries, jax.process_index(), jax.process_count(),
                                   setup.tokenizer.pad_token_id or 0, shuffle_within=True)
  bar = None
  if cfg.progress and is_main():
    import sys  # pylint: disable=import-outside-toplevel
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel
    # Redirected output (nohup, CI) gets a line every 30 s instead of a redraw per step.
    bar = tqdm(total=total, initial=start, desc="train", dynamic_ncols=True,
               mininterval=0.1 if sys.stderr.isatty() else 30.0)
  meta.setdefault("gate_on_steps", 0)
  meta.setdefault("gated_steps", 0)
  t0, stopped = time.time(), "early_stopped_at" in meta

  def save_latest(state, done):
    epoch, pos = divmod(done, steps_per_epoch)
    ckpts.save(state, {**meta, "step": done, "data_position": {"epoch": epoch, "batch": pos}})

  for step, batch in batches:
    if step >= total or stopped:
      break
    # The dataset index keys the example's randomness (dropout masks, the G-Loss split).
    batch["example_id"] = batch.pop("index").astype(np.int32)
    state, m = train_step(state, step_lib.shard_batch(batch, setup.mesh))
    m = jax.device_get(m)
    check_finite(step + 1, m)
    if "gate/gate" in m:  # kept in meta, so the fraction survives a resume
      meta["gate_on_steps"] += float(m["gate/gate"])
      meta["gated_steps"] += 1
    done = step + 1
    if bar is not None:
      bar.update(1)
      bar.set_postfix(loss=f"{float(m['loss']):.4f}")
    if done % cfg.log_every == 0 or done == total:
      m["steps_per_s"] = (done - start) / max(time.time() - t0, 1e-9)
      m.update(optim.learning_rates(lr_groups, step))  # what this step's update used
      writer.write(done, "train", m)
    if done % eval_every == 0 or done == total:
      res = evaluate(setup, eval_step, state.params, "dev")
      writer.write(done, "dev", res)
      cur = res[main_metric]
      if meta["best_metric"] is None or cur > meta["best_metric"]:
        meta.update(best_metric=cur, best_step=done, evals_since_best=0)
        # Latest first: a crash between the two saves is mended on resume (sync_best).
        save_latest(state, done)
        ckpts.save(state, {**meta, "step": done}, best=True)
      else:
        meta["evals_since_best"] += 1
      msg = f"step {done}: dev " + " ".join(f"{k}={v:.4f}" for k, v in res.items()
                                             if k in setup.task.metrics)
      if bar is not None:
        bar.write(msg)
      elif is_main():
        print(msg, flush=True)
      if cfg.early_stop_patience and meta["evals_since_best"] >= cfg.early_stop_patience:
        stopped = True
        meta["early_stopped_at"] = done
    if done % ckpt_every == 0 or done == total or stopped:
      save_latest(state, done)
  if bar is not None:
    bar.close()
  writer.close()
  summary = {"final_step": int(state.step), "best_step": meta["best_step"],
             "best_dev": meta["best_metric"], "main_metric": main_metric,
             "params_sha256": params_fingerprint(state.params),
             "code_versions": meta["code_versions"]}
  if meta["gated_steps"]:
    summary["gate_on_fraction"] = meta["gate_on_steps"] / meta["gated_steps"]
  if "early_stopped_at" in meta:
    summary["early_stopped_at"] = meta["early_stopped_at"]
  results = evaluate_best(setup, ckpts, state.params, eval_step, cfg.eval_splits.split(","))
  results["train"] = summary
  ckpts.close()
  if is_main():
    write_atomic(os.path.join(workdir, "results.json"), json.dumps(results, indent=2))
  if not cfg.checkpoint.keep_train_state:  # after results.json: the run is finished
    ckpt_lib.drop_train_state(workdir)
  return results


def evaluate_best(setup: Setup, ckpts, target_params, eval_step, splits, dump_dir=None,
                  checkpoint: str = "best", per_class: bool = False) -> dict:
  """Evaluates the best checkpoint (the latest when none is marked best) on `splits`.

  checkpoint="latest" evaluates the last saved checkpoint instead: the run's final weights,
  free of the choice model selection made on dev. With `dump_dir`, each split's features go
  to `dump_dir/features_{split}.npz`.
  """
  restored = ckpts.restore_selected(target_params, checkpoint)
  if restored is None:
    raise FileNotFoundError("No checkpoint to evaluate in this workdir; train first.")
  params, meta = restored
  out = {"checkpoint_step": int(meta["step"])}
  splits = [s.strip() for s in splits]
  _check_splits(setup.task, splits)
  for split in splits:
    dump = os.path.join(dump_dir, f"features_{split}.npz") if dump_dir else None
    out[split] = evaluate(setup, eval_step, params, split, with_features=True,
                          dump_path=dump, per_class=per_class)
  return out


def _lr_args(cfg, total_steps: int, multi=None) -> dict:
  o = cfg.optim
  return dict(lr=o.lr, total_steps=total_steps, warmup_ratio=o.warmup_ratio,
              strategy=multi.strategy if multi else "",
              stage1_steps=multi.stage1_steps if multi else 0, head_lr_mult=o.head_lr_mult)


def make_tx(cfg, total_steps: int, multi=None):
  """The optimizer of a config (multi-exit strategies get their parameter groups)."""
  return optim.make_optimizer(weight_decay=cfg.optim.weight_decay,
                              clip_norm=cfg.optim.clip_norm, **_lr_args(cfg, total_steps, multi))


def _open_workdir(config, workdir: str, splits=()):
  """(setup, checkpoints, params restore target) of a finished run, rebuilt from its config.

  Evaluation restores the params alone, so a run whose optimizer state this code no longer
  builds (an optimizer change since) still evaluates.
  """
  # Checked before the model and data load: a run restored from the records archive, or one
  # whose checkpoints were pruned, fails at once.
  if not (provenance.checkpoint_steps(workdir, "best") or provenance.checkpoint_steps(workdir)):
    raise FileNotFoundError(
        f"No checkpoint in {workdir}: train it first (a run restored from a records archive, "
        "or pruned, keeps its results but not its weights).")
  setup = build(config, splits)
  ckpts = ckpt_lib.Checkpoints(workdir, create=False)
  if not ckpts.has_checkpoint():
    ckpts.close()
    raise FileNotFoundError(f"No checkpoint in {workdir}; train first.")
  return setup, ckpts, step_lib.replicate(setup.params, setup.mesh)


def merge_results(old: dict, new: dict) -> dict:
  """results.json after re-evaluating some splits: `new` replaces its entries, the rest stays.

  When `new` comes from another checkpoint than `old`, the old split metrics are stale and
  only the training record ("train") is kept.
  """
  if old.get("checkpoint_step") != new.get("checkpoint_step"):
    old = {k: v for k, v in old.items() if k == "train"}
  return {**old, **new}


def evaluate_workdir(config, workdir: str, splits, dump_features: bool = False,
                     checkpoint: str = "best", per_class: bool = False) -> dict:
  """Rebuilds the model of a finished run and evaluates its best (or latest) checkpoint.

  Classes are named by the run's labels.json (the names its model was trained with), where
  the run has one."""
  splits = [s.strip() for s in splits]
  setup, ckpts, target = _open_workdir(config, workdir, splits)
  names = provenance.read_labels(workdir)
  # Another label count is a model that does not fit the checkpoint, which the restore names.
  if names not in (None, setup.task.label_names) and len(names) == setup.task.num_labels:
    log.warning("%s was trained with the labels %s; the task's data now names them %s.",
                workdir, names, setup.task.label_names)
    setup.task.label_names = names
  eval_step = step_lib.make_eval_step(setup.model, setup.mesh)
  try:
    return evaluate_best(setup, ckpts, target, eval_step, splits,
                         dump_dir=workdir if dump_features else None, checkpoint=checkpoint,
                         per_class=per_class)
  finally:
    ckpts.close()


def early_exit_workdir(config, workdir: str, split: str, policy: str, thresholds,
                       batch_size: int = 32, repeats: int = 3) -> tuple[str, str]:
  """Sweeps an early-exit policy over thresholds on a multi-exit run's best checkpoint.

  Writes `early_exit_{policy}_{split}.md/.json` into the workdir (metric, mean layers, layer
  speed-up and measured wall-clock speed-up against the full model on the same batches).
  """
  from acl_jax import exits  # pylint: disable=import-outside-toplevel
  if config.model.exits != "all":
    raise ValueError(f"{workdir} was trained with model.exits={config.model.exits!r}: "
                     "early-exit evaluation needs a checkpoint trained with exits='all' "
                     "(e.g. configs/glue.py:sst2,jt).")
  from acl_jax.exits.policies import check_threshold  # pylint: disable=import-outside-toplevel
  for t in thresholds:  # fail before loading anything
    check_threshold(policy, t)
  setup, ckpts, target = _open_workdir(config, workdir, [split])
  restored = ckpts.restore_selected(target)
  ckpts.close()
  params = jax.device_get(restored[0])
  ds = setup.tok[split]
  batches = list(data_lib.eval_batches(ds, batch_size, setup.boundaries,
                                       pad_id=setup.tokenizer.pad_token_id or 0))
  names = setup.task.metrics
  k = setup.task.num_labels

  def metric_fn(preds, labels):
    return metrics_lib.compute(preds, labels, k, names)

  rows = exits.sweep(setup.model.cfg, params, batches, None, policy, thresholds,
                     metric_fn=metric_fn, repeats=repeats)
  label = f"{os.path.basename(os.path.normpath(workdir))}"
  about = {"task": setup.task.name, "model": os.path.basename(os.path.normpath(
      config.model.name)), "split": split}
  return exits.write_table(rows, os.path.join(workdir, f"early_exit_{policy}_{split}.md"),
                           label=label, about=about)
