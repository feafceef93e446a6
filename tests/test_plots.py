"""The plotting scripts run on small fake inputs and write PNGs."""
import json
import os

import numpy as np
import pytest

from scripts import plot_lambda, plot_per_exit, plot_tsne


def test_per_exit_and_lambda_and_tsne(tmp_path, capsys):
  wds = []
  for name, accs in {"jt": [0.6, 0.7, 0.8], "acl_cl": [0.7, 0.75, 0.8]}.items():
    wd = tmp_path / name
    wd.mkdir()
    res = {"dev": {f"exit_{m + 1}/accuracy": a for m, a in enumerate(accs)}}
    (wd / "results.json").write_text(json.dumps({"train": {}, **res}))
    rng = np.random.default_rng(0)
    np.savez(wd / "features_dev.npz", feats=rng.normal(size=(40, 8)),
             labels=rng.integers(0, 2, 40), preds=rng.integers(0, 2, 40),
             label_emb=rng.normal(size=(2, 8)), label_names=np.array(["a", "b"]))
    wds.append(str(wd))
  plot_per_exit.main(wds + ["--out", str(tmp_path / "pe.png")])
  assert "| acl_cl | 70.00 | 75.00 | 80.00 |" in capsys.readouterr().out
  with pytest.raises(SystemExit, match="one distinct label per workdir: got 1 label"):
    plot_per_exit.main(wds + ["--labels", "JT", "--out", str(tmp_path / "pe.png")])
  with pytest.raises(SystemExit, match="one distinct label per workdir"):
    plot_per_exit.main(wds + ["--labels", "A", "A", "--out", str(tmp_path / "pe.png")])
  plot_tsne.main(wds + ["--out", str(tmp_path / "t.png"), "--max_points", "30"])
  lam = tmp_path / "lam"  # a lambda sweep root: its summary and its runs, seeds 0-1
  lam.mkdir()
  summary = {f"method={m},loss.lam={l}": {"metrics": {"dev/accuracy": {"mean": a, "std": 0.01,
                                                                       "n": 3}}}
             for m in ("scl", "acl") for l, a in ((0.1, 0.7), (0.9, 0.6 if m == "scl" else 0.71))}
  (lam / "summary.json").write_text(json.dumps(summary))
  # per seed: SCL moves 0.10 and 0.04, ACL 0.02 and 0.06; seed 2 of SCL lacks lambda 0.9
  for m, seed, l, a in (("scl", 0, 0.1, 0.70), ("scl", 0, 0.9, 0.60), ("scl", 1, 0.1, 0.64),
                        ("scl", 1, 0.9, 0.60), ("scl", 2, 0.1, 0.9), ("acl", 0, 0.1, 0.70),
                        ("acl", 0, 0.9, 0.72), ("acl", 1, 0.1, 0.66), ("acl", 1, 0.9, 0.72)):
    wd = lam / f"method={m},loss.lam={l},seed={seed}"
    wd.mkdir()
    (wd / "results.json").write_text(json.dumps({"train": {}, "dev": {"accuracy": a}}))
  per_seed = plot_lambda.seed_spreads(str(lam), "dev/accuracy")
  assert per_seed["scl"] == pytest.approx({"0": 0.10, "1": 0.04})  # seed 2 is incomplete
  assert per_seed["acl"] == pytest.approx({"0": 0.02, "1": 0.06})
  assert plot_lambda.curves(summary, "dev/accuracy")["scl"] == [(0.1, 0.7, 0.01), (0.9, 0.6, 0.01)]
  (tmp_path / "ce.json").write_text(json.dumps(
      {"method=ce": {"metrics": {"dev/accuracy": {"mean": 0.65, "std": 0.02, "n": 3}}}}))
  plot_lambda.main([str(lam), "--out", str(tmp_path / "new" / "l.png"),
                    "--baseline", str(tmp_path / "ce.json"), "--vs", "acl",
                    "--table", str(tmp_path / "t" / "l.md")])
  out = capsys.readouterr().out
  assert "| scl |" in (tmp_path / "t" / "l.md").read_text()
  # spread = best - worst mean, beside the pooled seed std, their ratio and the per-seed spread
  assert "| scl | 70.00 | 60.00 | 10.00 | 0.9 | 1.00 | 10.0 | 7.00 ± 4.24 (n=2) | 3 |" in out
  assert "| acl | 70.00 | 71.00 | 1.00 | 0.1 | 1.00 | 1.0 | 4.00 ± 2.83 (n=2) | 3 |" in out
  # paired with ACL seed by seed: +8 and -2 points, SCL moved more on one seed of two
  assert "| scl | +3.00 ± 7.07 | 1/2 |" in out
  with pytest.raises(SystemExit, match="--vs ce: no such curve"):
    plot_lambda.main([str(lam), "--out", str(tmp_path / "l2.png"), "--vs", "ce"])
  # a grid axis beside lambda is its own curve, not merged into the method's
  summary["method=scl,loss.lam=0.1,loss.combine=additive"] = summary["method=acl,loss.lam=0.1"]
  assert set(plot_lambda.curves(summary, "dev/accuracy")) == {
      "scl", "acl", "scl [loss.combine=additive]"}
  for f in ("pe.png", "t.png", "new/l.png"):  # new/: plot_lambda makes its folders
    assert os.path.getsize(tmp_path / f) > 1000


