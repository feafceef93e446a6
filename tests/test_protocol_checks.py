"""A protocol the planner could not take to the end is refused where it enters: loaded or
planned (acl_jax/study/checks.py), and the later stages' second looks train every run their rules
read (acl_jax/study/planner.py), on small protocols whose answers are known."""
import dataclasses

import pytest

from acl_jax.study import checks, later, loader, planner, protocol as proto
from acl_jax.study.records import parse_name
from studies.papers import PAPERS

LR, EPOCHS = "5e-5", 3


def _task(name="t", sets=("task.data_dir=/d",)):
  return proto.Task(name, name.upper(), "configs/glue.py", 64, EPOCHS, "accuracy", "dev", 1.0,
                    sets=tuple(sets))


def _protocol(**kw):
  base = dict(name="x", tasks={"t": _task()}, claims={"c": "", "lam": "", "e": ""},
              stages={1: "", 2: ""},
              comparisons=(proto.Comparison("c", "t", "acl", "ce", "noninferior"),),
              lr_grid=(LR,), lr_preferred=LR, budget_gain=None)
  p = proto.Protocol(**{**base, **kw})
  checks.check(p)
  return p


def _row(sweep, run, score):
  s = parse_name(run)
  return {"sweep": sweep, "run": run, "task": s["task"], "method": s["method"],
          "seed": int(s["seed"]), "budget": {"lr": float(LR), "num_epochs": EPOCHS},
          "evals": [{"step": 1, "dev": {"accuracy": score / 100}}]}


def _record(rows, runs, score):
  for r in runs:
    rows.setdefault(r.sweep, []).append(_row(r.sweep, r.name, score(r)))


def test_a_grid_rules_second_look_trains_the_preset_seeds_stage1_lacks():
  """Stage 1 decides ACL against CE at its first look, so it holds ACL seeds 0-2 alone, and
  CE+SCL not at all. The λ rule's second look then trains both presets' seeds 3-4 (ACL's 0.5,
  CE+SCL's 0.9) in stage 2, and the rule is decided at its second look."""
  p = _protocol(
      arms={2: (proto.Arm("t", ("acl", "scl"), grid=(("loss.lam", ("0.1", "0.5", "0.9")),)),)},
      rules={2: (proto.RangeRule("lam", "t", "acl", "scl", "loss.lam", ("0.1", "0.5", "0.9")),)},
      presets={("acl", "loss.lam"): "0.5", ("scl", "loss.lam"): "0.9"})
  rows = {p.lr_record: [_row(p.lr_record, planner.lr_run(p, "t", LR).name, 80.0)]}
  seed = lambda r: int(r.settings[-1][1])
  _record(rows, planner.decisions(p, rows).ready,
          lambda r: 80 + (5 + 0.1 * seed(r) if r.method == "acl" else 0))
  assert [v.look for v in planner.decisions(p, rows).verdicts.values()] == [1]
  noise = {0: 0.0, 1: 0.3, 2: -0.2, 3: 0.1, 4: -0.1}
  lam = lambda r: float(dict(r.settings)["loss.lam"])
  trained = []
  while True:
    ready, _ = planner.later_stage_ready(p, 2, rows)
    if not ready:
      break
    trained += [r.name for r in ready]
    _record(rows, ready, lambda r: 80 + noise[seed(r)] + (
        0 if r.method == "acl" else lam(r) + 0.5 * seed(r)))
  assert {f"task=t,method=acl,loss.lam=0.5,seed={s}" for s in (3, 4)} <= set(trained)
  assert {f"task=t,method=scl,loss.lam=0.9,seed={s}" for s in (0, 1, 2, 3, 4)} <= set(trained)
  look, _ = later.range_result(p, planner._index(rows), 2, p.rules[2][0])  # pylint: disable=protected-access
  assert look == 2


def test_a_stage1_baselines_second_look_keeps_its_comparisons_extra():
  extra = ("model.exit_pooling=mean",)
  p = _protocol(comparisons=(proto.Comparison("c", "t", "jt", "ce", "noninferior", extra),),
                arms={2: (proto.Arm("t", ("acl_cl",), extra=("optim.head_lr_mult=20",)),)},
                rules={2: (proto.Comparison("e", "t", "acl_cl", "jt", "superior"),)})
  st = planner.TaskState("t", lr=LR, epochs=EPOCHS)
  idx = {(p.stage_record[1], later.run_name("t", "jt", s)): _row("stage1", later.run_name(
      "t", "jt", s), 80.0) for s in (0, 1, 2)}
  idx.update({(p.stage_record[2], later.run_name("t", "acl_cl", s)): _row(
      "stage2", later.run_name("t", "acl_cl", s), 80.0 + (1, -1, 0.5)[s]) for s in (0, 1, 2)})
  jt = [r for r in planner.second_look_runs(p, 2, "t", st, idx) if r.method == "jt"]
  assert [r.name for r in jt] == ["task=t,method=jt,seed=3", "task=t,method=jt,seed=4"]
  assert all(set(extra) <= set(r.sets) for r in jt)


