r"""The ACL paper's pilot: how often do the CE and contrastive gradients conflict?

Fine-tunes once with CE+SCL and once with ACL-Embed (ungated), on train.py's batches (packed
as task.packing says) with its train step. Before every step it takes, on that step's state
and batch, the gradients a gated step would hand the ACL-Grad gate (`step.loss_grad`, one
jax.grad call per term, the step's padding masks and dropout and loss keys, averaged over
the devices): the CE term, and the auxiliary term of the config's objective
(`setup.make_objective`) with loss.name=scl and with loss.name=acl_embed. The gate's own
function (`losses.angle`) measures the angles. Per step, in the JSONL rows and --record:

- `scl`, `acl`: CE/SCL and CE/ACL-Embed over all parameters: the `gate/angle` that SCL+Grad
  and ACL (`angle_params=all`) would log on this step's state and batch;
- `scl_top`, `acl_top`: the same over the top layer and heads (`angle_params=top`);
- `scl_encoder`, `acl_encoder`: over the encoder's weights (`angle_params=encoder`);
- `acl_classifier`: CE/ACL-Embed over the label-embedding matrix alone (the last exit's
  classifier kernel); `ce_classifier_share`, `acl_classifier_share`: that matrix's share of
  each gradient's squared norm;
- `loss`: the trained objective's loss at the step.

  python -m scripts.grad_conflict --task rte --data_dir ../shared/data/glue --steps 100 \
      --out runs/grad_conflict/rte
  python -m scripts.grad_conflict --task mr --data_dir ../shared/data --steps 100 \
      --max_length 64 --out runs/grad_conflict/mr

Writes per-step JSONL, `summary.json` (fraction of steps above 90 degrees, quantiles) and
`angles.png` (histograms) to --out. Resumes: finished runs are skipped. With --record, each
run's per-step angles also become a row of that record (acl_jax/study/records.py), which
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
import numpy as np
from jax.sharding import PartitionSpec as P

from acl_jax import losses
from acl_jax.names import path_names
from acl_jax.train import objectives, scoring, setup as setup_lib, step as step_lib
from configs import common

# The probed auxiliary terms: record key -> the loss.name whose objective gives it. CE, the
# gate's main term, is the same term in both.
PROBED = {"scl": "scl", "acl": "acl_embed"}
# The gate's parameter partitions measured beside "all" (`losses.angle_mask`).
PARTITIONS = ("top", "encoder")


def classifier_mask(params, exit_layer: int):
  """Bool pytree selecting the last exit's classifier kernel: ACL-Embed's label embeddings,
  which CE and ACL-Embed both train."""
  want = (f"exit_{exit_layer}", "classifier", "kernel")
  return jax.tree.map_with_path(lambda path, _: tuple(path_names(path)[-3:]) == want,
                                params)


def probe_objectives(cfg, model, *, num_labels: int, total_steps: int, class_weights=None
                     ) -> dict[str, objectives.Objective]:
  """Record key -> the objective `cfg` trains with when its loss.name is PROBED's name for
  that key, built as the trainer builds its own (`setup.make_objective`)."""
  out = {}
  for key, name in PROBED.items():
    c = cfg.copy_and_resolve_references()
    c.loss.name = name
    out[key], _ = setup_lib.make_objective(c, model, num_labels=num_labels,
                                           total_steps=total_steps, class_weights=class_weights)
  return out


def make_probe(model, mesh, probed: dict[str, objectives.Objective]):
  """Jitted (state, batch) -> the step's gradient angles, as the module docstring lists them.

  Args:
    model: the `Classifier`.
    mesh: the data mesh of the train step.
    probed: record key -> objective (`probe_objectives`).

  Returns:
    probe(state, batch) -> {key: float32 scalar}, on a replicated TrainState and a batch
    sharded as the train step takes it (`step.shard_batch`); the state is not changed.
  """
  last = model.cfg.exit_layers[-1]

  def per_device(state, batch):
    g = {}
    for key, objective in probed.items():
      grad = step_lib.loss_grad(model, objective, state, batch)
      if "ce" not in g:
        g["ce"] = grad(lambda t: t.main)[0]
      g[key] = grad(lambda t: t.aux)[0]
    # The gate's inputs: gradients averaged over the devices (`step.make_train_step`).
    g = jax.lax.pmean(g, step_lib.AXIS)
    out = {k: losses.angle(g["ce"], g[k]) for k in probed}
    for part in PARTITIONS:
      mask = losses.angle_mask(state.params, part)
      out.update({f"{k}_{part}": losses.angle(g["ce"], g[k], mask) for k in probed})
    head = classifier_mask(state.params, last)
    out["acl_classifier"] = losses.angle(g["ce"], g["acl"], head)
    for k in ("ce", "acl"):
      out[f"{k}_classifier_share"] = losses.sq_norm(g[k], head) / losses.sq_norm(g[k])
    return out

  return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(step_lib.AXIS)),
                               out_specs=P()))


def config(args, method):
  """The run's config: the base config with method preset `method` and the CLI's budget."""
  c = common.base_config()
  c.task.name, c.task.data_dir, c.task.max_length = args.task, args.data_dir, args.max_length
  c.task.max_train_examples = args.max_train_examples
  c.loss.update(common.METHODS[method])
  c.batch_size, c.seed, c.optim.lr = args.batch_size, args.seed, args.lr
  return c


def run(args, method, out_dir):
  path = os.path.join(out_dir, f"{method}.jsonl")
  if os.path.exists(path) and sum(1 for _ in open(path)) >= args.steps:
    return [json.loads(x) for x in open(path)]
  c = config(args, method)
  setup_lib.check_config(c)
  setup = setup_lib.build(c)
  num_labels = setup.task.num_labels
  params = step_lib.replicate(setup.params, setup.mesh)
  cw = setup_lib.class_weights(c, setup.tok["train"]["label"], num_labels)
  calibration = objectives.calibrate(
      c.loss, lambda n: scoring.train_features(setup.scorer(), params, n), c.batch_size,
      jax.device_count())
  tr = setup_lib.make_trainer(c, setup.model, params, setup.mesh, num_labels=num_labels,
                              total_steps=args.steps, class_weights=cw,
                              calibration=calibration)
  state, train_step = tr.state, tr.train_step
  probe = make_probe(setup.model, setup.mesh, probe_objectives(
      c, setup.model, num_labels=num_labels, total_steps=args.steps, class_weights=cw))
  recs = []
  for step, batch in setup.train_batches(0):
    if step >= args.steps:
      break
    b = step_lib.shard_batch(batch, setup.mesh)
    # Before the step, which donates the state.
    a = {k: float(v) for k, v in jax.device_get(probe(state, b)).items()}
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
    from acl_jax.study import records  # pylint: disable=import-outside-toplevel
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
