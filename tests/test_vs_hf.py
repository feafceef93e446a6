"""The train-time accounting of benchmarks/vs_hf.py (pure Python, no training)."""
import pytest

from benchmarks import vs_hf


def test_train_time_drops_compiles_evals_and_saves():
  # [end time, examples, compiled]: step 0 compiles, step 2 compiles a new shape.
  log = {"steps": [[10.0, 32, True], [11.0, 32, False], [20.0, 32, True], [21.5, 32, False],
                   [30.0, 16, False]],
         # An evaluation and a save inside the last step's span (21.5 -> 30).
         "excluded": [["evaluate", 22.0, 26.0], ["checkpoint", 26.0, 28.0],
                      # before the first step: outside every span
                      ["checkpoint", 1.0, 2.0]]}
  seconds, examples, compiled = vs_hf.train_time(log)
  assert compiled == 2
  assert examples == 32 + 32 + 16
  assert seconds == pytest.approx(1.0 + 1.5 + (8.5 - 6.0))


def test_cpu_slug_is_a_file_name():
  slug = vs_hf.cpu_slug()
  assert slug and all(c.isalnum() or c in "._" for c in slug)


@pytest.mark.parametrize("frameworks", ["tf", "", "jax,flax"])
def test_unknown_frameworks_are_refused_before_any_run(frameworks, monkeypatch, capsys, tmp_path):
  monkeypatch.setattr("sys.argv", ["vs_hf", "--tasks", "mr", "--frameworks", frameworks,
                                   "--out", str(tmp_path / "out.json")])
  with pytest.raises(SystemExit):
    vs_hf.main()
  assert "name some of jax, torch" in capsys.readouterr().err
  assert not (tmp_path / "out.json").exists()


def test_table_of_one_framework_and_of_both():
  def run(fw, seed, metric):
    return {"task": "cola", "framework": fw, "seed": seed, "metric": metric,
            "metric_name": "dev mcc", "train_examples_per_s": 10.0, "wall_s": 100.0,
            "peak_rss_mib": 1000.0}
  only = vs_hf.table({"runs": [run("torch", 0, 0.2887)]})
  assert "| cola | dev mcc (per seed) | — | 28.87 |  |" in only
  assert "| cola | whole process wall s | — | 100 | — |" in only
  both = vs_hf.table({"runs": [run("torch", 0, 0.2887), run("jax", 0, 0.2931),
                               run("jax", 1, 0.30)]})
  assert "| cola | dev mcc (per seed) | 29.31 / 30.00 | 28.87 |  |" in both
  assert "| cola | whole process wall s | 100 | 100 | 1.00 |" in both
  assert "| cola | seeds | 0 |  |  |" in both  # the seeds both frameworks ran
