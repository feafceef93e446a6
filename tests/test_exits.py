"""Early-exit policies, the layer-skipping fast path, sweeps and the quality-speed plot."""
import json
import os

import jax
import numpy as np
import pytest

from acl_jax.exits import POLICIES, early_exit_predict, select_exit, sweep, write_table
from acl_jax.exits import fast
from acl_jax.models import Classifier, EncoderConfig, init_params
from tests import helpers, numerics
from tests.helpers import run_py

CFG = EncoderConfig(vocab_size=100, hidden_size=32, num_layers=4, num_heads=4,
                    intermediate_size=64, num_labels=3, exits="all")
SEQ = 12


def np_select_exit(logits, policy, threshold):
  """Plain NumPy loop over examples and layers, written from SPEC §3 alone."""
  logits = np.asarray(logits, np.float64)
  num_exits, batch, _ = logits.shape
  z = logits - logits.max(-1, keepdims=True)
  probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
  exit_layer = np.zeros(batch, np.int64)
  preds = np.zeros(batch, np.int64)
  for b in range(batch):
    count, prev = 0, None
    for m in range(num_exits):
      p = probs[m, b]
      arg = int(np.argmax(p))
      if policy == "entropy":
        ok = -np.sum(p * np.log(np.maximum(p, 1e-300))) < threshold
      elif policy == "confidence":
        ok = p.max() >= threshold
      elif policy == "margin":  # the README's example policy
        top = np.sort(p)[::-1]
        ok = top[0] - top[1] >= threshold
      else:
        count = count + 1 if (m > 0 and arg == prev) else 0
        prev = arg
        ok = count >= threshold
      if ok or m == num_exits - 1:
        exit_layer[b], preds[b] = m + 1, arg
        break
  return exit_layer, preds


def rule_values(logits, policy):
  """[num_exits, batch] values the entropy/confidence/margin rules compare with the threshold."""
  logits = np.asarray(logits, np.float64)
  z = logits - logits.max(-1, keepdims=True)
  p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
  if policy == "entropy":
    return -np.sum(p * np.log(np.maximum(p, 1e-300)), -1)
  if policy == "margin":
    top = np.sort(p, -1)
    return top[..., -1] - top[..., -2]
  return p.max(-1)


def safe_thresholds(logits, policy, n=4):
  """Thresholds that split the observed values at wide gaps, so rounding cannot flip them."""
  if policy == "patience":
    return [1, 2, 3, logits.shape[0], logits.shape[0] + 5]
  v = np.unique(rule_values(logits, policy).ravel())
  out = []
  for window in np.array_split(np.arange(len(v) - 1), n):
    if len(window):
      i = window[np.argmax(v[window + 1] - v[window])]
      out.append(float((v[i] + v[i + 1]) / 2))
  extremes = [0.0, 10.0] if policy == "entropy" else [1e-6, 1.0]
  return out + extremes


def perturb(params, key, enc_scale=8.0, head_scale=0.3):
  """Scales encoder kernels up and redraws exit heads, so examples and exits disagree."""
  flat, treedef = jax.tree_util.tree_flatten_with_path(params)
  keys = jax.random.split(key, len(flat))
  out = []
  for (path, x), k in zip(flat, keys):
    name = jax.tree_util.keystr(path)
    if "kernel" in name:
      x = jax.random.normal(k, x.shape) * head_scale if "exit_" in name else x * enc_scale
    out.append(x)
  return jax.tree_util.tree_unflatten(treedef, out)


@pytest.fixture(scope="module")
def model():
  # jitted: flax's op-by-op init costs seconds of tiny compiles on CPU
  params = jax.jit(lambda k: perturb(init_params(CFG, k), jax.random.fold_in(k, 1)))(
      jax.random.key(0))
  forward = jax.jit(lambda p, i, m, t: Classifier(CFG).apply({"params": p}, i, m, t)[0])
  return params, forward


