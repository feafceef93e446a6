"""This project's pilots: results/PILOTS.md, written whole (the short-budget runs from before
the protocol, which decide nothing), and the figures of results/figures/.
"""
import os

import numpy as np

from acl_jax.study import protocol as proto, records
from acl_jax.study.tables import (axis_table, budget_text, by_seed, early_exit_table,
                                  exit_score, exits_of, fmt_paired, label, methods_table,
                                  multi_exit_table, pilot_score, select, split_of)

REPO = records.REPO


FIGURES = os.path.join(REPO, "results", "figures")


PILOTS_MD = os.path.join(REPO, "results", "PILOTS.md")


def lambda_curves(rows: list[dict]) -> dict:
  curves = {"CE+SCL": select(rows, "mr", "scl", loss__combine=None),
            "ACL": select(rows, "mr", "acl"),
            "CE+SCL, additive (CE + λ SCL)": select(rows, "mr", "scl", loss__combine="additive")}
  return {k: v for k, v in curves.items() if v}


def lambda_table(p: proto.Protocol, rows: list[dict], which=None) -> str:
  out, per_seed = axis_table(p, "loss.lam", lambda_curves(rows), which)
  if "ACL" in per_seed:
    out += ("\nSpread over λ seed by seed, minus ACL's on the same seed (points; mean, 95% "
            "t-interval, seeds on which the curve moved more than ACL's):\n\n"
            "| curve | spread − ACL's spread |\n|---|---|\n")
    for name, sp in per_seed.items():
      if name != "ACL":
        d = [sp[s] - per_seed["ACL"][s] for s in sorted(sp) if s in per_seed["ACL"]]
        out += f"| {name} | {fmt_paired(d)} |\n"
  return out


def gloss_axis_tables(p: proto.Protocol, rows: list[dict]) -> str:
  out = ""
  for axis, name in (("loss.gamma_keep", "gamma_keep"), ("loss.sigma", "sigma")):
    rs = [r for r in select(rows, "mr", "gloss") if axis in r["overrides"]]
    if rs:
      out += ("\n" if out else "") + axis_table(p, axis, {f"CE+G-Loss over {name}": rs})[0]
  return out


def grad_conflict_table(p: proto.Protocol, rows: list[dict]) -> str:
  lines = ["| task | trained with | angle | steps > 90° | median | p10–p90 | top-layer gate "
           "agrees |", "|---|---|---|---|---|---|---|"]
  for r in rows:
    for k, name in (("scl", "CE vs SCL"), ("acl", "CE vs ACL-Embed")):
      a = np.array([s[k] for s in r["steps"]])
      top = np.array([s[k + "_top"] for s in r["steps"]])
      lines.append(
          f"| {label(p, r['task'])} | {p.label(r['method'])} | {name} | "
          f"{100 * (a > 90).mean():.0f}% | {np.median(a):.1f}° | "
          f"{np.percentile(a, 10):.1f}–{np.percentile(a, 90):.1f}° | "
          f"{100 * ((a <= 90) == (top <= 90)).mean():.0f}% |")
  r0 = rows[0]["budget"]
  return ("\n".join(lines) + f"\n\nBudget: {len(rows[0]['steps'])} steps per run, "
          f"B{r0['batch_size']}, lr {r0['lr']:g}, seed 0, MiniLM-L6.\n")


def single_mr_rows(rs: dict) -> list[dict]:
  """pilot_single_mr's CE and G-Loss rows plus the preset points of the λ and gamma_keep grids
  (λ 0.9 for CE+SCL, 0.5 for ACL, gamma_keep 0.7: the same runs as the presets)."""
  lam, ga = rs.get("pilot_lambda_mr", []), rs.get("pilot_gloss_ablation_mr", [])
  return (rs["pilot_single_mr"]
          + [dict(r, method="scl") for r in select(lam, "mr", "scl", loss__lam="0.9",
                                                   loss__combine=None)]
          + [dict(r, method="acl") for r in select(lam, "mr", "acl", loss__lam="0.5")]
          + select(ga, "mr", "gloss", loss__gamma_keep="0.7"))


