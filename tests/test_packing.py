"""Packed sequences are exact: the packer's invariants, and packed batches give the unpacked
batch's outputs at every exit, and its losses and gradients under every objective, with
dropout off and on, for single sentences and pairs, [CLS] and mean pooling, on one and on two
devices (the per-device split emulated by a named `vmap`, which has `shard_map`'s semantics
for arrays split along axis 0)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from acl_jax import losses
from acl_jax.data import batching
from acl_jax.models.bert import Classifier, Packed, apply_batch, init_params, is_packed
from acl_jax.models.config import EncoderConfig
from acl_jax.train import objectives, strategies
from acl_jax.train import step as step_lib
from acl_jax.train.step import AXIS
from configs import common
from tests import numerics

SEQ = 32
KEY = jax.random.key(7)
VOCAB = 100


def _cfg(**kw):
  base = dict(vocab_size=VOCAB, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
              max_position_embeddings=64, num_labels=3, exits="all", hidden_dropout=0.0,
              attention_dropout=0.0)
  return EncoderConfig(**{**base, **kw})


def _cols(n=16, pair=False, seed=0, max_len=SEQ):
  """n examples of lengths 2..max_len: [CLS]=2, tokens, [SEP]=3; a pair's second segment has
  token type 1 (after the first [SEP])."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(2, max_len + 1, n)
  ids, types = [], []
  for m in lengths:
    x = rng.integers(5, VOCAB, m)
    x[0], x[-1] = 2, 3
    t = np.zeros(m, np.int32)
    if pair and m >= 4:
      cut = int(rng.integers(2, m - 1))
      x[cut - 1] = 3
      t[cut:] = 1
    ids.append(x)
    types.append(t)
  return {"input_ids": np.concatenate(ids).astype(np.int32),
          "token_type_ids": np.concatenate(types).astype(np.int32),
          "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
          "length": lengths.astype(np.int64), "label": rng.integers(0, 3, n).astype(np.int64)}


def _batches(cols, indices, shards, pad_id=0):
  """(unpacked, packed) batches of the same examples, with global example ids."""
  unpacked = batching.make_batch(cols, indices, SEQ, pad_id)
  packed = batching.Packing(SEQ, shards, num_buckets=len(indices) // shards).batch(
      cols, indices, pad_id=pad_id)
  for b in (unpacked, packed):
    b["example_id"] = 1000 + b["example_id"]
  return unpacked, packed


def _split(batch, shards):
  """Every array [D * X, ...] -> [D, X, ...]: device d's block, as shard_map's P("data")."""
  return {k: np.asarray(v).reshape(shards, -1, *np.shape(v)[1:]) for k, v in batch.items()}


def _device_map(fn, in_axes, shards):
  """`fn` per device over the "data" axis; in_axes 0 marks the [D, X, ...] split inputs.

  Two or more devices are a named vmap (shard_map's semantics for blocks of axis 0, on one
  CPU device); one device is `jax.shard_map` on a one-device mesh, as the train step runs it
  (a vmap-batched threefry loop does not linearize, so anything that hashes with threefry
  under a gradient runs there).
  """
  if shards > 1:
    return jax.vmap(fn, in_axes=in_axes, axis_name=AXIS)
  mesh = step_lib.make_mesh(jax.devices()[:1])

  def one(*args):
    args = [a if ax is None else jax.tree.map(lambda x: x[0], a) for a, ax in zip(args, in_axes)]
    return jax.tree.map(lambda x: x[None], fn(*args))
  return jax.shard_map(one, mesh=mesh, in_specs=tuple(P() if ax is None else P(AXIS)
                                                      for ax in in_axes),
                       out_specs=P(AXIS))


def _join(x):
  """[D, exits, X, ...] per-device outputs -> [exits, D * X, ...]."""
  return np.concatenate(list(np.asarray(x)), axis=1)


def _real_tokens(cols, indices):
  return int(cols["length"][indices[indices >= 0]].sum())


def _outputs(model, train):
  def outputs(params, b):
    rngs = {"dropout": KEY} if train else None
    logits, aux = apply_batch(model, params, b, train=train, rngs=rngs,
                              example_ids=b["example_id"])
    return logits, aux["feats"], aux["cls"]
  return outputs


@functools.lru_cache(maxsize=None)
def _forward_fn(model, shards):
  return jax.jit(_device_map(_outputs(model, False), (None, 0), shards))


def _forward(model, params, batch, shards):
  """Eval mode: (logits [exits, N, K], feats [exits, N, d], cls [layers, N, d])."""
  return [_join(o) for o in _forward_fn(model, shards)(params, _split(batch, shards))]