def make_inputs(batch, seed, seq=SEQ):
  rng = np.random.RandomState(seed)
  lens = rng.randint(2, seq + 1, batch)
  mask = (np.arange(seq)[None] < lens[:, None]).astype(np.int32)
  ids = rng.randint(1, CFG.vocab_size, (batch, seq)) * mask
  tt = (rng.rand(batch, seq) < 0.5).astype(np.int32) * mask
  return ids, mask, tt


# --- select_exit ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_select_exit_matches_numpy_loop(policy):
  logits = np.random.RandomState(0).randn(6, 64, 4).astype(np.float32) * 2
  seen = set()
  for t in safe_thresholds(logits, policy):
    layer, preds = select_exit(logits, policy, t)
    ref_layer, ref_preds = np_select_exit(logits, policy, t)
    np.testing.assert_array_equal(np.asarray(layer), ref_layer, err_msg=f"{policy} {t}")
    np.testing.assert_array_equal(np.asarray(preds), ref_preds, err_msg=f"{policy} {t}")
    assert np.asarray(layer).dtype == np.int32 and layer.shape == (64,)
    seen.update(np.asarray(layer).tolist())
  assert len(seen) >= 3, f"thresholds only reached layers {seen}"


def test_select_exit_edge_cases():
  logits = np.random.RandomState(1).randn(5, 16, 3).astype(np.float32)
  last = logits[-1].argmax(-1)
  for p in (5, 6, 100):  # patience >= num_exits: nobody can collect enough agreeing layers
    layer, preds = select_exit(logits, "patience", p)
    assert (np.asarray(layer) == 5).all()
    np.testing.assert_array_equal(np.asarray(preds), last)
  same = np.repeat(logits[:1], 5, axis=0)  # identical exits: patience P exits at layer P + 1
  for p in (1, 2, 4):
    assert (np.asarray(select_exit(same, "patience", p)[0]) == p + 1).all()
  assert (np.asarray(select_exit(logits, "entropy", 0.0)[0]) == 5).all()
  assert (np.asarray(select_exit(logits, "entropy", 10.0)[0]) == 1).all()
  layer, preds = select_exit(logits, "confidence", 1e-6)
  assert (np.asarray(layer) == 1).all()
  np.testing.assert_array_equal(np.asarray(preds), logits[0].argmax(-1))
  # jittable with the policy static and a traced threshold
  jitted = jax.jit(select_exit, static_argnames="policy")
  np.testing.assert_array_equal(np.asarray(jitted(logits, "entropy", 0.8)[0]),
                                np.asarray(select_exit(logits, "entropy", 0.8)[0]))


@pytest.mark.parametrize("policy, threshold, match", [
    ("nope", 0.5, r"Unknown exit policy 'nope'; known: \['confidence', 'entropy', 'margin', 'patience'\]"),
    ("patience", 1.5, "patience threshold must be an int >= 1"),
    ("patience", 2.0, "patience threshold must be an int >= 1"),
    ("patience", True, "patience threshold must be an int >= 1"),
    ("patience", 0, "patience threshold must be an int >= 1"),
    ("confidence", 0.0, r"confidence threshold must be a float in \(0, 1\]"),
    ("confidence", 1.5, r"confidence threshold must be a float in \(0, 1\]"),
    ("confidence", "0.5", r"confidence threshold must be a float in \(0, 1\]"),
    ("entropy", -0.1, "entropy threshold must be a finite float >= 0"),
    ("entropy", float("nan"), "entropy threshold must be a finite float >= 0"),
    ("entropy", False, "entropy threshold must be a finite float >= 0"),
])
def test_bad_policy_or_threshold(model, policy, threshold, match):
  logits = np.zeros((3, 2, 2), np.float32)
  with pytest.raises(ValueError, match=match):
    select_exit(logits, policy, threshold)
  ids, mask, _ = make_inputs(2, 0)
  with pytest.raises(ValueError, match=match):
    early_exit_predict(CFG, model[0], ids, mask, None, policy, threshold)


