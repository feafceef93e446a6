"""Subprocess entry points for tests that need a fresh JAX runtime.

  python -m tests.workers device_invariance MODEL_DIR NUM_DEVICES OUT.npz [TAG,TAG...]
  python -m tests.workers golden_runs MODEL_DIR ROOT OUT.json [TAG,TAG...]
  python -m tests.workers distributed MODEL_DIR WORKDIR PORT PID OUT.npz
  python -m tests.workers distributed_sigterm MODEL_DIR WORKDIR PORT PID OUT.npz [STEP]
"""
import sys

import numpy as np


# The objectives whose step must not depend on the device count, each with every loss that
# pairs examples over the gathered global batch: (config preset, overrides, multi-exit).
INVARIANT_OBJECTIVES = {
    "ce": ("runlocal", {}, False),
    "scl": ("runlocal,scl", {"loss.contrastive_global": True}, False),
    # ACL-Grad: two grads, pmean, lax.cond; the angle over all params and in the "top" mode.
    "acl": ("runlocal,acl", {"loss.contrastive_global": True}, False),
    "acl_top": ("runlocal,acl", {"loss.contrastive_global": True, "loss.angle_params": "top"},
                False),
    # Gated ACL-CL: three grads, the lower exits' cross-layer terms over the gathered batch.
    "acl_cl": ("runlocal,acl_cl", {"loss.contrastive_global": True}, True),
    "gloss": ("runlocal,gloss", {"loss.gloss_global": True}, False),
    # The README's "Adding a loss" example, gated, alone and as ACL-CL's final-exit term.
    "proto": ("runlocal", {"loss.name": "proto", "loss.lam": 0.5, "loss.gate": True,
                           "loss.contrastive_global": True}, False),
    "proto_cl": ("runlocal,acl_cl", {"loss.name": "proto", "loss.lam": 0.5,
                                     "loss.contrastive_global": True}, True),
    # A loss with state between steps: the EMA centres move by the global batch.
    "center": ("runlocal", {"loss.name": "center", "loss.gate": True}, False),
    # The other multi-exit strategies (ACL-CL above) and the metric-learning ablations.
    "jt": ("runlocal,jt", {}, True),
    # 2ST's stage 1 is 2 of the 10 planned steps, so the third step trains the lower exits
    # on a frozen backbone.
    "2st": ("runlocal,2st", {"multi_exit.stage1_fraction": 0.2}, True),
    "alt": ("runlocal,alt", {}, True),
    "kd": ("runlocal,kd", {}, True),
    "triplet": ("runlocal,triplet", {"loss.contrastive_global": True}, False),
    "cosine": ("runlocal,cosine", {"loss.contrastive_global": True}, False),
}
DROPOUT = 0.1  # the packaged MiniLM checkpoint's rate (hidden and attention)


def invariance_batches(num_steps=3, batch=16, seq=16, seed=0):
  """Global batches of distinct rows with uneven lengths, 3 classes, shuffled dataset ids."""
  rng = np.random.default_rng(seed)
  ids = rng.permutation(10_000)[:num_steps * batch].astype(np.int32)
  out = []
  for s in range(num_steps):
    tokens = rng.integers(1000, 2000, (batch, seq)).astype(np.int32)
    lengths = rng.integers(4, seq + 1, batch)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    out.append({"input_ids": tokens * mask, "attention_mask": mask,
                "token_type_ids": np.zeros_like(tokens),
                "labels": rng.integers(0, 3, batch).astype(np.int32),
                "example_mask": np.ones(batch, np.float32),
                "example_id": ids[s * batch:(s + 1) * batch]})
  return out