# record -> (title, how it was run, its tables)
PILOT_SECTIONS = {
    "pilot_glue": (
        "Single-exit methods on GLUE",
        "MRPC, CoLA and RTE, 3 seeds, 200 steps (CoLA 800 steps at max length 48), the "
        "checkpoint picked on dev every 100 steps and scored on the same dev set.",
        lambda p, rs: methods_table(p, rs["pilot_glue"], ("sst2", "cola", "mrpc", "rte"),
                                 ("ce", "scl", "acl_embed", "acl", "gloss"), paper=False)),
    "pilot_single_mr": (
        "Single-exit methods on MR",
        "3 seeds, 200 steps (one epoch), plain CE, the checkpoint picked on dev macro-F1 at "
        "steps 100 and 200. The CE+SCL, ACL and CE+G-Loss rows are the preset points of the λ "
        "and gamma_keep pilots below.",
        lambda p, rs: methods_table(p, single_mr_rows(rs), ["mr"], ("ce", "scl", "acl", "gloss"))),
    "pilot_lambda_mr": (
        "λ sensitivity on MR: CE+SCL against ACL",
        "λ 0.1-0.9, 3 seeds, 200 steps, plain CE; CE+SCL also in ACL's additive form (CE + λ "
        "SCL, `loss.combine=additive`); with and without checkpoint selection.",
        lambda p, rs: ("Selected checkpoints:\n\n" + lambda_table(p, rs["pilot_lambda_mr"])
                    + "\nFinal weights (no checkpoint selection):\n\n"
                    + lambda_table(p, rs["pilot_lambda_mr"], which="latest")
                    + f"\nBudget: {budget_text(rs['pilot_lambda_mr'])}.\n")),
    "pilot_gloss_ablation_mr": (
        "G-Loss gamma_keep and sigma on MR",
        "one axis at a time around the preset (gamma_keep 0.7, sigma 0.667, λ 0.8), 3 seeds, "
        "200 steps, plain CE.",
        lambda p, rs: (gloss_axis_tables(p, rs["pilot_gloss_ablation_mr"])
                    + f"\nBudget: {budget_text(rs['pilot_gloss_ablation_mr'])}.\n")),
    "pilot_multi_exit": (
        "Multi-exit strategies and early exit",
        "seed 0 only, 300 steps (0.14 epoch of SST-2, 1.5 of MR), mean-pooled exits, the "
        "checkpoint picked on the dev exit mean every 100 steps; MR's per-exit scores on test; "
        "the entropy early-exit policy on dev, timed on a per-batch path, not the pooled one of "
        "`acl_jax.exits` (BENCHMARKS.md, early exit).",
        lambda p, rs: (multi_exit_table(p, rs["pilot_multi_exit"], "sst2") + "\n"
                    + multi_exit_table(p, rs["pilot_multi_exit"], "mr") + "\nEarly exit (entropy "
                    "policy, dev; the largest mean layer speed-up within 1 point of the full "
                    "model):\n\n" + early_exit_table(p, rs["pilot_multi_exit"])
                    + f"\nBudget: {budget_text(rs['pilot_multi_exit'])}, seed 0.\n")),
    "pilot_grad_conflict": (
        "Gradient conflict between CE and the contrastive terms",
        "`scripts/grad_conflict.py`, fine-tuning once with CE+SCL and once with CE+ACL-Embed "
        "(ungated); at every step the angle between CE's gradient and each contrastive one on "
        "the same batch and dropout key, over all parameters and over the top layer and heads.",
        lambda p, rs: grad_conflict_table(p, rs["pilot_grad_conflict"])),
}


# A pilot whose run folders were not kept as a record: the summary committed at the time,
# restored from git into results/pilots/ and shown as it was.
PILOT_SUMMARIES = {
    "pilot_textgcn_more": (
        "R52, Ohsumed and 20NG: CE against CE+G-Loss",
        "results/pilots/textgcn_more.md",
        "CE and CE+G-Loss (sigma fixed), 3 seeds, 200 steps at B32, max length 64, lr 5e-5, "
        "the better of steps 100 and 200 on dev macro-F1 tested. Its run folders were not "
        "kept; this is the summary committed then (seed 0 at 8eb3b93, seeds 0-2 at 6f58147), "
        "restored from git."),
}