@pytest.mark.parametrize("change,says", [
    (dict(look_seeds=((0, 1, 2), (2, 3))), "each seed once"),
    (dict(look_seeds=((0, 1, 2), (3, 3))), "each seed once"),
    (dict(lr_from={"u": "v"}, tasks={"t": _task(), "u": _task("u"), "v": _task("v")},
          arms={2: (proto.Arm("u", ("ce",)),)}),
     "lr_from 'u': 'v': a task takes the lr of a task that picks its own"),
    (dict(lr_from={"u": "v"}, tasks={"t": _task(), "u": _task("u"), "v": _task("v")},
          arms={2: (proto.Arm("u", ("ce",)),), 3: (proto.Arm("v", ("ce",)),)},
          stages={1: "", 2: "", 3: ""}),
     "lr_from 'u': 'v'"),
    (dict(lr_from={"u": "t", "w": "u"},
          tasks={"t": _task(), "u": _task("u"), "w": _task("w")}),
     "lr_from 'w': 'u'"),
    (dict(anchors={"t": 80.0}, glue_hf_anchor=("h", ""), tasks={"t": _task(sets=())}),
     r"anchors\['t'\]: .* task.data_dir"),
    (dict(arms={2: (proto.Arm("t", ("scl",), grid=(("model.w", ("1,2",)),)),)}),
     "a grid value is part of a run's name"),
    (dict(arms={2: (proto.Arm("t", ("scl",), grid=(("optim.lr", ("1e-5",)),)),)}),
     "a grid may not set"),
    (dict(arms={2: (proto.Arm("t", ("scl",), extra=("num_epochs=10",)),)}),
     "sets num_epochs: the task's sets, the gates"),
    (dict(arms={2: (proto.Arm("t", ("scl",), extra=("task.data_dir=/e",)),)}),
     "sets task.data_dir"),
    (dict(arms={2: (proto.Arm("t", ("ce",), extra=("model.exit_pooling=mean",)),)}),
     r"stage 1 trains ce on t with extra \[\] and stage 2 with \['model.exit_pooling=mean'\]"),
    (dict(rules={2: (proto.Comparison("c", "t", "triplet", "ce", "superior"),)}),
     "nothing trains triplet on t"),
    (dict(arms={2: (proto.Arm("t", ("acl_cl",)),)},
          rules={2: (proto.ExitRule("e", "t", "acl_cl", ("ce",)),)}),
     "ce on t must be a multi-exit method"),
    (dict(arms={2: (proto.Arm("t", ("acl", "scl"), grid=(("loss.lam", ("0.1", "0.9")),
                                                        ("loss.tau", ("0.1",)))),)},
          rules={2: (proto.RangeRule("lam", "t", "acl", "scl", "loss.lam", ("0.1", "0.9")),)}),
     "no arm of stage 2 or before trains acl on t over loss.lam alone"),
    (dict(arms={2: (proto.Arm("t", ("scl",), grid=(("loss.lam", ("0.1",)),)),)},
          rules={2: (proto.StableRule("lam", "t", "scl", "loss.lam", ("0.1", "0.9"), "0.9"),)},
          presets={("scl", "loss.lam"): "0.9"}),
     "a value outside its grid must be the method's preset, from stage 1's runs"),
    (dict(arms={2: (proto.Arm("t", ("scl",), seeds=(0, 1)),)},
          rules={2: (proto.Comparison("c", "t", "scl", "ce", "superior"),)}),
     r"lacks the first look's seeds \(0, 1, 2\)"),
    (dict(arms={2: (proto.Arm("t", ("acl",), grid=(("loss.lam", ("0.1",)),)),)},
          described=(proto.Described("t", "acl", "loss.lam", ("0.1", "0.3"), "0.5"),),
          presets={("acl", "loss.lam"): "0.5"}),
     "no arm of a later stage trains acl on t over loss.lam alone at 0.1, 0.3"),
    (dict(arms={2: (proto.Arm("t", ("acl",), grid=(("loss.lam", ("0.1",)),)),)},
          described=(proto.Described("t", "acl", "loss.lam", ("0.1",), "0.7"),),
          presets={("acl", "loss.lam"): "0.5"}),
     r"its preset '0.7' is read from stage 1's acl runs on t"),
    (dict(arms={2: (proto.Arm("t", ("scl",), grid=(("loss.lam", ("0.1",)),)),)},
          described=(proto.Described("t", "scl", "loss.lam", ("0.1",), "0.9"),),
          presets={("scl", "loss.lam"): "0.9"}),
     "a stage-1 comparison that trains it there"),
    (dict(cost_rules=(proto.CostRule("nope", "t", "share", "gloss", 0.02),)),
     "its claim and task must be the protocol's"),
    (dict(cost_rules=(proto.CostRule("c", "t", "share", "gloss", 2.0),)),
     r"a share's bound is a fraction in \(0, 1\)"),
    (dict(cost_rules=(proto.CostRule("c", "t", "ratio", "gloss", 0.84),)),
     "a ratio rule needs a baseline"),
    (dict(cost_rules=(proto.CostRule("c", "t", "ratio", "gloss", 1.2, baseline="scl"),)),
     "the paper's ratio in \\(0, 1\\) as its bound"),
    (dict(cost_rules=(proto.CostRule("c", "t", "ratio", "gloss", 0.8, baseline="sgd"),),
          labels={"gloss": "G", "scl": "S"}),
     "sgd is no method the protocol labels"),
    (dict(cost_rules=(proto.CostRule("c", "t", "speed", "gloss", 0.84),)),
     "kind 'speed' is not 'share' or 'ratio'"),
    (dict(cost_rules=(proto.CostRule("c", "t", "share", "gloss", 0.02, record="a/b"),)),
     "is not a record name"),
])
def test_a_protocol_the_planner_cannot_finish_is_refused(change, says):
  with pytest.raises(ValueError, match=says):
    _protocol(**change)