def test_per_exit_over_seeds(tmp_path, capsys):
  summary = {
      "method=acl_cl": {"metrics": {"dev/exit_1/accuracy": {"mean": 0.7, "std": 0.02, "n": 3},
                                    "dev/exit_2/accuracy": {"mean": 0.8, "std": 0.01, "n": 3},
                                    "dev/accuracy": {"mean": 0.8, "std": 0.01, "n": 3}}},
      "method=jt": {"metrics": {"dev/exit_1/accuracy": {"mean": 0.6, "std": 0.0, "n": 1},
                                "dev/exit_2/accuracy": {"mean": 0.9, "std": 0.0, "n": 1}}},
      "method=ce": {"metrics": {"dev/accuracy": {"mean": 0.8, "std": 0.0, "n": 1}}}}
  (tmp_path / "summary.json").write_text(json.dumps(summary))
  plot_per_exit.main(["--root", str(tmp_path), "--out", str(tmp_path / "p" / "pe.png")])
  rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| ")]
  # SPEC order (JT before ACL-CL), runs without exits left out, no ± for a single seed
  assert rows[1:] == ["| jt | 1 | 60.00 | 90.00 | 75.00 |",
                      "| acl_cl | 3 | 70.00 ± 2.00 | 80.00 ± 1.00 | 75.00 |"]
  # --labels renames rows by name, whatever the table's order.
  plot_per_exit.main(["--root", str(tmp_path), "--out", str(tmp_path / "p" / "pe.png"),
                      "--labels", "acl_cl:ACL-CL"])
  rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| ")]
  assert [r.split(" | ")[0] for r in rows[1:]] == ["| jt", "| ACL-CL"]
  with pytest.raises(SystemExit, match="NAME:LABEL"):
    plot_per_exit.main(["--root", str(tmp_path), "--labels", "JT", "ACL-CL"])
  assert os.path.getsize(tmp_path / "p" / "pe.png") > 1000