def pilots_md(p: proto.Protocol, rs: dict) -> str:
  """results/PILOTS.md: every pilot's tables and figures, each labelled as deciding nothing."""
  figs = figure_specs(p, rs)
  out = ["# Pilots\n",
         "Short-budget runs (100-800 steps) from before the protocol in `studies/papers.py`, "
         "kept as records (`results/records/pilot_*.jsonl`), or as the summary committed then "
         "where the runs were not kept (`results/pilots/`). Each is a **short-budget pilot "
         "that decides nothing**: RESULTS.md's verdicts come from the protocol's runs alone. "
         "Generated by `python -m scripts.report`; the intervals here are 95% t-intervals.\n"]
  for name in p.pilots:
    if name in PILOT_SUMMARIES:
      title, path, how = PILOT_SUMMARIES[name]
      with open(os.path.join(REPO, path)) as f:
        out.append(f"## {title} (short-budget pilot; decides nothing)\n\n`{path}`: {how}\n\n"
                   f"{f.read()}")
      continue
    if name not in PILOT_SECTIONS or not rs.get(name):
      continue
    title, how, build = PILOT_SECTIONS[name]
    out.append(f"## {title} (short-budget pilot; decides nothing)\n\n"
               f"`results/records/{name}.jsonl`: {how}\n\n{build(p, rs)}")
    shown = [f"![{cap}](figures/{file})" for rec, file, cap, _ in figs if rec == name]
    if shown:
      out.append("\n".join(shown) + "\n")
  return "\n".join(out)


def _plt():
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  return plt


def _save(fig, ax_or_axes, path, title=None, grid=True, legend=8):
  plt = _plt()
  for ax in np.ravel(ax_or_axes):
    if grid:
      ax.grid(alpha=0.3)
    ax.legend(fontsize=legend)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _errorbar(ax, xs, ys, name, capsize=3):
  ax.errorbar(xs, [np.mean(y) for y in ys], yerr=[np.std(y, ddof=1) if len(y) > 1 else 0
                                                  for y in ys],
              marker="o", capsize=capsize, label=name)


def curve_figure(p: proto.Protocol, axis, curves, path, title, baseline=None, logx=False):
  """Mean ± std over seeds per axis value of each curve, over CE's band."""
  fig, ax = _plt().subplots(figsize=(6.5, 4))
  v = list(by_seed(baseline or [], lambda r: pilot_score(p, r)).values())
  if v:
    ax.axhspan(np.mean(v) - np.std(v, ddof=1), np.mean(v) + np.std(v, ddof=1), color="gray",
               alpha=0.2)
    ax.axhline(np.mean(v), color="gray", ls="--", label=f"CE (n={len(v)}, ± std)")
  for name, rs in curves.items():
    xs = sorted({float(r["overrides"][axis]) for r in rs})
    ys = [[pilot_score(p, r) for r in rs if float(r["overrides"][axis]) == x] for x in xs]
    _errorbar(ax, xs, ys, f"{name} (n={min(len(y) for y in ys)})")
  if logx:
    ax.set_xscale("log")
  ax.set_xlabel(axis)
  ax.set_ylabel("MR test accuracy (%)")
  ax.set_title(title, fontsize=10)
  _save(fig, ax, path)


def _task_panels(p: proto.Protocol, rows, path, title, draw):
  """One panel per multi-exit task with rows (SST-2, MR), `draw(ax, task)` filling each."""
  tasks = [t for t in ("sst2", "mr") if select(rows, t)]
  fig, axes = _plt().subplots(1, len(tasks), figsize=(5.5 * len(tasks), 3.8), squeeze=False)
  for ax, t in zip(axes[0], tasks):
    draw(ax, t)
    ax.set_ylabel(f"{p.tasks[t].metric} (%)")
  _save(fig, axes, path, title)


def per_exit_figure(p: proto.Protocol, rows, path, title):
  def draw(ax, t):
    rs = select(rows, t)
    split, exits = split_of(rs), exits_of(rs[0])
    for meth in p.multi_exit:
      ys = [list(by_seed(select(rs, t, meth), lambda r, m=m: exit_score(p, r, m, split)).values())
            for m in exits]
      if all(ys):
        _errorbar(ax, exits, ys, p.label(meth), capsize=2)
    ax.set_title(f"{label(p, t)} ({split})", fontsize=10)
    ax.set_xlabel("exit (layer)")
  _task_panels(p, rows, path, title, draw)


