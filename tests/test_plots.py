"""The plotting scripts run on small fake inputs and write PNGs."""
import json
import os

import numpy as np

from scripts import plot_tsne


def _run_with_features(wd, loss, task="sst2", model="/models/minilm-l6"):
  wd.mkdir()
  (wd / "config.json").write_text(json.dumps({"task": {"name": task}, "model": {"name": model},
                                              "loss": {"name": loss}}))
  (wd / "labels.json").write_text(json.dumps(["negative", "positive"]))
  rng = np.random.default_rng(0)
  np.savez(wd / "features_dev.npz", feats=rng.normal(size=(40, 8)),
           labels=rng.integers(0, 2, 40), preds=rng.integers(0, 2, 40),
           label_emb=rng.normal(size=(2, 8)), label_names=np.array(["a", "b"]))
  return str(wd)


def test_tsne_names_run_task_model_split_and_stars_only_label_embedding_runs(tmp_path):
  ce = _run_with_features(tmp_path / "ce", "ce")
  acl = _run_with_features(tmp_path / "acl", "acl_embed")
  panels = plot_tsne.main([ce, acl, "--labels", "CE", "ACL", "--out", str(tmp_path / "t.png"),
                           "--max_points", "30"])
  assert [p["stars"] for p in panels] == [False, True]  # CE has no label embeddings
  assert panels[0]["title"] == "CE\nsst2 · minilm-l6 · dev"
  assert panels[1]["classes"] == ["negative", "positive"]  # labels.json, for the legend
  assert os.path.getsize(tmp_path / "t.png") > 1000


def test_quality_speed_titles_name_task_model_split_metric(tmp_path):
  from acl_jax.exits import plot, write_table
  rows = [dict(policy="entropy", threshold=t, metric=0.8 - 0.1 * t, full_metric=0.8,
               mean_layers=6 - t, layer_speedup=6 / (6 - t), row_speedup=1.0, time_fast_s=None,
               time_full_s=None, speedup=None, agreement=1.0, metric_name="accuracy")
          for t in (0.1, 0.3)]
  _, js = write_table(rows, str(tmp_path / "jt" / "ee.md"), label="JT",
                      about={"task": "sst2", "model": "minilm-l6", "split": "dev"})
  assert "(task sst2, model minilm-l6, split dev)" in open(tmp_path / "jt" / "ee.md").read()
  fig = plot.figure([js])
  assert fig._suptitle.get_text() == "Early-exit quality vs speed (entropy): sst2, minilm-l6"
  assert fig.axes[1].get_ylabel() == "dev accuracy"
  assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["JT"]


def _row(sweep, task, method, seed, score, **overrides):
  """A record row with one test (or dev) accuracy; exits and early-exit rows for multi-exit."""
  split = "dev" if task == "sst2" else "test"
  final = {split: {"accuracy": score}}
  row = {"sweep": sweep, "run": f"task={task},method={method},seed={seed}", "task": task,
         "method": method, "seed": seed, "overrides": overrides, "budget": {},
         "evals": [{"step": 1, "dev": {"accuracy": score}}], "final": final,
         "latest": final}
  if method in ("jt", "acl_cl"):
    final[split].update({f"exit_{m}/accuracy": score - 0.01 * (6 - m) for m in range(1, 7)})
    row["early_exit"] = {"entropy": [
        {"threshold": t, "metric": score - 0.01 * t, "full_metric": score,
         "layer_speedup": 1 + t, "speedup": 1 + t / 2} for t in (0.1, 0.5)]}
  return row


def test_report_figures_from_records(tmp_path):
  """scripts/report.py draws every figure the records support: the lambda and G-Loss axis
  curves over seeds with CE's band, per-exit curves, early-exit curves, gradient angles."""
  from studies import papers_pilots  # pylint: disable=import-outside-toplevel
  from studies.papers import PAPERS
  rs = {"pilot_lambda_mr": [_row("pilot_lambda_mr", "mr", m, s, 0.8 + 0.01 * s, **{
            "loss.lam": lam}) for m in ("scl", "acl") for lam in ("0.1", "0.9") for s in (0, 1)],
        "pilot_single_mr": [_row("pilot_single_mr", "mr", "ce", s, 0.8) for s in (0, 1)],
        "pilot_gloss_ablation_mr": [_row("pilot_gloss_ablation_mr", "mr", "gloss", s, 0.8, **{
            "loss.sigma": v}) for v in ("0.1", "1.5") for s in (0, 1)],
        "pilot_multi_exit": [_row("pilot_multi_exit", t, m, 0, 0.8) for t in ("sst2", "mr")
                             for m in ("jt", "acl_cl")],
        "pilot_grad_conflict": [{"task": "rte", "method": "scl", "steps": [
            {"scl": 80 + i, "acl": 70 + i, "scl_top": 80, "acl_top": 70} for i in range(20)]}]}
  made = papers_pilots.figures(PAPERS, rs, str(tmp_path))
  assert sorted(os.path.basename(path) for path in made) == [
      "pilot_gloss_ablation_mr_sigma.png", "pilot_grad_conflict.png", "pilot_lambda_mr.png",
      "pilot_multi_exit_per_exit.png", "pilot_multi_exit_quality_speed.png"]
  for path in made:
    assert os.path.getsize(path) > 1000