def device_invariance(model_dir, num_devices, out, tags=",".join(INVARIANT_OBJECTIVES)):
  """K SGD steps of the named INVARIANT_OBJECTIVES, dropout on, on `num_devices` devices.

  Plain SGD keeps the final params a linear function of the gradients, so the comparison
  across device counts measures the step's float32 reductions and nothing that Adam's
  1/sqrt(v) would magnify.
  """
  import chex
  chex.set_n_cpu_devices(int(num_devices))
  import jax
  import optax
  from acl_jax.models import hf
  from acl_jax.train import setup as setup_lib, step as step_lib
  from tests.helpers import tiny_config
  assert jax.device_count() == int(num_devices), jax.devices()
  mesh = step_lib.make_mesh()
  batches = invariance_batches()
  results = {}
  for tag in tags.split(","):
    arg, overrides, multi = INVARIANT_OBJECTIVES[tag]
    cfg = tiny_config(model_dir, arg, **overrides)
    model, params, _ = hf.load_pretrained(model_dir, 3, "all" if multi else "last",
                                          with_tokenizer=False, hidden_dropout=DROPOUT,
                                          attention_dropout=DROPOUT)
    if tag == "ce":  # the first batch's loss without dropout, to show that dropout is on
      logits, _ = jax.jit(model.apply)({"params": params}, batches[0]["input_ids"],
                                       batches[0]["attention_mask"])  # not op by op
      results["ce/loss_without_dropout"] = np.asarray(
          optax.softmax_cross_entropy_with_integer_labels(logits[-1], batches[0]["labels"]).mean())
    tr = setup_lib.make_trainer(cfg, model, params, mesh, num_labels=3, total_steps=10,
                                tx=optax.sgd(0.5))
    state, fn = tr.state, tr.train_step
    logs = []
    for b in batches:
      state, m = fn(state, step_lib.shard_batch(b, mesh))
      logs.append(jax.device_get(m))
    for k in ("loss", "grad_norm", "gate/gate", "gate/angle"):
      if k in logs[0]:
        results[f"{tag}/{k}"] = np.array([float(m[k]) for m in logs])
    flat = jax.tree_util.tree_flatten_with_path(jax.device_get(state.params))[0]
    for path, leaf in flat:
      results[f"{tag}/params/{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
  np.savez(out, **results)


# The runs whose behaviour a restructuring of the trainer must keep (quickstart runlocal on the
# tiny model, dropout at the checkpoint's rate): the config-file word after "runlocal," and
# extra overrides.
GOLDEN_RUNS = {
    "ce": ("", {}),
    "scl": ("scl", {}),
    "acl_all": ("acl", {}),
    "acl_top": ("acl", {"loss.angle_params": "top"}),
    "acl_cl": ("acl_cl", {}),
    "jt": ("jt", {}),
    "2st": ("2st", {}),
    "alt": ("alt", {}),
    "kd": ("kd", {}),
    "gloss": ("gloss", {}),
    "triplet": ("triplet", {}),
}


def golden_runs(model_dir, root, out, tags=",".join(GOLDEN_RUNS)):
  """Trains each named GOLDEN_RUNS entry with the real loop; writes per-step train losses,
  the final params' sha256 and per-leaf float64 sums and norms (a summary that survives a
  change of CPU, where the hash does not) to the JSON file `out`."""
  import json
  import jax
  from acl_jax.train import checkpoint as ckpt_lib
  from acl_jax.train import loop, setup as setup_lib
  from acl_jax import cpuinfo
  from tests.helpers import tiny_config
  rec = {"cpu_model": cpuinfo.describe(), "jax": jax.__version__, "runs": {}}
  for tag in tags.split(","):
    word, overrides = GOLDEN_RUNS[tag]
    # The record pins the one-example-a-row path (length buckets); packing has its own tests.
    cfg = tiny_config(model_dir, "runlocal" + ("," + word if word else ""),
                      **{"model.dropout": DROPOUT, "task.packing": False, **overrides})
    wd = f"{root}/{tag}"
    results = loop.train_and_evaluate(cfg, wd)
    with open(f"{wd}/metrics.jsonl") as f:
      train = [json.loads(line) for line in f]
    losses = [r["loss"] for r in train if r["kind"] == "train"]
    ckpts = ckpt_lib.Checkpoints(wd)
    setup_params = setup_lib.build(cfg).params  # the restore target: shapes and shardings
    params, _ = ckpts.restore_params(setup_params)
    ckpts.close()
    assert loop.params_fingerprint(params) == results["train"]["params_sha256"]
    leaves = jax.tree_util.tree_flatten_with_path(jax.device_get(params))[0]
    rec["runs"][tag] = {
        "losses": losses,
        "params_sha256": results["train"]["params_sha256"],
        "leaf_size": {jax.tree_util.keystr(k): int(np.size(v)) for k, v in leaves},
        "leaf_sum": {jax.tree_util.keystr(k): float(np.sum(v, dtype=np.float64)) for k, v in leaves},
        "leaf_norm": {jax.tree_util.keystr(k): float(np.linalg.norm(np.ravel(v).astype(np.float64)))
                      for k, v in leaves}}
  with open(out, "w") as f:
    json.dump(rec, f, indent=1, sort_keys=True)


def distributed(model_dir, workdir, port, pid, out):
  """One of two processes of a jax.distributed run of the real training loop."""
  import jax
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2,
                             process_id=int(pid))
  from acl_jax.train import loop
  from tests.helpers import tiny_config
  assert jax.process_count() == 2 and jax.device_count() == 2
  results = loop.train_and_evaluate(tiny_config(model_dir), workdir)
  np.savez(out, fingerprint=results["train"]["params_sha256"],
           step=results["train"]["final_step"], dev=results["dev"]["accuracy"])