def quality_speed_figure(p: proto.Protocol, rows, path, title):
  def draw(ax, t):
    for meth in p.multi_exit:
      es = [e for r in select(rows, t, meth) for e in r.get("early_exit", {}).get("entropy", [])]
      thr = sorted({e["threshold"] for e in es})
      if thr:
        ax.plot([np.mean([e["layer_speedup"] for e in es if e["threshold"] == x]) for x in thr],
                [np.mean([100 * e["metric"] for e in es if e["threshold"] == x]) for x in thr],
                marker="o", label=p.label(meth))
    ax.set_title(f"{label(p, t)} dev, entropy policy", fontsize=10)
    ax.set_xlabel("layer speed-up (6 / mean layers)")
  _task_panels(p, rows, path, title, draw)


def angles_figure(p: proto.Protocol, rows, path):
  fig, axes = _plt().subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), squeeze=False)
  every = [s[k] for r in rows for s in r["steps"] for k in ("scl", "acl")]
  bins = np.arange(np.floor(min(every)) - 1, np.ceil(max(every)) + 2, 1.0)
  for ax, r in zip(axes[0], rows):
    for k, name in (("scl", "CE vs SCL"), ("acl", "CE vs ACL-Embed")):
      ax.hist([s[k] for s in r["steps"]], bins=bins, alpha=0.6, label=name)
    ax.axvline(90, color="k", lw=0.8, ls="--")
    ax.set_title(f"{label(p, r['task'])}: training with {p.label(r['method'])}", fontsize=9)
    ax.set_xlabel("gradient angle (degrees)")
  _save(fig, axes, path, grid=False, legend=7)


def figure_specs(p: proto.Protocol, rs: dict) -> list[tuple]:
  """(record, file name, caption, draw(path)) of every figure the records support."""
  out = []
  base = select(rs.get("pilot_single_mr", []), "mr", "ce")
  if rs.get("pilot_lambda_mr"):
    curves = {k.split(" (")[0].replace(",", ""): v
              for k, v in lambda_curves(rs["pilot_lambda_mr"]).items()}
    out.append(("pilot_lambda_mr", "pilot_lambda_mr.png", "λ sensitivity on MR, pilot",
                lambda path: curve_figure(p, "loss.lam", curves, path,
                                       "λ sensitivity on MR (pilot_lambda_mr)", base)))
  for axis, logx in (("loss.gamma_keep", False), ("loss.sigma", True)):
    rows = [r for r in rs.get("pilot_gloss_ablation_mr", []) if axis in r["overrides"]]
    if rows:
      name = axis.split(".")[-1]
      out.append(("pilot_gloss_ablation_mr", f"pilot_gloss_ablation_mr_{name}.png",
                  f"G-Loss {name}, MR, pilot",
                  lambda path, a=axis, r=rows, x=logx: curve_figure(p, 
                      a, {"CE+G-Loss": r}, path, f"G-Loss {a} on MR (pilot_gloss_ablation_mr)",
                      base, x)))
  me = rs.get("pilot_multi_exit")
  if me:
    out.append(("pilot_multi_exit", "pilot_multi_exit_per_exit.png", "per-exit scores, pilot",
                lambda path: per_exit_figure(p, me, path, "Per-exit score, MiniLM-L6, "
                                             "mean-pooled exits (pilot_multi_exit)")))
    out.append(("pilot_multi_exit", "pilot_multi_exit_quality_speed.png", "early exit, pilot",
                lambda path: quality_speed_figure(p, me, path, "Early exit, mean over seeds "
                                               "(pilot_multi_exit)")))
  if rs.get("pilot_grad_conflict"):
    out.append(("pilot_grad_conflict", "pilot_grad_conflict.png", "gradient angles, pilot",
                lambda path: angles_figure(p, rs["pilot_grad_conflict"], path)))
  return out


def figures(p: proto.Protocol, rs: dict, out: str = FIGURES) -> list[str]:
  """Writes every figure the records support; returns their paths."""
  os.makedirs(out, exist_ok=True)
  made = []
  for _, name, _, draw in figure_specs(p, rs):
    draw(os.path.join(out, name))
    made.append(os.path.join(out, name))
  return made
