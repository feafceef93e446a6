r"""The ACL paper's pilot: how often do the CE and contrastive gradients conflict?

Fine-tunes once with CE+SCL and once with ACL-Embed (ungated). At every step it also takes, on
the same batch and dropout key, three separate gradients (CE, SCL, ACL-Embed) and records the
angles CE/SCL and CE/ACL over all parameters, plus over the top layer and heads only (what
ACL-Grad's fast `angle_params="top"` mode sees), so the two gates' agreement can be counted.

  python -m scripts.grad_conflict --task rte --data_dir ../shared/data/glue --steps 100 \
      --out runs/grad_conflict/rte
  python -m scripts.grad_conflict --task mr --data_dir ../shared/data --steps 100 \
      --max_length 64 --out runs/grad_conflict/mr

Writes per-step JSONL, `summary.json` (fraction of steps above 90 degrees, quantiles) and
`angles.png` (histograms) to --out. Resumes: finished runs are skipped. With --record, each
run's per-step angles also become a row of that record (scripts/records.py), which
scripts/report.py tabulates:

  python -m scripts.grad_conflict --task rte --data_dir ../shared/data/glue --steps 100 \
      --batch_size 16 --out runs/grad_conflict/rte \
      --record results/records/pilot_grad_conflict.jsonl
"""
import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from acl_jax import data as data_lib
from acl_jax import losses
from acl_jax.models import label_embeddings
from acl_jax.names import path_names
from acl_jax.train import setup as setup_lib, step as step_lib
from configs import common


def _angle(a, b, mask=None):
  dot = losses.gate._tree_dot(a, b, mask)  # pylint: disable=protected-access
  na = jnp.sqrt(losses.gate._tree_dot(a, a, mask))  # pylint: disable=protected-access
  nb = jnp.sqrt(losses.gate._tree_dot(b, b, mask))  # pylint: disable=protected-access
  return jnp.degrees(jnp.arccos(jnp.clip(dot / (na * nb + 1e-12), -1.0, 1.0)))


def _sq(a, mask):
  return losses.gate._tree_dot(a, a, mask)  # pylint: disable=protected-access


def classifier_mask(params, exit_layer: int):
  """Bool pytree selecting the last exit's classifier kernel: ACL-Embed's label embeddings,
  which CE and ACL-Embed both train."""
  want = (f"exit_{exit_layer}", "classifier", "kernel")
  return jax.tree.map_with_path(lambda path, _: tuple(path_names(path)[-3:]) == want,
                                params)


def make_probe(model, mesh, tau):
  """Jitted (params, batch, key) -> the angles CE/SCL and CE/ACL over all parameters, the
  top layer and heads (`_top`), the encoder's weights as `angle_params=encoder` sees them
  (`_encoder`), and the label-embedding matrix alone (`acl_classifier`); plus that matrix's
  share of each gradient's squared norm (`ce_classifier_share`, `acl_classifier_share`)."""
  last = model.cfg.num_layers

  def per_device(params, batch, key):
    ids = step_lib.example_ids(batch)  # dropout keyed by example: the same on any mesh

    def term(name):
      def f(p):
        logits, aux = model.apply({"params": p}, batch["input_ids"], batch["attention_mask"],
                                  batch["token_type_ids"], train=True, rngs={"dropout": key},
                                  example_ids=ids)
        y, f_ = batch["labels"], aux["feats"][-1]
        if name == "ce":
          return losses.cross_entropy(logits[-1], y)
        if name == "scl":
          return losses.scl_loss(f_, y, tau)
        return losses.acl_embed_loss(f_, y, label_embeddings(p, last), tau)
      # Varying params: each device's local gradient, then one pmean (see acl_jax.train.step).
      return jax.grad(f)(jax.lax.pcast(params, step_lib.AXIS, to="varying"))

    g = jax.lax.pmean({n: term(n) for n in ("ce", "scl", "acl")}, step_lib.AXIS)
    masks = {"top": losses.top_angle_mask(params),  # the 'top' gate's partition
             "encoder": losses.encoder_angle_mask(params)}  # the 'encoder' gate's
    out = {"scl": _angle(g["ce"], g["scl"]), "acl": _angle(g["ce"], g["acl"])}
    for part, mask in masks.items():
      out.update({f"{k}_{part}": _angle(g["ce"], g[k], mask) for k in ("scl", "acl")})
    head = classifier_mask(params, last)
    out["acl_classifier"] = _angle(g["ce"], g["acl"], head)
    for k in ("ce", "acl"):
      out[f"{k}_classifier_share"] = _sq(g[k], head) / _sq(g[k], None)
    return out

  from jax.sharding import PartitionSpec as P  # pylint: disable=import-outside-toplevel
  return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(step_lib.AXIS), P()),
                               out_specs=P()))