def test_bad_inputs_name_the_call_and_the_batch(model):
  ids, mask, _ = make_inputs(2, 0)
  with pytest.raises(ValueError, match=r"early_exit_predict got an empty batch"):
    early_exit_predict(CFG, model[0], ids[:0], mask[:0], None, "entropy", 0.5)
  with pytest.raises(ValueError, match=r"early_exit_predict: input_ids and attention_mask"):
    early_exit_predict(CFG, model[0], ids, mask[:, :-1], None, "entropy", 0.5)
  from acl_jax.exits import early_exit_batches
  batches = [{"input_ids": ids, "attention_mask": mask},
             {"input_ids": ids[:0], "attention_mask": mask[:0]}]
  with pytest.raises(ValueError, match=r"early_exit_batches \(batch 1\) got an empty batch"):
    early_exit_batches(CFG, model[0], batches, "entropy", 0.5)


def test_one_exit_is_rejected():
  msg = r"early-exit needs a model trained with exits='all' \(this checkpoint has one exit\)"
  with pytest.raises(ValueError, match=msg):
    select_exit(np.zeros((1, 4, 2), np.float32), "entropy", 0.5)
  cfg = CFG.replace(exits="last")
  ids, mask, _ = make_inputs(2, 0)
  with pytest.raises(ValueError, match=msg):
    early_exit_predict(cfg, {}, ids, mask, None, "entropy", 0.5)  # cfg alone decides
  with pytest.raises(ValueError, match=r"\[num_exits, batch, K\]"):
    select_exit(np.zeros((4, 2), np.float32), "entropy", 0.5)


# --- fast path -------------------------------------------------------------------------------

def check_fast_path(cfg, params, inputs, logits, policies, tag="") -> set[int]:
  """The fast path's exit layers and predictions equal `select_exit` on the full forward's
  per-exit `logits`, for each policy at thresholds clear of the observed values; returns the
  layers reached. inputs: (input_ids, attention_mask, token_type_ids or None)."""
  seen = set()
  for policy in policies:
    for t in safe_thresholds(logits, policy, n=3):
      ref_layer, ref_preds = jax.device_get(select_exit(logits, policy, t))
      layer, preds = early_exit_predict(cfg, params, *inputs, policy, t)
      np.testing.assert_array_equal(layer, ref_layer, err_msg=f"{policy} {t} {tag}")
      np.testing.assert_array_equal(preds, ref_preds, err_msg=f"{policy} {t} {tag}")
      seen.update(layer.tolist())
  return seen

@pytest.mark.parametrize("batch,pooling", [
    (1, "cls"), (32, "mean"), *[pytest.param(b, p, marks=pytest.mark.slow)
                                for b, p in ((7, "cls"), (1, "mean"), (7, "mean"), (32, "cls"))]])
def test_fast_path_equals_select_exit(model, batch, pooling):
  params, forward = model
  cfg = CFG.replace(exit_pooling=pooling)
  if pooling != "cls":  # same params, exits read the masked token mean instead of [CLS]
    forward = jax.jit(lambda p, i, m, t: Classifier(cfg).apply({"params": p}, i, m, t)[0])
  layers_seen = set()
  for seed in range(2 if batch > 1 else 6):
    ids, mask, tt = make_inputs(batch, seed + 10 * batch)
    logits = np.asarray(forward(params, ids, mask, tt))
    layers_seen |= check_fast_path(cfg, params, (ids, mask, tt), logits, sorted(POLICIES),
                                   f"b={batch}")
  assert layers_seen == {1, 2, 3, 4}, f"tests only reached layers {layers_seen}"