def test_early_exit_over_seeds(tmp_path, capsys):
  from scripts import early_exit_seeds
  # full model 0.80; threshold 0.3 costs 0.5 / 1.5 points on the two seeds, 0.1 costs 0
  for seed, drop in ((0, 0.005), (1, 0.015)):
    wd = tmp_path / f"method=kd,seed={seed}"
    wd.mkdir()
    rows = [{"threshold": 0.1, "metric": 0.80, "full_metric": 0.80, "layer_speedup": 1.2},
            {"threshold": 0.3, "metric": 0.80 - drop, "full_metric": 0.80, "layer_speedup": 1.6}]
    (wd / "early_exit_entropy_dev.json").write_text(json.dumps({"rows": rows}))
  early_exit_seeds.main([str(tmp_path), "--out", str(tmp_path / "t.md"),
                         "--plot", str(tmp_path / "p" / "qs.png")])
  assert os.path.getsize(tmp_path / "p" / "qs.png") > 1000
  out = capsys.readouterr().out
  assert "| kd | 0.3 | 80.00 ± 0.00 | -1.00 ± 0.71 | 1.60 ± 0.00x | 2 |" in out
  # mean change -1.00 is not above -1: the pick is 0.1
  assert "| kd | 0.1 | 0.00 ± 0.00 | 1.20 ± 0.00x | yes | 2 |" in out
  early_exit_seeds.main([str(tmp_path), "--max_drop", "1.2"])
  assert "| kd | 0.3 | -1.00 ± 0.71 | 1.60 ± 0.00x | no (worst -1.50) | 2 |" in capsys.readouterr().out
  # Runs of another grid setting are a group of their own, not more seeds of kd.
  wd = tmp_path / "method=kd,loss.lam=0.9,seed=0"
  wd.mkdir()
  (wd / "early_exit_entropy_dev.json").write_text(json.dumps({"rows": rows}))
  early_exit_seeds.main([str(tmp_path)])
  out = capsys.readouterr().out
  assert "| kd | 0.3 | 80.00 ± 0.00 | -1.00 ± 0.71 | 1.60 ± 0.00x | 2 |" in out
  assert "| kd,loss.lam=0.9 | 0.3 | 80.00 | -1.50 | 1.60x | 1 |" in out


def test_per_exit_paired_gains_over_a_baseline(tmp_path, capsys):
  # seed 0: acl_cl +2 / 0 points over jt; seed 1: +4 / -2; kd has no seed-2 jt to pair with;
  # a single-exit run in the same root has no exits to pair
  accs = {("jt", 0): (0.70, 0.80), ("acl_cl", 0): (0.72, 0.80), ("jt", 1): (0.60, 0.82),
          ("acl_cl", 1): (0.64, 0.80), ("kd", 2): (0.9, 0.9)}
  (tmp_path / "method=ce,seed=0").mkdir()
  (tmp_path / "method=ce,seed=0" / "results.json").write_text(
      json.dumps({"train": {}, "dev": {"accuracy": 1}}))
  summary = {}
  for (m, seed), exits in accs.items():
    wd = tmp_path / f"method={m},seed={seed}"
    wd.mkdir()
    res = {"dev": {f"exit_{i + 1}/accuracy": a for i, a in enumerate(exits)}}
    (wd / "results.json").write_text(json.dumps({"train": {}, **res}))
    summary.setdefault(f"method={m}", {"metrics": {}})["metrics"].update(
        {k: {"mean": v, "std": 0.0, "n": 1} for k, v in ((f"dev/{k}", v) for k, v in
                                                        res["dev"].items())})
  (tmp_path / "summary.json").write_text(json.dumps(summary))
  gains = plot_per_exit.paired_gains(str(tmp_path), "jt", "dev", "accuracy")
  assert set(gains) == {"method=acl_cl"}
  np.testing.assert_allclose(gains["method=acl_cl"][1], [2.0, 4.0])
  np.testing.assert_allclose(gains["method=acl_cl"][2], [0.0, -2.0], atol=1e-9)
  plot_per_exit.main(["--root", str(tmp_path), "--vs", "jt", "--out",
                      str(tmp_path / "pe.png")])
  assert "| acl_cl | +3.00 ± 1.41 (2/2) | -1.00 ± 1.41 (0/2) |" in capsys.readouterr().out
  # no JT partner at all: the plot is still written and the table says why it is empty
  plot_per_exit.main(["--root", str(tmp_path), "--vs", "alt", "--out",
                      str(tmp_path / "pe2.png")])
  assert "no run has a same-seed alt run to pair with" in capsys.readouterr().out
  assert os.path.getsize(tmp_path / "pe2.png") > 1000