@functools.lru_cache(maxsize=None)
def _vjp_fn(model, train, shards):
  """Jitted per device: ((logits, feats), the device-mean vjp of a cotangent of them).
  Compiled once per batch layout and shared by every objective."""
  outputs = _outputs(model, train)

  def vjp(params, b, ct):
    out, back = jax.vjp(lambda p: outputs(p, b)[:2], params)
    return out, jax.lax.pmean(back(ct)[0], AXIS)
  return jax.jit(_device_map(vjp, (None, 0, 0), shards))


# [CLS] pooling of BERT-family pairs on two devices is in the objective tests below.
@pytest.mark.parametrize("pool,pair,family", [("mean", True, "bert"), ("cls", True, "roberta"),
                                              ("mean", False, "distilbert")])
def test_packed_outputs_equal_unpacked_at_every_exit(pool, pair, family):
  extra = {"roberta": dict(pad_token_id=1), "distilbert": dict(type_vocab_size=0,
                                                                sinusoidal_pos_embds=True)}
  cfg = _cfg(family=family, exit_pooling=pool, head="bert_pooler", **extra.get(family, {}))
  model, params = Classifier(cfg), init_params(cfg, jax.random.key(0))
  cols = _cols(14, pair=pair, seed=1)
  indices = np.concatenate([np.arange(14), [-1, -1]])  # two padding slots, as an eval batch
  unpacked, packed = _batches(cols, indices, 1, cfg.pad_token_id)
  assert packed["input_ids"].shape[0] < len(indices)  # it did pack
  real = indices >= 0
  want = _forward(model, params, unpacked, 1)
  got = _forward(model, params, packed, 1)
  for name, w, g in zip(("logits", "feats", "cls"), want, got):
    assert g.shape == w.shape, name
    numerics.assert_trees_close_f32({name: g[:, real]}, {name: w[:, real]}, n=SEQ)
  # Token types matter here, so a pair's segments reached the model.
  if pair:
    flipped = dict(packed, token_type_ids=1 - packed["token_type_ids"])
    assert numerics.trees_differ_f32(_forward(model, params, flipped, 1)[0][:, real],
                                     want[0][:, real], n=SEQ)


# Config words (configs/common.py presets) of every objective family: single-exit losses,
# gated ACL-Grad (acl, scl_grad; acl_cl gates its final exit), the multi-exit strategies.
OBJECTIVES = ["ce", "scl", "acl_embed", "acl", "scl_grad", "gloss", "triplet", "cosine", "jt",
              "2st", "alt", "kd", "acl_cl"]


def _objective(words, num_exits, last_exit):
  c = common.apply_args(common.base_config(), words)
  me = strategies.multi_exit_from_config(c.multi_exit, range(1, num_exits + 1), total_steps=10)
  return objectives.build_objective(c.loss, num_labels=3, last_exit=last_exit, multi_exit=me)


# The per-example arrays an objective reads; the same in both layouts.
EXAMPLE_KEYS = ("labels", "example_mask", "example_id")


@functools.lru_cache(maxsize=None)
def _objective_fn(words, num_exits, last_exit, shards):
  """(objective, jitted per-device terms and their gradients with respect to the params it
  reads itself, the logits and the exit features), shared by both layouts."""
  objective = _objective(words, num_exits, last_exit)
  names = objective.roles

  def per_device(params, b, logits, feats, step):
    def term(p, lg, f, name):
      terms, _ = objective.terms(p, lg, {"feats": f}, b, jax.random.fold_in(KEY, 1), step)
      return getattr(terms, name)
    vals = {k: jax.lax.pmean(term(params, logits, feats, k), AXIS) for k in names}
    grads = {k: jax.grad(functools.partial(term, name=k), argnums=(0, 1, 2))(params, logits,
                                                                              feats)
             for k in names}
    return vals, grads
  return objective, jax.jit(_device_map(per_device, (None, 0, 0, 0, None), shards))