def test_fast_path_bounded_shapes_and_custom_buckets(model):
  """The layer blocks compile once per (policy, bucket, pool, seq_len), so a sweep compiles a
  bounded number of shapes and a second pass over the same inputs compiles none."""
  params, forward = model
  batch, seqs = 32, (SEQ, 8)
  runs = (("entropy", 0.3), ("entropy", 0.6), ("confidence", 0.8), ("patience", 1),
          ("patience", 2))

  def sweep_inputs(seeds):
    for seq in seqs:
      for seed in seeds:
        ids, mask, tt = make_inputs(batch, 100 + seed, seq)
        # a second seq_len only for entropy: each new shape costs a compile
        for policy, t in runs if seq == SEQ else runs[:2]:
          early_exit_predict(CFG, params, ids, mask, tt, policy, t)
  with helpers.count_traces() as traces:
    sweep_inputs(range(3))
  buckets = fast.default_buckets(batch)
  assert buckets == (1, 2, 4, 8, 16, 24, 32)
  assert fast.default_buckets(7) == (1, 2, 4, 7) and fast.default_buckets(1) == (1,)
  assert fast.default_buckets(128) == (1, 2, 4, 8, 16) + tuple(range(32, 129, 16))
  # entropy ran at both lengths, confidence and patience at one; one pool size (the batch)
  assert traces["block"] <= len(buckets) * (len(seqs) + 2), traces
  with helpers.count_traces() as again:
    sweep_inputs(range(1))
  assert not again, f"traced again: {again}"

  # custom buckets: same answers, only those sizes compiled; the largest is the block, the
  # most rows one layer call takes, and may be smaller than the pool
  ids, mask, tt = make_inputs(20, 7)
  logits = np.asarray(forward(params, ids, mask, tt))
  with helpers.count_traces() as traces:
    for buckets in ((24, 6), (4, 8)):
      for t in safe_thresholds(logits, "entropy", n=3)[:3]:
        ref = jax.device_get(select_exit(logits, "entropy", t))
        stats = {}
        got = early_exit_predict(CFG, params, ids, mask, tt, "entropy", t, buckets=buckets,
                                 stats=stats)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
        # stats: rows run per layer, against what the real examples needed
        assert stats["example_layers"] == int(ref[0].sum())
        # full blocks of the live rows, then the smallest bucket >= the rest
        want, live, block = 0, 20, max(buckets)
        for m in range(1, 5):
          want += live // block * block + (min(b for b in buckets if b >= live % block)
                                           if live % block else 0)
          live = int((ref[0] > m).sum())
          if live == 0:
            break
        assert stats["row_layers"] == want
  assert traces["block"] <= len({4, 6, 8, 24}), traces  # entropy, one pool, one seq_len


def test_pooled_batches_equal_each_batch_alone(model):
  """early_exit_batches pools rows by sequence length across batches (with their padding
  rows) and runs the later layers in full blocks: each batch's answer is its own.

  Passes with XLA_FLAGS unset, --xla_cpu_experimental_ynn_fusion_type= (YNN off) and
  --xla_cpu_experimental_ynn_fusion_type=+eltwise,+reduce."""
  params, forward = model
  batches = []
  for i, (b, seq) in enumerate([(8, SEQ), (8, 8), (8, SEQ), (5, SEQ), (8, 8)]):
    ids, mask, tt = make_inputs(b, 300 + i, seq)
    batches.append(dict(input_ids=ids, attention_mask=mask, token_type_ids=None if i == 1 else tt))
  all_logits = [np.asarray(forward(params, b["input_ids"], b["attention_mask"],
                                   b["token_type_ids"])) for b in batches]
  thresholds = safe_thresholds(np.concatenate(all_logits, 1), "entropy", n=3)
  for policy, t in [("entropy", thresholds[1])]:  # patience's pooled state: the test above
    stats = {}
    got = fast.early_exit_batches(CFG, params, batches, policy, t, max_pool_rows=16,
                                  stats=stats, with_logits=True)
    assert len(got) == len(batches)
    for b, lg, (layer, preds, logits) in zip(batches, all_logits, got):
      ref_layer, ref_preds = jax.device_get(select_exit(lg, policy, t))
      np.testing.assert_array_equal(layer, ref_layer)
      np.testing.assert_array_equal(preds, ref_preds)
      alone = early_exit_predict(CFG, params, b["input_ids"], b["attention_mask"],
                                 b["token_type_ids"], policy, t, with_logits=True)
      # the same layer arithmetic on the same rows, in calls of another row count (other
      # matmul blocking): summation-order round-off of the hidden-size (32) sums, scaled to
      # the logits' magnitude (tests/numerics.py)
      numerics.assert_trees_close_f32(logits, alone[2], CFG.hidden_size)
      numerics.assert_trees_close_f32(logits, lg[layer - 1, np.arange(len(layer))],
                                      CFG.hidden_size)
    assert stats["example_layers"] == sum(int(g[0].sum()) for g in got)
    # blocks of 8 rows (the largest batch); pools of 16 and 5 rows of length 12 and one of 16
    # of length 8: each pool's last block per layer runs at most 7 copies, over 4 layers
    assert stats["example_layers"] <= stats["row_layers"] <= stats["example_layers"] + 3 * 4 * 7
  assert fast.pool_size(5, 8, 1024) == 8 and fast.pool_size(17, 8, 1024) == 32
  assert fast.pool_size(1000, 32, 1024) == 1024 and fast.pool_size(100, 32, 80) == 96


