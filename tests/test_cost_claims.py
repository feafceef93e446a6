"""benchmarks/cost_claims.py measures at the study's own settings: the config a sweep run of
the cost rules' task and method starts from, with the overrides its stage-1 runs were
trained with."""
from benchmarks import cost_claims
from studies.papers import PAPERS as p


def test_the_cost_task_settings_are_its_stage1_runs():
  config_file, sets = cost_claims.task_settings(p, p.cost_rules[0].task)
  assert config_file == p.tasks["mr"].config
  assert "task.max_length=64" in sets and "loss.class_weights=balanced" in sets


def test_study_config_is_the_preset_with_the_overrides_typed():
  c = cost_claims.study_config("configs/textgcn.py", "mr", "gloss",
                               ["task.max_length=64", "optim.lr=5e-5", "num_epochs=3",
                                "loss.class_weights=balanced", "task.data_dir=../d"])
  assert (c.loss.name, c.loss.sigma_mode) == ("gloss", "fixed")
  assert c.task.max_length == 64 and isinstance(c.task.max_length, int)
  assert c.optim.lr == 5e-5 and c.num_epochs == 3 and c.task.data_dir == "../d"
  assert c.loss.class_weights == "balanced"
  scl = cost_claims.study_config("configs/textgcn.py", "mr", "scl", [])
  assert scl.loss.name == "scl" and scl.task.max_length == 128  # the file's own default


def test_a_recorded_cpu_kind_is_told_apart_from_its_prefix():
  rows = [{"run": "task=mr,method=gloss,cpu=amd_f25m17"}, {"run": "task=mr,method=scl,seed=0"}]
  assert cost_claims.kind_recorded(rows, "amd_f25m17")
  assert not cost_claims.kind_recorded(rows, "amd_f25m1")
  assert not cost_claims.kind_recorded([], "amd_f25m17")
