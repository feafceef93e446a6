"""Subprocess entry points for tests that need a fresh JAX runtime.

  python -m tests.workers data_parallel MODEL_DIR OUT.npz   (run with 4 fake CPU devices)
  python -m tests.workers distributed MODEL_DIR WORKDIR PORT PID OUT.npz
"""
import sys

import numpy as np


def data_parallel(model_dir, out):
  """Same global batch, same init: the step on meshes of 1 and 4 devices."""
  import jax
  from acl_jax.models import hf
  from acl_jax.train import objectives, optim, step as step_lib
  from acl_jax.train.state import TrainState
  from tests.helpers import tiny_config
  assert jax.device_count() == 4, jax.devices()
  cfg = tiny_config(model_dir)
  model, params, _ = hf.load_pretrained(model_dir, 2, with_tokenizer=False)
  rng = np.random.default_rng(0)
  batches = []
  for _ in range(3):
    ids = rng.integers(1000, 2000, (8, 16)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[::3, 10:] = 0
    batches.append({"input_ids": ids, "attention_mask": mask,
                    "token_type_ids": np.zeros_like(ids), "labels": rng.integers(0, 2, 8).astype(np.int32),
                    "example_mask": np.ones(8, np.float32)})
  gloss = tiny_config(model_dir, "runlocal,gloss").loss
  gloss.gloss_global = True  # one graph over the gathered global batch: device-count free
  # ACL's gated step (two grads, pmean, lax.cond; all-params and split "top" modes), with its
  # contrastive term over the gathered global batch (contrastive_global): device-count free.
  acl = tiny_config(model_dir, "runlocal,acl", **{"loss.contrastive_global": True}).loss
  acl_top = tiny_config(model_dir, "runlocal,acl", **{"loss.contrastive_global": True,
                                                      "loss.angle_params": "top"}).loss
  # Gated ACL-CL on every exit: three gradients, the lower exits' cross-layer terms over the
  # gathered batch too.
  acl_cl = tiny_config(model_dir, "runlocal,acl_cl", **{"loss.contrastive_global": True})
  multi = objectives.multi_exit_from_config(acl_cl.multi_exit, 2, 10)
  model_all, params_all, _ = hf.load_pretrained(model_dir, 2, "all", with_tokenizer=False)
  results = {}
  for tag, loss_cfg in (("ce", cfg.loss), ("gloss", gloss), ("acl", acl), ("acl_top", acl_top),
                        ("acl_cl", acl_cl.loss)):
    me = multi if tag == "acl_cl" else None
    m_, p_ = (model_all, params_all) if me else (model, params)
    for n in (1, 4):  # a device-count bug (sum for mean) shows at 4; 2 adds nothing distinct
      mesh = step_lib.make_mesh(jax.devices()[:n])
      obj = objectives.build_objective(loss_cfg, num_labels=2, last_exit=2, multi_exit=me)
      tx = optim.make_optimizer(lr=1e-3, total_steps=10)
      state = step_lib.replicate(TrainState.create(p_, tx, 0), mesh)
      fn = step_lib.make_train_step(m_, obj, tx, mesh)
      losses, norms = [], []
      for b in batches:
        state, m = fn(state, step_lib.shard_batch(b, mesh))
        losses.append(float(m["loss"]))
        norms.append(float(m["grad_norm"]))  # the averaged gradient itself, before clipping
      results[f"{tag}_loss_{n}"] = np.array(losses)
      results[f"{tag}_grad_norm_{n}"] = np.array(norms)
      results[f"{tag}_params_{n}"] = np.concatenate(
          [np.ravel(x) for x in jax.tree.leaves(jax.device_get(state.params))])
  np.savez(out, **results)


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
  {"data_parallel": data_parallel, "distributed": distributed,
   "gate_consistency": gate_consistency}[sys.argv[1]](*sys.argv[2:])