def _terms_and_grads(model, params, words, batch, shards, train, step):
  """Each loss term and its parameter gradient, averaged over devices as the train step does,
  plus the gated update when the objective has a gate.

  The gradient of term(model(p), p) is taken by the chain rule the way reverse mode takes it:
  the term's gradient with respect to the model's outputs (logits, exit features) and to the
  parameters it reads itself (label embeddings), then the model's vjp of the former. So the
  model's vjp compiles once per layout and the objective once, not once per pair.
  """
  objective, terms_fn = _objective_fn(words, len(model.cfg.exit_layers), model.cfg.num_layers,
                                      shards)
  vjp = _vjp_fn(model, train, shards)
  split = _split(batch, shards)
  shape = (shards, len(model.cfg.exit_layers), len(batch["labels"]) // shards)
  zeros = (np.zeros(shape + (model.cfg.num_labels,), np.float32),
           np.zeros(shape + (model.cfg.hidden_size,), np.float32))
  (logits, feats), _ = vjp(params, split, zeros)  # the outputs, from the same compiled vjp
  vals, grads = terms_fn(params, {k: split[k] for k in EXAMPLE_KEYS}, logits, feats, step)
  out = {}
  for k, (g_params, g_logits, g_feats) in grads.items():
    direct = jax.tree.map(lambda g: np.asarray(g).mean(0), g_params)  # the pmean
    out[k] = jax.tree.map(lambda a, b: np.asarray(a)[0] + b,
                          vjp(params, split, (g_logits, g_feats))[1], direct)
  if objective.gate is not None:
    out["gated"], _ = losses.angle_gate(out["main"], out["aux"], objective.aux_weight,
                                        threshold_deg=objective.gate.threshold_deg,
                                        ce_weight=objective.main_weight)
  vals = {k: float(np.asarray(v)[0]) for k, v in vals.items()}  # the same on every device
  return vals, out, (_join(logits), _join(feats))


def _assert_grads_close(got, want, n):
  """Each term's gradient leaf within float32 round-off of a length-n reduction, measured
  against the largest gradient element of the term: back-propagated round-off is at the scale
  of the cotangents, and a leaf whose gradient is small by cancellation (the embeddings'
  LayerNorm under a contrastive loss) carries as much absolute error as the large ones."""
  rtol = numerics.reassociation_rtol(n)
  for term, g in got.items():
    scale = max(float(np.abs(x).max()) for x in jax.tree.leaves(want[term]))
    for (path, a), d in zip(jax.tree_util.tree_leaves_with_path(g), jax.tree.leaves(want[term])):
      np.testing.assert_allclose(np.asarray(a), np.asarray(d), rtol=rtol, atol=rtol * scale,
                                 err_msg=f"{term} {jax.tree_util.keystr(path)}")


def _diverse_params(cfg):
  """Random params whose word embeddings dominate the embedding sum (std 1, not 0.02), so
  examples get distinct features. At the 0.02 init every example's feature is nearly the same
  vector, and a contrastive loss's gradient is a near-total cancellation of its pair terms, so
  its round-off is far above the size of the gradient itself."""
  params = init_params(cfg, jax.random.key(3))
  emb = params["encoder"]["embeddings"]["word_embeddings"]
  emb["embedding"] = emb["embedding"] * 50.0
  return params


@functools.lru_cache(maxsize=None)
def _setup(dropout, shards):
  cfg = _cfg(hidden_dropout=dropout, attention_dropout=dropout)
  cols = _cols(16, pair=True, seed=4)
  indices = np.random.default_rng(5).permutation(16)
  return Classifier(cfg), _diverse_params(cfg), cols, indices, _batches(cols, indices, shards)


# Dropout on: ACL-Grad (CE and ACL-Embed gradients, the gate) of the multi-exit model, whose
# every exit reads a dropped-out layer, and G-Loss. Dropout and G-Loss's split hash with
# threefry, so they run on one device (see `_device_map`); G-Loss builds one graph per device,
# of the same examples packed or not, and reads the model only through the outputs every
# other objective checks with dropout off.
@pytest.mark.parametrize("dropout,words,shards",
                         [(0.0, w, 2) for w in OBJECTIVES if w != "gloss"]
                         + [(0.1, "acl", 1), (0.1, "gloss", 1)])
def test_packed_losses_and_gradients_equal_unpacked(dropout, words, shards):
  """Pairs, every objective; dropout off, and on (masks keyed by example)."""
  model, params, cols, indices, (unpacked, packed) = _setup(dropout, shards)
  step = jnp.int32(7)  # 2ST in stage 2, ALT on an all-exit step
  train = dropout > 0
  want = _terms_and_grads(model, params, words, unpacked, shards, train, step)
  got = _terms_and_grads(model, params, words, packed, shards, train, step)
  n = _real_tokens(cols, indices)
  numerics.assert_trees_close_f32(got[2], want[2], n=SEQ)  # logits, features
  numerics.assert_trees_close_f32(got[0], want[0], n=n)  # loss terms
  _assert_grads_close(got[1], want[1], n)
  assert all(np.isfinite(v) and v != 0 for v in want[0].values()), want[0]
  if train:  # dropout is on, keyed by example: other example ids draw other masks
    shifted = dict(packed, example_id=packed["example_id"] + 1)
    other = _terms_and_grads(model, params, words, shifted, shards, train, step)
    assert numerics.trees_differ_f32(other[2], want[2], n=SEQ)


# ----------------------------------------------------------------------------------------------
# The packer.


def _unpack(batch, shards, seq_len):
  """Each example slot's tokens and token types, read back from a packed batch."""
  rows = batch["input_ids"].shape[0] // shards
  per = len(batch["example_id"]) // shards
  out = []
  for i in range(len(batch["example_id"])):
    s, slot = divmod(i, per)
    r, o = divmod(int(batch["cls_index"][i]), seq_len)
    gr = s * rows + r
    mine = batch["token_example"][gr] == slot
    span = np.flatnonzero(mine)
    out.append((batch["input_ids"][gr, span], batch["token_type_ids"][gr, span], gr, o, span))
  return out


@pytest.mark.parametrize("shards,n,max_len", [(1, 32, 64), (2, 32, 64), (4, 24, 16),
                                              (2, 10, 3)])
def test_packer_invariants(shards, n, max_len):
  cols = _cols(n + 7, pair=True, seed=n, max_len=max_len)
  indices = np.random.default_rng(shards).permutation(n + 7)[:n]
  indices[-1] = -1  # a padding slot
  packing = batching.Packing(max_len, shards, num_buckets=8)
  batch = packing.batch(cols, indices)
  per, rows = n // shards, batch["input_ids"].shape[0] // shards
  buckets = packing.buckets(n)
  assert rows in buckets and batch["input_ids"].shape[1] == max_len
  # The fewest rows first-fit-decreasing needs on the fullest shard, rounded up to a bucket.
  need = max(batching.first_fit_decreasing(
      cols["length"][b[b >= 0]], max_len)[0].max() + 1 for b in indices.reshape(shards, per))
  assert rows == min(b for b in buckets if b >= need)
  np.testing.assert_array_equal(batch["example_id"], indices)
  np.testing.assert_array_equal(batch["example_mask"], (indices >= 0).astype(np.float32))
  real_tokens = 0
  for i, (ids, types, gr, o, span) in enumerate(_unpack(batch, shards, max_len)):
    s = i // per
    if indices[i] < 0:
      assert len(span) == 0 and batch["labels"][i] == 0
      continue
    assert s * rows <= gr < (s + 1) * rows  # its own device's rows
    k, m = indices[i], cols["length"][indices[i]]
    a = cols["offsets"][k]
    # Exactly its tokens, contiguous from its [CLS], positions from 0, its own token types.
    np.testing.assert_array_equal(span, np.arange(o, o + m))
    np.testing.assert_array_equal(ids, cols["input_ids"][a:a + m])
    np.testing.assert_array_equal(types, cols["token_type_ids"][a:a + m])
    np.testing.assert_array_equal(batch["position_ids"][gr, span], np.arange(m))
    assert len(set(batch["segment_ids"][gr, span])) == 1 and batch["segment_ids"][gr, o] > 0
    assert batch["labels"][i] == cols["label"][k]
    real_tokens += m
  # Every token is an example's or padding; segments tell the examples of a row apart.
  seg, tok_ex = batch["segment_ids"], batch["token_example"]
  assert (seg > 0).sum() == real_tokens == ((tok_ex < per).sum())
  assert ((seg == 0) == (tok_ex == per)).all() and (batch["input_ids"][seg == 0] == 0).all()
  for r in range(seg.shape[0]):
    pairs = {(a, b) for a, b in zip(seg[r], tok_ex[r]) if a > 0}
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
  assert is_packed(batch) and Packed.from_batch(batch).num_examples == n


def test_first_fit_decreasing_and_buckets():
  lengths = np.array([5, 8, 3, 3, 1, 8])
  row, offset = batching.first_fit_decreasing(lengths, 8)
  # 8 | 8 | 5 3 | 3 1
  assert row.tolist() == [2, 0, 2, 3, 3, 1] and offset.tolist() == [0, 0, 5, 0, 3, 0]
  for seed in range(20):
    lengths = np.random.default_rng(seed).integers(1, 17, 40)
    row, offset = batching.first_fit_decreasing(lengths, 16)
    fill = np.bincount(row, weights=lengths)
    assert (offset + lengths <= 16).all() and fill.max() <= 16
    # No two bins could have been one (first fit never leaves that).
    assert (np.sort(fill)[0] + np.sort(fill)[1] > 16) or len(fill) == 1
  assert batching.row_buckets(32, 8) == (4, 8, 12, 16, 20, 24, 28, 32)
  assert batching.row_buckets(5, 8) == (1, 2, 3, 4, 5)
  with pytest.raises(ValueError, match="Item sizes must be in"):
    batching.first_fit_decreasing(np.array([17]), 16)
  with pytest.raises(ValueError, match="not divisible by the 3 devices"):
    batching.Packing(16, 3).buckets(32)
  with pytest.raises(ValueError, match="does not fit seq_len"):
    batching.make_packed_batch(_cols(4, max_len=32), np.arange(4), 8, 4)


def test_packed_train_and_eval_streams():
  cols = _cols(103, seed=9)
  packing = batching.Packing(SEQ, 2, num_buckets=4)
  steps = list(zip(range(12), batching.packed_train_batches(cols, 16, 3, 0, packing)))
  per_epoch = batching.num_train_batches(103, 16)
  # Uniform batches from the epoch's permutation, every example at most once per epoch.
  epoch0 = np.concatenate([b["example_id"] for _, (_, b) in steps[:per_epoch]])
  assert len(set(epoch0)) == len(epoch0) == per_epoch * 16
  np.testing.assert_array_equal(epoch0, np.concatenate(batching.random_plan(103, 16, 3, 0)))
  # Resume at step 8 yields the batches of the uninterrupted stream.
  resumed = batching.packed_train_batches(cols, 16, 3, 8, packing)
  for (_, (s, want)), (s2, got) in zip(steps[8:], resumed):
    assert s == s2
    for k in want:
      np.testing.assert_array_equal(got[k], want[k])
  # Two processes: each gets its slice of the examples in rows of the common count.
  halves = [next(batching.packed_train_batches(cols, 16, 3, 5, packing, p, 2)) for p in (0, 1)]
  full = steps[5][1][1]
  for k in full:
    np.testing.assert_array_equal(np.concatenate([h[1][k] for h in halves]), full[k])
  # Eval: every example exactly once, padding slots at the end.
  index = np.concatenate([b["example_id"] for b in batching.packed_eval_batches(cols, 24, packing)])
  assert len(index) == 5 * 24 and (index[103:] == -1).all()
  np.testing.assert_array_equal(index[:103], np.arange(103))


TWO_DEVICES = r"""
import chex
chex.set_n_cpu_devices(2)
import jax
import numpy as np
from acl_jax.data import batching
from acl_jax.models.bert import PACKED_KEYS, Classifier, apply_batch, init_params
from acl_jax.train import step as step_lib
from tests import numerics, test_packing as T

cfg = T._cfg(exit_pooling="mean")
model, params = Classifier(cfg), init_params(cfg, jax.random.key(0))
cols = T._cols(16, pair=True, seed=3)
idx = np.concatenate([np.arange(14), [-1, -1]])  # device 1 holds the two padding slots
mesh = step_lib.make_mesh()
assert mesh.size == 2, mesh
packed = batching.Packing(T.SEQ, 2).batch(cols, idx)
inputs = {k: packed[k] for k in ("input_ids", "token_type_ids") + PACKED_KEYS}
step = step_lib.make_eval_step(model, mesh)
logits, feats = step(step_lib.replicate(params, mesh), step_lib.shard_batch(inputs, mesh))
want_logits, aux = apply_batch(model, params, batching.make_batch(cols, idx, T.SEQ))
real = idx >= 0
numerics.assert_trees_close_f32(
    {"logits": np.asarray(logits)[:, real], "feats": np.asarray(feats)[:, real]},
    {"logits": np.asarray(want_logits)[:, real], "feats": np.asarray(aux["feats"])[:, real]},
    n=T.SEQ)
print("OK", packed["input_ids"].shape)
"""


@pytest.mark.slow
def test_packed_eval_step_on_two_devices():
  """`shard_map` with P("data") on every array of a packed batch: each of two devices runs its
  own rows and returns its own examples, in the order of the unpacked batch. (A process of
  its own, so slow; the default tests emulate the device split with a named vmap.)"""
  from tests import helpers  # pylint: disable=import-outside-toplevel
  p = helpers.run_py(["-c", TWO_DEVICES], timeout=300)
  assert p.returncode == 0 and "OK" in p.stdout, p.stderr[-3000:]