def distributed_sigterm(model_dir, workdir, port, pid, out, sigterm_at="0"):
  """`distributed`, with process 1 sending itself SIGTERM during step `sigterm_at` (0: never);
  OUT.npz gets the step each process stopped at (errors.Preempted) or finished."""
  import jax
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2,
                             process_id=int(pid))
  from acl_jax import errors
  from acl_jax.train import loop
  from tests.fault_workers import after_each_step, sigterm_self
  from tests.helpers import tiny_config
  after_each_step(lambda state, m: sigterm_self(m) if int(pid) == 1 and int(state.step) == int(
      sigterm_at) else m)
  try:
    # 30 steps: room for the hosts to agree on a step before the run ends.
    results = loop.train_and_evaluate(tiny_config(model_dir, num_steps=30, eval_every=10),
                                      workdir)
    np.savez(out, stopped=False, step=results["train"]["final_step"],
             fingerprint=results["train"]["params_sha256"])
  except errors.Preempted as e:
    np.savez(out, stopped=True, step=int(str(e).split(" at step ")[1].split()[0]),
             fingerprint="")


def gate_consistency(out):
  """2 devices whose local CE/SCL gradients would gate differently still branch alike."""
  import jax
  from tests import acl_utils
  assert jax.device_count() == 2
  model, params, batches = acl_utils.tiny_setup(num_batches=12, batch=8)
  # Local decisions: each half batch on its own (1 device).
  mesh1 = acl_utils.step_lib.make_mesh(jax.devices()[:1])
  mesh2 = acl_utils.step_lib.make_mesh(jax.devices())
  chosen, local = None, None
  for b in batches:
    halves = [{k: v[:4] for k, v in b.items()}, {k: v[4:] for k, v in b.items()}]
    g = [acl_utils.one_step(model, params, h, mesh1, gate=True)[1]["gate/gate"] for h in halves]
    if g[0] != g[1]:
      chosen, local = b, g
      break
  assert chosen is not None, "no batch whose halves gate differently"
  state, m = acl_utils.one_step(model, params, chosen, mesh2, gate=True)
  shards = [[np.asarray(s.data) for s in x.addressable_shards] for x in jax.tree.leaves(state.params)]
  same = all(np.array_equal(a[0], a[1]) for a in shards)
  np.savez(out, local=np.array(local), gate=m["gate/gate"], same=same)


if __name__ == "__main__":
  WORKERS = {"device_invariance": device_invariance, "golden_runs": golden_runs,
             "distributed": distributed, "distributed_sigterm": distributed_sigterm,
             "gate_consistency": gate_consistency}
  WORKERS[sys.argv[1]](*sys.argv[2:])
