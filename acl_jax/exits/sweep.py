"""Quality-speed sweeps of an early-exit policy over thresholds.

For each threshold a row reports the metric, the mean number of layers run, the layer speed-up
M / mean layers, and the measured wall-clock speed-up of the fast path (`early_exit_batches`,
the batches' rows pooled layer by layer) against the full model on the same batches. Batches are dicts of numpy arrays as `acl_jax.data` makes them
(input_ids, attention_mask, token_type_ids?, labels, example_mask); rows with example_mask 0
are padding and count in the timings (both paths run them) but not in metrics or mean layers.
"""
import json
import os
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import jax
import numpy as np

from acl_jax.exits import policies
from acl_jax.exits.fast import early_exit_batches
from acl_jax.models.bert import Classifier
from acl_jax.models.config import EncoderConfig
from acl_jax.provenance import write_atomic

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def default_full_forward(cfg: EncoderConfig) -> Callable[[Any, Mapping[str, np.ndarray]], jax.Array]:
  """Jitted `(params, batch) -> logits [num_exits, batch, K]` of the whole model."""
  @jax.jit
  def forward(params, inputs):
    logits, _ = Classifier(cfg).apply({"params": params}, inputs["input_ids"],
                                      inputs["attention_mask"], inputs.get("token_type_ids"))
    return logits
  return forward