def test_lambda_plot_over_another_axis(tmp_path, capsys):
  """--axis swaps lambda for another swept field (the G-Loss gamma_keep ablation)."""
  summary = {}
  for seed, accs in enumerate(((0.80, 0.81, 0.79), (0.78, 0.80, 0.80))):
    for g, acc in zip((0.3, 0.5, 0.7), accs):
      wd = tmp_path / f"method=gloss,loss.gamma_keep={g},seed={seed}"
      wd.mkdir()
      (wd / "results.json").write_text(json.dumps({"train": {}, "test": {"accuracy": acc}}))
  for g, mean in ((0.3, 0.79), (0.5, 0.805), (0.7, 0.795)):
    summary[f"method=gloss,loss.gamma_keep={g}"] = {
        "metrics": {"test/accuracy": {"mean": mean, "std": 0.01, "n": 2}}}
  (tmp_path / "summary.json").write_text(json.dumps(summary))
  assert plot_lambda.curves(summary, "test/accuracy") == {}  # no lambda in these runs
  plot_lambda.main([str(tmp_path), "--axis", "loss.gamma_keep", "--metric", "test/accuracy",
                    "--out", str(tmp_path / "g.png")])
  out = capsys.readouterr().out
  assert "| method | gamma_keep=0.3 | gamma_keep=0.5 | gamma_keep=0.7 |" in out
  # means spread 1.5 points; seed 0 moves 2 points, seed 1 moves 2 too
  row = "| gloss | 79.00 | 80.50 | 79.50 | 1.50 | 0.3 | 1.00 | 1.5 | 2.00 ± 0.00 (n=2) | 2 |"
  assert row in out
  with pytest.raises(SystemExit, match="No loss.sigma runs"):
    plot_lambda.main([str(tmp_path), "--axis", "loss.sigma", "--out", str(tmp_path / "s.png")])


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


def test_quality_speed_and_per_exit_titles_name_task_model_split_metric(tmp_path):
  from scripts import plot_quality_speed
  from acl_jax.exits import write_table
  rows = [dict(policy="entropy", threshold=t, metric=0.8 - 0.1 * t, full_metric=0.8,
               mean_layers=6 - t, layer_speedup=6 / (6 - t), row_speedup=1.0, time_fast_s=None,
               time_full_s=None, speedup=None, agreement=1.0, metric_name="accuracy")
          for t in (0.1, 0.3)]
  _, js = write_table(rows, str(tmp_path / "jt" / "ee.md"), label="JT",
                      about={"task": "sst2", "model": "minilm-l6", "split": "dev"})
  assert "(task sst2, model minilm-l6, split dev)" in open(tmp_path / "jt" / "ee.md").read()
  fig = plot_quality_speed.figure([js])
  assert fig._suptitle.get_text() == "Early-exit quality vs speed (entropy): sst2, minilm-l6"
  assert fig.axes[1].get_ylabel() == "dev accuracy"
  assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["JT"]
  wds = []
  for name in ("jt", "kd"):
    wd = tmp_path / "runs" / name
    wd.mkdir(parents=True)
    (wd / "config.json").write_text(json.dumps({"task": {"name": "rte"},
                                                "model": {"name": "bert-base-uncased"}}))
    (wd / "results.json").write_text(json.dumps(
        {"train": {}, "dev": {"exit_1/accuracy": 0.6, "exit_2/accuracy": 0.7}}))
    wds.append(str(wd))
  title = plot_per_exit.main(wds + ["--out", str(tmp_path / "pe.png")])
  assert title == "Per-exit dev accuracy: rte, bert-base-uncased"