def test_the_papers_protocol_and_what_it_may_vary_pass():
  assert _protocol(arms={2: (proto.Arm("t", ("scl",), extra=("model.dropout=0.2",)),)},
                   rules={2: (proto.Comparison("c", "t", "scl", "ce", "superior"),)})
  # the preset from stage 1 stands in for a value outside the arm's grid
  assert _protocol(arms={2: (proto.Arm("t", ("acl",), grid=(("loss.lam", ("0.1",)),)),)},
                   rules={2: (proto.StableRule("lam", "t", "acl", "loss.lam", ("0.1", "0.5"),
                                               "0.5"),)},
                   presets={("acl", "loss.lam"): "0.5"})
  assert _protocol(arms={2: (proto.Arm("t", ("acl",), grid=(("loss.lam", ("0.1", "0.9")),)),)},
                   described=(proto.Described("t", "acl", "loss.lam", ("0.1", "0.9"), "0.5"),),
                   presets={("acl", "loss.lam"): "0.5"})
  assert dataclasses.replace(PAPERS, name="again").arms == PAPERS.arms


def test_the_stage1_estimate_is_what_the_planner_trains():
  """A task that takes its lr from another trains no lr grid, and a CE with an extra of its
  own is not the lr grid's run: the estimate counts what the planner trains."""
  from acl_jax.study import estimates  # pylint: disable=import-outside-toplevel
  extra = ("model.exit_pooling=mean",)
  p = _protocol(tasks={"t": _task(), "u": _task("u")}, lr_from={"u": "t"}, comparisons=(
      proto.Comparison("c", "t", "acl", "ce", "noninferior"),
      proto.Comparison("c", "u", "jt", "ce", "noninferior", extra)))
  rows = {}
  for _ in range(4):
    _record(rows, planner.decisions(p, rows).ready, lambda r: 80.0 + int(r.settings[-1][1]))
  first, _ = estimates.whole_stage1(p)
  planned = planner.decisions(p, rows).planned
  assert sorted(r.sweep + r.name for r in first if r.task == "u") == sorted(
      r.sweep + r.name for r in planned if r.task == "u")
  # t picks its own lr: its CE seed 0 is the lr run, which stage 1 takes (one run, counted once)
  assert sorted(r.sweep + ":" + r.name for r in first if r.task == "t" and r.method == "ce") == [
      "lr:task=t,method=ce,optim.lr=5e-5,seed=0", "stage1:task=t,method=ce,seed=1",
      "stage1:task=t,method=ce,seed=2"]