# --- sweep, table and plot -------------------------------------------------------------------

def test_sweep_and_table(model, tmp_path):
  params, _ = model
  batches = []
  for i in range(2):
    ids, mask, tt = make_inputs(8, 200 + i)
    example_mask = np.ones(8, np.float32)
    if i == 1:
      example_mask[5:] = 0  # padding rows of the last batch
    batches.append(dict(input_ids=ids, attention_mask=mask, token_type_ids=tt,
                        labels=np.random.RandomState(i).randint(0, 3, 8),
                        example_mask=example_mask))
  from acl_jax.exits.sweep import default_full_forward
  full = default_full_forward(CFG)
  seen = []

  def full_forward(p, x):
    seen.append(all(isinstance(v, jax.Array) for v in jax.tree.leaves(p)))
    return full(p, x)
  host_params = jax.device_get(params)  # as eval.py restores them
  rows = sweep(CFG, host_params, batches, None, "entropy", [0.2, 0.8],
               lambda p, y: {"accuracy": float(np.mean(p == y))}, full_forward_fn=full_forward,
               repeats=2)
  assert len(rows) == 2
  # Timed passes get device-resident params: no per-call copy of the weights.
  assert seen and all(seen)
  keys = {"policy", "threshold", "metric", "full_metric", "mean_layers", "layer_speedup",
          "row_speedup", "time_fast_s", "time_full_s", "speedup", "agreement", "num_examples", "num_layers",
          "batch_size", "metrics"}
  for r in rows:
    assert keys <= set(r)
    assert r["num_examples"] == 13 and r["num_layers"] == 4 and r["batch_size"] == 8
    assert 1 <= r["mean_layers"] <= 4 and r["speedup"] >= 0 and r["time_fast_s"] > 0
    assert r["layer_speedup"] == pytest.approx(4 / r["mean_layers"])
    assert 1 <= r["row_speedup"] <= 4  # padded rows count, so it can only be lower
    assert r["agreement"] == 1.0 and 0 <= r["metric"] <= 1
  assert rows[0]["mean_layers"] >= rows[1]["mean_layers"]  # a looser rule exits earlier

  md, js = write_table(rows, str(tmp_path / "jt" / "exits_entropy.md"))
  assert js.endswith("exits_entropy.json") and os.path.isfile(md)
  table = open(md).read()
  assert "measured speed-up" in table and table.count("\n| ") == 3
  assert table.startswith("Early exit: jt, policy entropy, metric accuracy")
  data = json.load(open(js))
  assert data["label"] == "jt" and data["policy"] == "entropy" and len(data["rows"]) == 2


def test_plot_script_writes_png(tmp_path):
  paths = []
  for i, name in enumerate(("JT", "ACL-CL")):
    rows = [dict(policy="entropy", threshold=t, metric=0.8 + 0.02 * i - 0.1 * t,
                 speedup=1 + t, layer_speedup=1 + 2 * t) for t in (0.1, 0.3, 0.6)]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"label": name, "rows": rows} if i == 0 else rows))
    paths.append(str(path))
  out = tmp_path / "plots" / "qs.png"
  proc = run_py(["-m", "scripts.plot_quality_speed", *paths,
                 "--labels", "JT", "ACL-CL", "--out", str(out)], timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