def run(args, method, out_dir):
  path = os.path.join(out_dir, f"{method}.jsonl")
  if os.path.exists(path) and sum(1 for _ in open(path)) >= args.steps:
    return [json.loads(x) for x in open(path)]
  c = common.base_config()
  c.task.name, c.task.data_dir, c.task.max_length = args.task, args.data_dir, args.max_length
  c.task.max_train_examples = args.max_train_examples
  c.loss.update(common.METHODS[method])
  c.batch_size, c.seed, c.optim.lr = args.batch_size, args.seed, args.lr
  setup = setup_lib.build(c)
  tr = setup_lib.make_trainer(c, setup.model, setup.params, setup.mesh,
                              num_labels=setup.task.num_labels, total_steps=args.steps)
  state, train_step = tr.state, tr.train_step
  probe = make_probe(setup.model, setup.mesh, c.loss.tau)
  recs = []
  for step, batch in data_lib.train_batches(setup.tok["train"], c.batch_size, c.seed, 0,
                                            setup.boundaries):
    if step >= args.steps:
      break
    b = step_lib.shard_batch(batch, setup.mesh)
    key = jax.random.fold_in(jax.random.PRNGKey(c.seed + 1), step)
    a = {k: float(v) for k, v in jax.device_get(probe(state.params, b, key)).items()}
    state, m = train_step(state, b)
    recs.append({"step": step, "loss": float(m["loss"]), **a})
    print(f"{args.task} {method} step {step}: CE/SCL {a['scl']:.1f} CE/ACL {a['acl']:.1f}",
          flush=True)
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in recs)
  return recs


def summarise(recs):
  out = {}
  for k in ("scl", "acl"):
    a = np.array([r[k] for r in recs])
    out[k] = {"steps": len(a), "frac_above_90": float((a > 90).mean()),
              "frac_75_105": float(((a >= 75) & (a <= 105)).mean()),
              "median": float(np.median(a)), "p10": float(np.percentile(a, 10)),
              "p90": float(np.percentile(a, 90))}
    for part in ("top", "encoder"):
      if f"{k}_{part}" in recs[0]:
        b = np.array([r[f"{k}_{part}"] for r in recs])
        out[k][f"{part}_frac_above_90"] = float((b > 90).mean())
        out[k][f"{part}_median"] = float(np.median(b))
        out[k][f"{part}_gate_agrees_with_full"] = float(((a <= 90) == (b <= 90)).mean())
  return out


def plot(results, path, title):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
  every = [r[k] for recs in results.values() for r in recs for k in ("scl", "acl")]
  bins = np.arange(np.floor(min(every)) - 1, np.ceil(max(every)) + 2, 1.0)  # 1-degree bins
  for ax, (method, recs) in zip(axes[0], results.items()):
    for k, lab in (("scl", "CE vs SCL"), ("acl", "CE vs ACL-Embed")):
      ax.hist([r[k] for r in recs], bins=bins, alpha=0.6, label=lab)
    ax.axvline(90, color="k", lw=0.8, ls="--")
    ax.set_title(f"{title}: training with {method}")
    ax.set_xlabel("gradient angle (degrees)")
    ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", required=True)
  p.add_argument("--data_dir", required=True)
  p.add_argument("--steps", type=int, default=100)
  p.add_argument("--batch_size", type=int, default=16)
  p.add_argument("--max_length", type=int, default=128)
  p.add_argument("--max_train_examples", type=int, default=0)
  p.add_argument("--lr", type=float, default=2e-5)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--methods", default="scl,acl_embed")
  p.add_argument("--out", required=True)
  p.add_argument("--record", default="", help="a record file (results/records/NAME.jsonl) that "
                 "gets one row per run with its per-step angles")
  args = p.parse_args()
  os.makedirs(args.out, exist_ok=True)
  ran_before = all(os.path.exists(os.path.join(args.out, f"{m}.jsonl"))
                   for m in args.methods.split(","))
  results = {m: run(args, m, args.out) for m in args.methods.split(",")}
  summary = {m: summarise(r) for m, r in results.items()}
  # Re-plotting finished runs keeps the command that produced them.
  prev = os.path.join(args.out, "summary.json")
  cached = all(os.path.exists(os.path.join(args.out, f"{m}.jsonl")) for m in results)
  summary["command"] = (json.load(open(prev))["command"] if cached and os.path.exists(prev)
                        and ran_before else
                        " ".join(["python -m scripts.grad_conflict"] + sys.argv[1:]))
  with open(os.path.join(args.out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
  plot(results, os.path.join(args.out, "angles.png"), args.task)
  if args.record:
    from scripts import records  # pylint: disable=import-outside-toplevel
    from acl_jax import provenance  # pylint: disable=import-outside-toplevel
    sweep = os.path.splitext(os.path.basename(args.record))[0]
    for method, recs in results.items():
      settings = {"task": args.task, "method": method, "seed": args.seed}
      records.append(args.record, records.make_row(**{
          "sweep": sweep, "run": records.run_name(settings), **settings, "overrides": {},
          "config": "scripts/grad_conflict.py", "set": [], "command": summary["command"],
          "budget": {"num_steps": args.steps, "batch_size": args.batch_size,
                     "max_length": args.max_length, "lr": args.lr},
          "steps": recs, "code": [provenance.git_revision()]}))
  print(json.dumps(summary, indent=2))


if __name__ == "__main__":
  main()