def _study_file(tmp_path, change: str) -> str:
  """A user's protocol file: studies/example_csv.py's study with `change` (dataclasses.replace
  arguments, `_base` being the example's protocol), as STUDY."""
  path = tmp_path / "mine.py"
  path.write_text(
      "import dataclasses\n"
      "from acl_jax.study import protocol as proto\n"
      "from acl_jax.study.protocol import Arm, Comparison\n"
      "from studies import example_csv\n"
      "_base = example_csv.study('data/train.csv', 'data/dev.csv')\n"
      f"STUDY = dataclasses.replace(_base, {change})\n")
  return f"{path}:STUDY"


@pytest.mark.parametrize("change,says", [
    ("comparisons=(Comparison('acl_vs_ce', 'mine', 'acll', 'ce', 'noninferior'),)",
     r"comparison 'acl_vs_ce' on mine names method 'acll', which no preset has; methods: ce, "),
    ("tasks={'mine': dataclasses.replace(_base.tasks['mine'], metric='macro-f1')}",
     r"task 'mine': metric 'macro-f1' is not one that runs record; give one of accuracy, "
     r"macro_f1"),
    ("claims={'acl_beats_ce': 'ACL beats CE'}",
     r"comparison acl vs ce on mine decides claim 'acl_vs_ce', which `claims` lacks"),
    ("tasks={'mine': dataclasses.replace(_base.tasks['mine'], "
     "sets=_base.tasks['mine'].sets + ('num_step=30',))}",
     r"task mine's lr grid: run .* does not resolve: Unknown config field 'num_step'. Did you "
     r"mean 'num_steps'"),
    ("stages={1: '', 2: ''}, arms={2: (Arm('mine', ('acl',), grid=(('loss.lamm', "
     "('0.1',)),)),)}",
     r"stage 2 arm on mine: run task=mine,method=acl,loss.lamm=0.1,seed=0 .* Unknown config "
     r"field 'loss.lamm'. Did you mean 'loss.lam'"),
    ("comparisons=(Comparison('acl_vs_ce', 'mine', 'acl', 'ce', 'noninferior', "
     "extra=('optim.lr_mult=2',)),)",
     r"comparison 'acl_vs_ce' on mine: .* Unknown config field 'optim.lr_mult'"),
])
def test_a_protocol_whose_runs_would_not_start_is_refused_when_it_loads(tmp_path, change,
                                                                         says):
  """What train.py would refuse after the study had trained for hours, refused in one line
  when the protocol loads: a method no preset has, a metric no run records, a claim without
  its words, a field no config has (in a task's sets, a grid, an extra)."""
  with pytest.raises(ValueError, match=says) as e:
    loader.load(_study_file(tmp_path, change))
  assert "\n" not in str(e.value)
  assert loader.load(_study_file(tmp_path, "name='mine'")).name == "mine"  # the example loads