def _inputs(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  return {k: batch[k] for k in _INPUTS if batch.get(k) is not None}


def _real(batch: Mapping[str, np.ndarray]) -> np.ndarray:
  """[b] bool, the non-padding rows."""
  if "example_mask" in batch:
    return np.asarray(batch["example_mask"]) > 0
  return np.ones((len(batch["input_ids"]),), bool)


def _paired_times(full: Callable[[], Any], fast: Callable[[], Any],
                  repeats: int) -> tuple[float, float]:
  """Median seconds of `full()` and `fast()`, timed in alternation after one warm-up each.

  Alternating puts machine drift on both sides of the ratio alike (timing the full model
  once for the whole sweep let minutes of drift land on the speed-up).
  """
  full()
  fast()  # compiles every shape the timed runs will meet: same batches, same decisions
  t_full, t_fast = [], []
  for _ in range(repeats):
    for fn, out in ((full, t_full), (fast, t_fast)):
      start = time.perf_counter()
      fn()
      out.append(time.perf_counter() - start)
  return float(np.median(t_full)), float(np.median(t_fast))


def _score(metric_fn: Callable, preds: np.ndarray, labels: np.ndarray) -> tuple[float, dict]:
  """metric_fn may return a float or a dict of floats (its first entry is the main metric)."""
  out = metric_fn(preds, labels)
  if isinstance(out, Mapping):
    out = {k: float(v) for k, v in out.items()}
    return next(iter(out.values())), out
  return float(out), {}


def accuracy(preds: np.ndarray, labels: np.ndarray) -> float:
  return float(np.mean(preds == labels)) if len(labels) else 0.0


def sweep(cfg: EncoderConfig, params: Any, batches: Iterable[Mapping[str, np.ndarray]],
          labels: Optional[np.ndarray], policy: str, thresholds: Sequence[Any],
          metric_fn: Optional[Callable[[np.ndarray, np.ndarray], Any]] = None,
          full_forward_fn: Optional[Callable[[Any, Mapping[str, np.ndarray]], Any]] = None, *,
          repeats: int = 3, max_pool_rows: int = 1024) -> list[dict]:
  """Runs `policy` at every threshold and measures quality and speed.

  Args:
    cfg: encoder config with `exits="all"`.
    params: `Classifier(cfg)` params.
    batches: dicts of numpy arrays; input_ids/attention_mask/token_type_ids [b, seq],
      example_mask [b] (optional; 0 marks padding), labels [b] (used when `labels` is None).
    labels: [n] gold labels of the real rows of all batches in order, or None to read them
      from the batches.
    policy: a key of `POLICIES`.
    thresholds: the policy's thresholds to sweep.
    metric_fn: (preds [n], labels [n]) -> float or dict of floats (the first is the
      `metric` column, named by `metric_name`); None for accuracy.
    full_forward_fn: (params, inputs dict) -> logits [num_exits, b, K] of the whole model;
      None for a jitted `Classifier(cfg)`. It is the timing baseline and gives the reference
      `select_exit` decisions that the fast path is checked against.
    repeats: timed passes per measurement; the median is reported. 0 leaves the sweep
      untimed: time_fast_s, time_full_s and speedup are None.
    max_pool_rows: passed to `early_exit_batches` (rows of one sequence length pooled on the
      device; layer calls of one batch's rows).

  Returns:
    One dict per threshold: policy, threshold, metric, metrics and metric_name (when
    metric_fn returns a dict), full_metric (final exit), mean_layers, layer_speedup,
    row_speedup (full-model rows x layers over the padded rows the fast path ran),
    time_fast_s, time_full_s (seconds per pass over all batches), speedup (time_full_s /
    time_fast_s), agreement
    (fraction of real examples whose exit layer and prediction equal the reference),
    num_examples, num_layers, batch_size.
  """
  thresholds = [policies.normalize_threshold(policy, t) for t in thresholds]
  batches = list(batches)
  if not batches:
    raise ValueError("sweep needs at least one batch.")
  metric_fn = metric_fn or accuracy
  full_forward_fn = full_forward_fn or default_full_forward(cfg)
  # Host (numpy) params would be copied to the device on every jitted call, a cost of the
  # parameter count on both timed paths that pulls the measured speed-up towards 1.
  params = jax.device_put(params)
  inputs = [_inputs(b) for b in batches]
  real = [_real(b) for b in batches]
  if labels is None:
    labels = np.concatenate([np.asarray(b["labels"])[r] for b, r in zip(batches, real)])
  labels = np.asarray(labels)
  n = int(sum(r.sum() for r in real))
  if labels.shape != (n,):
    raise ValueError(f"labels must be [{n}] (one per real example), got {labels.shape}.")

  def run_full():
    return [np.asarray(jax.device_get(full_forward_fn(params, x))) for x in inputs]

  full_logits = run_full()
  policies.check_num_exits(full_logits[0].shape[0])
  num_layers = full_logits[0].shape[0]
  full_preds = np.concatenate([lg[-1].argmax(-1)[r] for lg, r in zip(full_logits, real)])
  full_metric, _ = _score(metric_fn, full_preds, labels)

  rows = []
  for t in thresholds:
    def run_fast(t=t, stats=None):
      return early_exit_batches(cfg, params, inputs, policy, t, max_pool_rows=max_pool_rows,
                                stats=stats)

    if repeats > 0:
      time_full, time_fast = _paired_times(run_full, run_fast, repeats)
    else:  # untimed: metric, exits and layer speed-up only (e.g. extra seeds of a study)
      time_full = time_fast = None
    stats = {}
    fast = run_fast(stats=stats)
    layer = np.concatenate([e[r] for (e, _), r in zip(fast, real)])
    preds = np.concatenate([p[r] for (_, p), r in zip(fast, real)])
    ref = [jax.device_get(policies.select_exit(lg, policy, t)) for lg in full_logits]
    ref_layer = np.concatenate([e[r] for (e, _), r in zip(ref, real)])
    ref_preds = np.concatenate([p[r] for (_, p), r in zip(ref, real)])
    metric, metrics = _score(metric_fn, preds, labels)
    mean_layers = float(layer.mean()) if n else float(num_layers)
    row = dict(policy=policy, threshold=t, metric=metric, full_metric=full_metric,
               mean_layers=mean_layers, layer_speedup=num_layers / mean_layers,
               row_speedup=num_layers * sum(len(x["input_ids"]) for x in inputs)
               / max(stats["row_layers"], 1),
               time_fast_s=time_fast, time_full_s=time_full,
               speedup=None if time_full is None else time_full / max(time_fast, 1e-12),
               agreement=float(np.mean((layer == ref_layer) & (preds == ref_preds))) if n else 1.0,
               num_examples=n, num_layers=int(num_layers),
               batch_size=int(len(batches[0]["input_ids"])))
    if metrics:
      row["metrics"] = metrics
      row["metric_name"] = next(iter(metrics))
    rows.append(row)
  return rows


_COLUMNS = (("threshold", "threshold", "{:g}"), ("metric", "metric", "{:.4f}"),
            ("full-model metric", "full_metric", "{:.4f}"),
            ("mean layers", "mean_layers", "{:.2f}"),
            ("layer speed-up", "layer_speedup", "{:.2f}x"),
            ("row speed-up", "row_speedup", "{:.2f}x"),
            ("fast (ms)", "time_fast_s", "{:.1f}"), ("full (ms)", "time_full_s", "{:.1f}"),
            ("measured speed-up", "speedup", "{:.2f}x"), ("agreement", "agreement", "{:.3f}"))


def write_table(rows: Sequence[Mapping[str, Any]], path_md: str,
                label: Optional[str] = None,
                about: Optional[Mapping[str, str]] = None) -> tuple[str, str]:
  """Writes `rows` as a Markdown table at `path_md` and as JSON next to it (same stem).

  Args:
    rows: the output of `sweep`.
    path_md: where the table goes, e.g. "workdir/exits_entropy.md".
    label: curve name for `exits.plot`; None for the folder's name.
    about: what was swept, e.g. {"task": "sst2", "model": "minilm-l6", "split": "dev"}: named
      in the table's title and the plot's.

  Returns:
    (markdown path, json path).
  """
  path_json = os.path.splitext(path_md)[0] + ".json"
  folder = os.path.dirname(os.path.abspath(path_md))
  os.makedirs(folder, exist_ok=True)
  label = label or os.path.basename(folder)
  policy = rows[0]["policy"] if rows else None
  metric = rows[0].get("metric_name") if rows else None
  about = dict(about or {})
  where = ", ".join(f"{k} {v}" for k, v in about.items() if v)
  lines = [f"Early exit: {label}, policy {policy}" + (f", metric {metric}" if metric else "")
           + (f" ({where})" if where else ""), "",
           "| " + " | ".join(c[0] for c in _COLUMNS) + " |",
           "|" + "|".join("---" for _ in _COLUMNS) + "|"]
  for r in rows:
    ms = {"time_fast_s", "time_full_s"}
    cells = ["—" if r[k] is None else fmt.format(r[k] * 1e3 if k in ms else r[k])
             for _, k, fmt in _COLUMNS]
    lines.append("| " + " | ".join(cells) + " |")
  # Atomic: scripts/sweep.py takes an existing JSON as "this run is swept".
  write_atomic(path_md, "\n".join(lines) + "\n")
  write_atomic(path_json, json.dumps({"label": label, "policy": policy, **about,
                                      "rows": list(rows)}, indent=1))
  return path_md, path_json