def test_the_sweep_refuses_a_wrong_protocol_before_any_run(tmp_path):
  """A method typo: exit 2, one line naming the method and the valid ones, nothing started
  (no run folder); `csv,acll` is named as a method, not as a file format."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  from acl_jax.study import identity  # pylint: disable=import-outside-toplevel
  from tests import helpers  # pylint: disable=import-outside-toplevel
  study = _study_file(tmp_path, "comparisons=(Comparison('acl_vs_ce', 'mine', 'acll', 'ce', "
                                "'noninferior'),)")
  root = tmp_path / "runs"
  out = subprocess.run(
      [sys.executable, "-m", "scripts.sweep", "--protocol", study, "--stage", "1", "--root",
       str(root), "--records", str(tmp_path / "records")], cwd=helpers.REPO,
      env=helpers.env(), capture_output=True, text=True, timeout=300)
  assert out.returncode == 2, out.stderr
  (line,) = out.stderr.strip().splitlines()
  assert line.startswith("error: --protocol ") and "names method 'acll'" in line
  assert "file format" not in line and not root.exists() and out.stdout == ""
  with pytest.raises(ValueError, match=r"Unknown config argument 'acll'; methods: "):
    identity.resolve("configs/files.py:csv,acll", (), helpers.REPO)


def test_a_comparisons_arms_may_differ_only_in_their_methods_own_fields(tmp_path):
  """configs/files.py weighs G-Loss's classes and not CE's: G-Loss against CE there is
  refused, naming the field and the fix; with the weights in the task's sets, both arms train
  with them. A later arm's extra that one method alone gets is refused too; the methods' own
  fields (G-Loss's sigma, ACL's lambda) may differ."""
  from acl_jax.study import resolve  # pylint: disable=import-outside-toplevel
  from configs import common  # pylint: disable=import-outside-toplevel
  from tests import helpers  # pylint: disable=import-outside-toplevel
  gloss = ("comparisons=(Comparison('g', 'mine', 'gloss', 'ce', 'superior'),), "
           "claims={'g': 'G-Loss beats CE'}")
  with pytest.raises(ValueError, match=(
      r"comparison 'g' on mine: gloss would train with loss.class_weights='balanced' and ce "
      r"with '' .* a field of neither method, so the verdict would measure it too. Set it for "
      r"both in the sets of task 'mine', e.g. \"loss.class_weights=balanced\"")):
    loader.load(_study_file(tmp_path, gloss))
  both = loader.load(_study_file(tmp_path, gloss + ", tasks={'mine': dataclasses.replace("
                                "_base.tasks['mine'], sets=_base.tasks['mine'].sets + "
                                "('loss.class_weights=balanced',))}"))
  ((_, _, _, a, b),) = resolve.paired_arms(both)
  weights = [identity_cfg["loss"]["class_weights"] for identity_cfg in (
      resolve.identity.resolve(r.config, resolve.overrides(r), helpers.REPO) for r in (a, b))]
  assert weights == ["balanced", "balanced"] and (a.method, b.method) == ("gloss", "ce")
  apart = ("stages={1: '', 2: ''}, arms={2: (Arm('mine', ('scl',), "
           "extra=('model.dropout=0.2',)),)}, rules={2: (Comparison('acl_vs_ce', 'mine', "
           "'scl', 'ce', 'superior'),)}")
  with pytest.raises(ValueError, match=r"stage 2 rule 'acl_vs_ce' on mine: scl would train "
                                       r"with model.dropout=0.2 and ce with -1.0"):
    loader.load(_study_file(tmp_path, apart))
  assert {"loss.sigma", "loss.sigma_mode", "loss.gamma_keep"} <= common.method_fields("gloss")
  assert "loss.class_weights" not in common.method_fields("gloss")
  assert {"loss.lam", "loss.gate", "loss.angle_params"} <= common.method_fields("acl")
  assert "loss.gate" not in common.method_fields("scl")
  assert {"model.exits", "multi_exit.strategy", "loss.tau"} <= common.method_fields("acl_cl")


def test_the_papers_protocol_is_fair():
  """Every paired comparison of this project's study (stage 1's and the later rules') trains
  its two arms alike but for their methods' own fields."""
  from acl_jax.study import resolve  # pylint: disable=import-outside-toplevel
  from tests import helpers  # pylint: disable=import-outside-toplevel
  assert len(resolve.paired_arms(PAPERS)) == 40
  resolve.check_fair(PAPERS, helpers.REPO)


def test_a_variant_is_a_method_spelt_with_its_overrides(tmp_path):
  """CE with balanced class weights, a baseline no preset is: its runs are named by the
  variant, trained as CE with the weights, identified by their resolved config (a CE run with
  the weights in its sets is the same run); G-Loss against it through configs/files.py is
  fair. A variant that trains as no preset, or sets what a task's sets set, is refused."""
  from acl_jax.study import identity, resolve  # pylint: disable=import-outside-toplevel
  from tests import helpers  # pylint: disable=import-outside-toplevel
  head = ("comparisons=(Comparison('g', 'mine', 'gloss', 'ce_balanced', 'superior'),), "
          "claims={'g': 'G-Loss beats CE, both weighted'}, ")
  p = loader.load(_study_file(tmp_path, head + "variants={'ce_balanced': proto.Variant("
                             "'ce', ('loss.class_weights=balanced',))}"))
  ((_, _, _, gloss, ce),) = resolve.paired_arms(p)
  assert ce.name == "task=mine,method=ce_balanced,seed=0"
  assert ce.config == "configs/files.py:csv,ce" and "loss.class_weights=balanced" in ce.sets
  plain = planner.method_run(p, "stage1", resolve._state(p, "mine"), "ce", 0)  # pylint: disable=protected-access
  same = lambda r, extra=(): identity.settings_identity(
      r.config, [*r.sets, *extra], {"seed": "0"}, helpers.REPO)
  assert same(ce) == same(plain, ("loss.class_weights=balanced",)) != same(plain)
  assert gloss.config == "configs/files.py:csv,gloss"
  with pytest.raises(ValueError, match=r"variant 'ce_balanced' names method 'cee', which no "
                                       r"preset has"):
    loader.load(_study_file(tmp_path, head + "variants={'ce_balanced': proto.Variant("
                           "'cee', ('loss.class_weights=balanced',))}"))
  with pytest.raises(ValueError, match=r"variant 'ce_balanced' sets eval_every, which a "
                                       r"task's sets"):
    loader.load(_study_file(tmp_path, head + "variants={'ce_balanced': proto.Variant("
                           "'ce', ('eval_every=5',))}"))
