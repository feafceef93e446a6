"""Faults and bad input: each fails early with one clear message, or is recovered from."""
import pytest

from tests import helpers


def test_unknown_config_field_is_one_line_with_the_closest_names():
  p = helpers.run_py(["train.py", "--config", "configs/quickstart.py", "--workdir", "/tmp/x",
                      "--config.loss.lamda=0.3"])
  lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
  assert p.returncode != 0 and len(lines) == 1, p.stderr[-3000:]
  assert "Unknown config field 'loss.lamda'" in lines[0]
  assert "Did you mean 'loss.lam'?" in lines[0] and "Fields of section 'loss': anchors," in lines[0]


@pytest.mark.parametrize("path,want", [
    ("los.lam", "Did you mean 'loss'? Fields of the top level: batch_size,"),
    ("lr", "Did you mean 'optim.lr'?"),  # a field of that name in another section
    ("optim.learning_rate", "Fields of section 'optim': clip_norm, head_lr_mult, lr,"),
    ("multi_exit.strategi", "Did you mean 'multi_exit.strategy'?")])
def test_unknown_config_field_message(path, want):
  from configs import common
  msg = common.unknown_field(common.base_config(), path)
  assert msg.startswith(f"Unknown config field {path!r}.") and want in msg, msg
  assert common.unknown_field(common.base_config(), "loss.lam") is None


def test_max_length_beyond_the_position_table_fails_before_reading_data(tiny_model_dir,
                                                                        tmp_path, monkeypatch):
  """The tiny model has 128 positions: 256-token inputs would index past the table (NaN at
  step 1). The run fails naming both numbers before any data is read."""
  from acl_jax import data as data_lib
  from acl_jax.train import loop

  def no_data(*a, **k):
    raise AssertionError("data was read before the max_length check")
  monkeypatch.setattr(data_lib, "load_task", no_data)
  with pytest.raises(ValueError, match=r"task.max_length=256 .*max_position_embeddings=128"):
    loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, **{"task.max_length": 256}),
                            str(tmp_path / "run"))


def test_roberta_covers_two_positions_fewer_than_its_table():
  from acl_jax.models.config import EncoderConfig
  assert EncoderConfig(family="roberta", max_position_embeddings=514, pad_token_id=1,
                       hidden_size=32, num_heads=4).max_length == 512
  assert EncoderConfig(max_position_embeddings=512, hidden_size=32, num_heads=4).max_length == 512


def test_unsupported_activation_fails_at_load_naming_the_supported_ones(tiny_model_dir,
                                                                         tmp_path):
  import json
  import shutil
  from acl_jax.models import hf
  folder = tmp_path / "model"
  shutil.copytree(tiny_model_dir, folder)
  cfg = json.loads((folder / "config.json").read_text())
  cfg["hidden_act"] = "swishy"
  (folder / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(ValueError, match=r"'swishy'.*supported: \['gelu', 'gelu_new'"):
    hf.load_pretrained(str(folder), num_labels=2, with_tokenizer=False)
  with pytest.raises(ValueError, match="'swishy'"):  # the early check of train.py's runs too
    hf.check_max_length(str(folder), 32)


# ---- one run per workdir ----------------------------------------------------------------------

def _copy_run(src, tmp_path):
  import shutil
  dst = str(tmp_path / "run")
  shutil.copytree(src, dst)
  return dst


def test_config_changes_name_the_changed_fields():
  """Changes are counted over the fields both configs have: a field one side lacks (a field
  added to the config since) is no change."""
  import json
  from acl_jax import provenance
  from configs import quickstart
  flat = lambda c: provenance.flatten(json.loads(c.to_json_best_effort()))
  c = quickstart.get_config()
  old = flat(c)
  c.num_steps, c.loss.tau = 480, 0.1
  assert provenance.config_changes(old, flat(c)) == {"loss.tau": (0.3, 0.1),
                                                     "num_steps": (240, 480)}
  new = flat(quickstart.get_config("acl_cl"))
  assert provenance.config_changes({k: v for k, v in new.items() if k != "loss.tau"}, new) == {}


def test_resume_with_another_method_is_refused_before_loading(tiny_model_dir, ce_run, tmp_path,
                                                              monkeypatch):
  """A CE workdir re-run with ACL must not train ACL on top of CE weights: one error names
  every field that says what is trained (old -> new) and the fix; config.json is kept."""
  import os
  from acl_jax.train import loop, setup as setup_lib
  wd = _copy_run(ce_run, tmp_path)
  before = open(os.path.join(wd, "config.json")).read()

  def no_build(*a, **k):
    raise AssertionError("the model and data loaded before the config check")
  monkeypatch.setattr(setup_lib, "build", no_build)
  acl = helpers.tiny_config(tiny_model_dir, "runlocal,acl", **{"num_steps": 9})
  with pytest.raises(ValueError) as e:
    loop.train_and_evaluate(acl, wd)
  msg = str(e.value)
  assert "loss.gate: False -> True" in msg and "loss.name: 'ce' -> 'acl_embed'" in msg
  assert "loss.lam: -1.0 -> 0.5" in msg and "Use a new --workdir" in msg
  assert "num_steps: " not in msg  # a resumable field is not part of the refusal
  for over in ({"task.max_length": 16}, {"seed": 1}, {"model.exits": "all"},
               {"task.train_file": "other.csv"}, {"batch_size": 4}):
    with pytest.raises(ValueError, match=f"{next(iter(over))}: .* -> "):
      loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, **over), wd)
  assert open(os.path.join(wd, "config.json")).read() == before


# A resume of the shared CE run to 9 steps at another learning rate (both fields resumable); the
# tests that resume it use this one config, so its train steps compile once.
LONGER = {"num_steps": 9, "optim.lr": 1e-4}


def test_resume_with_a_longer_schedule_appends_to_the_config_history(tiny_model_dir, ce_run,
                                                                     tmp_path):
  """Allowed changes (here num_steps and lr) keep config.json as the run started and append
  one entry per resume to config_history.jsonl; run_config (what eval.py and the sweep tables
  read) applies it."""
  import json
  import os
  from acl_jax import provenance
  from acl_jax.train import loop
  wd = _copy_run(ce_run, tmp_path)
  before = open(os.path.join(wd, "config.json")).read()
  hist = os.path.join(wd, provenance.CONFIG_HISTORY)
  assert not os.path.exists(hist)
  longer = helpers.tiny_config(tiny_model_dir, **LONGER)
  res = loop.train_and_evaluate(longer, wd)
  assert res["train"]["final_step"] == 9
  entry = {"step": 6, "changes": {"num_steps": [6, 9], "optim.lr": [5e-5, 1e-4]}}
  assert [json.loads(x) for x in open(hist)] == [entry]
  assert open(os.path.join(wd, "config.json")).read() == before
  loop.train_and_evaluate(longer, wd)  # the same config again: nothing to record
  assert [json.loads(x) for x in open(hist)] == [entry]
  now = provenance.run_config(wd)
  assert now["num_steps"] == 9 and now["optim"]["lr"] == 1e-4
  assert provenance.run_config(wd, before_step=6)["num_steps"] == 6
  # A resume from an earlier step (its later checkpoints lost) retrains the steps after it:
  # their entries go, and the change is recorded where it now takes effect.
  provenance.record_config(wd, helpers.tiny_config(tiny_model_dir, **{"num_steps": 12}), 3, True)
  assert [json.loads(x) for x in open(hist)] == [{"step": 3, "changes": {"num_steps": [6, 12]}}]
  provenance.record_config(wd, helpers.tiny_config(tiny_model_dir), 0, False)  # a fresh start
  assert not os.path.exists(hist)


# ---- damaged checkpoints ----------------------------------------------------------------------

def _params_at(workdir, step):
  """The params saved at `step` in ckpt/, as raw arrays (restored without a target)."""
  import os
  import orbax.checkpoint as ocp
  with ocp.StandardCheckpointer() as c:
    return c.restore(os.path.join(workdir, "ckpt", str(step), "state"))["params"]


def _truncate_largest_shard(workdir, step):
  import os
  files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(workdir, "ckpt", str(step),
                                                                   "state", "d")) for f in fs]
  path = max(files, key=os.path.getsize)
  os.truncate(path, os.path.getsize(path) // 2)


def test_corrupt_latest_checkpoint_resumes_from_the_previous_one(tiny_model_dir, ce_run,
                                                                 tmp_path):
  """A truncated shard in the latest checkpoint: one message names the folder and step (no
  flood of asyncio tracebacks), the run resumes from the previous checkpoint (two are kept)
  and retrains to the same params."""
  import os
  import chex
  from acl_jax import provenance
  wd = _copy_run(ce_run, tmp_path)
  assert provenance.checkpoint_steps(wd) == [3, 6]
  want = _params_at(wd, 6)
  _truncate_largest_shard(wd, 6)
  p = helpers.run_py(["train.py", "--config", "configs/quickstart.py:runlocal", "--workdir", wd,
                      f"--config.model.name={tiny_model_dir}", "--config.progress=False"])
  assert p.returncode == 0, p.stderr[-3000:]
  msgs = [ln for ln in (p.stdout + p.stderr).splitlines() if "cannot be read" in ln]
  assert len(msgs) == 1, p.stderr[-3000:]
  assert f"checkpoint {os.path.join(wd, 'ckpt', '6')} (step 6) cannot be read" in msgs[0]
  assert "Resuming from step 3" in msgs[0]
  assert "Traceback" not in p.stderr and "Event loop is closed" not in p.stderr, p.stderr[-3000:]
  assert os.listdir(os.path.join(wd, "ckpt_corrupt")) == ["6"]
  assert provenance.checkpoint_steps(wd) == [3, 6]
  chex.assert_trees_all_equal(_params_at(wd, 6), want)


def test_no_intact_checkpoint_names_the_folder_to_delete(tiny_model_dir, ce_run, tmp_path):
  import os
  from acl_jax import provenance
  from acl_jax.train import loop
  wd = _copy_run(ce_run, tmp_path)
  for step in (3, 6):
    _truncate_largest_shard(wd, step)
  ckpt = os.path.join(wd, "ckpt")
  with pytest.raises(OSError, match=rf"No checkpoint in {ckpt} can be read: the checkpoint "
                     rf"{ckpt}/6 \(step 6\) .*step 3.* delete {ckpt} to retrain"):
    loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir), wd)
  assert provenance.checkpoint_steps(wd) == [3, 6]  # nothing is moved without a fallback


def test_a_finished_run_is_read_at_its_own_step_or_not_at_all(ce_run, tmp_path):
  """Evaluation, export and prediction read a run's latest checkpoint itself: an unreadable one
  fails naming its step, and the previous step (other weights) is not read in its place. The
  best checkpoint, a folder of its own, still reads."""
  import json
  import os
  from acl_jax import provenance, run as run_lib
  wd = _copy_run(ce_run, tmp_path)
  run = run_lib.open(wd, "latest")
  assert run.step == 6 and run.label_names == ["rotten", "fresh"]
  assert [r["step"] for r in run.history if r["kind"] == "dev"] == [3, 6]
  data = os.path.join(wd, "ckpt", "6", "state", "d")
  for f in os.listdir(data):
    os.truncate(os.path.join(data, f), 0)
  ckpt = os.path.join(wd, "ckpt")
  with pytest.raises(OSError, match=rf"The latest checkpoint {ckpt}/6 \(step 6\) cannot "
                     r"be read .*never at an earlier one"):
    run_lib.open(wd, "latest")
  assert provenance.checkpoint_steps(wd) == [3, 6]  # reading moves nothing
  best = json.load(open(os.path.join(wd, "results.json")))["checkpoint_step"]
  assert run_lib.open(wd, "best").step == best


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_save_resumes_exactly(tiny_model_dir, tmp_path):
  """SIGKILL while the latest checkpoint of step 8 is being written (arrays in Orbax's temp
  folder, not yet renamed): the half-written folder is not a checkpoint, the resume from step
  4 removes it, and the final params equal an uninterrupted run's."""
  import os
  import signal
  import subprocess
  import sys
  import time
  import chex
  from acl_jax import provenance
  args = ["--config", "configs/quickstart.py:runlocal", f"--config.model.name={tiny_model_dir}",
          "--config.num_steps=12", "--config.eval_every=4", "--config.progress=False",
          "--config.model.dropout=0.1"]
  straight, killed = str(tmp_path / "straight"), str(tmp_path / "killed")
  whole = subprocess.Popen([sys.executable, "train.py", *args, "--workdir", straight],
                           cwd=helpers.REPO, env=helpers.env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
  marker = str(tmp_path / "saving")
  proc = subprocess.Popen([sys.executable, "-m", "tests.fault_workers", "pause_in_save", "8",
                           marker, *args, "--workdir", killed], cwd=helpers.REPO,
                          env=helpers.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
  deadline = time.time() + 300
  while not os.path.exists(marker) and proc.poll() is None and time.time() < deadline:
    time.sleep(0.05)
  assert os.path.exists(marker), proc.stderr.read()[-3000:] if proc.poll() is not None else ""
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  tmp = open(marker).read()
  assert os.path.isdir(tmp) and ".orbax-checkpoint-tmp" in os.path.basename(tmp)
  assert provenance.checkpoint_steps(killed) == [4]  # the half-written step is no checkpoint
  assert whole.wait(timeout=300) == 0, whole.stderr.read()[-3000:]
  p = helpers.run_py(["train.py", *args, "--workdir", killed])
  assert p.returncode == 0, p.stderr[-3000:]
  log = p.stdout + p.stderr  # train.py logs to stdout (acl_jax.logs)
  assert "Resumed from" in log and "at step 4" in log, log[-3000:]
  assert not os.path.exists(tmp)
  assert sorted(os.listdir(os.path.join(killed, "ckpt"))) == ["12", "8"]
  assert provenance.checkpoint_steps(straight) == [8, 12]
  chex.assert_trees_all_equal(_params_at(killed, 12), _params_at(straight, 12))


def test_on_sigterm_calls_back_in_the_main_thread_and_restores_the_previous_handler():
  """The one handler shape of the training loop and the sweep driver: installed in the main
  thread only, and the handler before it is back after the block, also after an error."""
  import os
  import signal
  import threading
  from acl_jax import signals
  before, got = signal.getsignal(signal.SIGTERM), []
  with signals.on_sigterm(got.append) as installed:
    assert installed and signal.getsignal(signal.SIGTERM) is not before
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
  assert got == ["SIGTERM", "SIGTERM"] and signal.getsignal(signal.SIGTERM) is before
  with pytest.raises(KeyError):
    with signals.on_sigterm(got.append):
      raise KeyError("x")
  assert signal.getsignal(signal.SIGTERM) is before
  with signals.on_sigterm(got.append, enabled=False) as installed:
    assert not installed and signal.getsignal(signal.SIGTERM) is before
  seen = []

  def in_thread():
    with signals.on_sigterm(got.append) as on:
      seen.append((on, signal.getsignal(signal.SIGTERM) is before))
  t = threading.Thread(target=in_thread)
  t.start()
  t.join()
  assert seen == [(False, True)]


def test_sigterm_checkpoints_its_step_stops_and_resumes_exactly(tiny_model_dir, tmp_path):
  """SIGTERM during set-up stops a run before its first step; SIGTERM during step 5 of 6
  (checkpoints at 3 and 6, train rows every 4 steps) checkpoints step 5 with the train-log
  sums since step 4, exits 143 with one line naming the step, and the same command resumes
  there: params, dev evaluations and train rows equal an uninterrupted run's."""
  import json
  import os
  import chex
  from acl_jax import provenance
  wd, straight = str(tmp_path / "stopped"), str(tmp_path / "straight")
  args = ["--config", "configs/quickstart.py:runlocal", f"--config.model.name={tiny_model_dir}",
          "--config.progress=False", "--config.log_every=4", "--config.model.dropout=0.1"]

  def stopped_at(step):
    p = helpers.run_py(["tests/fault_workers.py", "sigterm_at", str(step), *args, "--workdir",
                        wd])
    assert p.returncode == 143, p.stderr[-3000:]
    return p.stderr.strip().splitlines()[-1]
  assert stopped_at(0) == ("stopped: SIGTERM before step 1 of 6: the run is where its last "
                           "checkpoint left it; the same command resumes it.")
  assert provenance.checkpoint_steps(wd) == []
  assert stopped_at(5) == (f"stopped: SIGTERM at step 5 of 6: step 5 is checkpointed in {wd}; "
                           "the same command resumes the run there.")
  assert provenance.checkpoint_steps(wd) == [3, 5]
  assert not os.path.exists(os.path.join(wd, "results.json"))
  assert "Stopped: SIGTERM at step 5 of 6" in open(os.path.join(wd, "train.log")).read()
  for w in (wd, straight):
    p = helpers.run_py(["train.py", *args, "--workdir", w])
    assert p.returncode == 0, p.stderr[-3000:]
    assert ("Resumed from" in p.stdout + p.stderr) == (w == wd)
  chex.assert_trees_all_equal(_params_at(wd, 6), _params_at(straight, 6))

  def rows(workdir):
    rs = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
    return [{k: v for k, v in r.items() if k != "steps_per_s"} for r in rs]
  assert [(r["step"], r["kind"]) for r in rows(wd)] == [(3, "dev"), (4, "train"), (6, "train"),
                                                        (6, "dev")]
  assert rows(wd) == rows(straight)


# ---- a G-Loss that cannot learn ---------------------------------------------------------------

def test_gloss_floor_share_predicts_a_zero_gradient():
  """At sigma 0.01 every edge but the strongest is below the weight floor and G-Loss has no
  gradient; at the SPEC's 0.667 no edge is there and it has one."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from acl_jax.losses import gloss
  from acl_jax.losses.graph import gloss_floor_share
  rng = np.random.default_rng(0)
  x = rng.normal(size=(16, 32)).astype(np.float32)
  y = rng.integers(0, 2, 16)
  # Jitted per sigma (static, as the loss gets it from the config): op by op it compiles more.
  grad_at = jax.jit(jax.grad(lambda f, s: gloss(f, jnp.asarray(y), jax.random.key(0), 2, s)[0]),
                    static_argnums=1)
  grad = lambda s: np.abs(grad_at(x, s)).max()
  assert gloss_floor_share(x, 0.01, 16) == 1.0  # all but the strongest pair
  assert grad(0.01) <= 1e-7
  assert gloss_floor_share(x, 0.667, 16) == 0.0 and grad(0.667) > 1e-3
  assert 0.0 < gloss_floor_share(x, 0.1, 16) < 1.0 and grad(0.1) > 1e-3
  assert gloss_floor_share(x, 0.01, 8) == 1.0  # two graphs of 8


def test_gloss_at_a_tiny_sigma_warns_with_the_floor_share(tiny_model_dir, tmp_path, caplog):
  """The tiny random model's features lie ~100x closer together than MiniLM's (where sigma
  0.01 leaves every edge but the strongest at the floor), so here sigma 1e-4 does."""
  from acl_jax.train import loop
  cfg = helpers.tiny_config(tiny_model_dir, "runlocal,gloss", **{
      "loss.sigma": 1e-4, "num_steps": 1, "eval_every": 1})
  with caplog.at_level("INFO"):
    loop.train_and_evaluate(cfg, str(tmp_path / "run"))
  warned = [r.getMessage() for r in caplog.records
            if r.levelname == "WARNING" and "weight floor" in r.getMessage()]
  assert len(warned) == 1, caplog.text
  assert "G-Loss at sigma=0.0001 learns next to nothing" in warned[0]
  assert "of the edges of a 8-node batch graph" in warned[0] and "loss.sigma_mode=sqrt" in warned[0]
  assert float(warned[0].split("features, ")[1].split("%")[0]) > 90.0
  # the train labels reach the calibration: it states G-Loss's reach too
  assert any("have no kept item of their class" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("case,warns", [("2 equal", False), ("20 equal", True),
                                        ("8 skewed", True)])
def test_gloss_calibration_states_how_much_of_it_is_unreachable(case, warns, caplog):
  """Before training, the calibration logs the expected share of hidden items (and of the
  class-weighted loss) with no kept item of their class in a batch graph, and warns with the
  fixes where either passes a quarter: 20 equal classes in a 32-node graph leave about a
  third of the items; 8 skewed classes leave few items but, balanced, much of the loss."""
  import numpy as np
  from acl_jax.losses import balanced_class_weights, unreachable_share
  from acl_jax.train import objectives
  from configs import textgcn
  cfg = textgcn.get_config("20ng,gloss")
  rng = np.random.default_rng(0)
  classes = int(case.split()[0])
  if case.endswith("skewed"):  # R8's train counts
    labels = np.repeat(np.arange(8), [2840, 1596, 253, 251, 206, 190, 108, 41])
  else:
    labels = np.arange(4000) % classes
  weights = balanced_class_weights(labels, classes)
  with caplog.at_level("INFO"):
    objectives.calibrate(cfg.loss, lambda n: rng.normal(size=(n, 16)).astype(np.float32), 32,
                         1, labels, classes, weights)
  items, weight = unreachable_share(labels, classes, 32, 0.7, weights)
  said = [r.getMessage() for r in caplog.records
          if r.levelname == "INFO" and "no kept item" in r.getMessage()]
  assert len(said) == 1 and f"{100 * items:.1f}% of the hidden items" in said[0], caplog.text
  assert "32-node batch graph keeping 22 labels" in said[0]
  assert f"({100 * weight:.1f}% of the weighted loss)" in said[0]
  warned = [r.getMessage() for r in caplog.records
            if r.levelname == "WARNING" and "reaches little" in r.getMessage()]
  assert len(warned) == int(warns), caplog.text
  if warns:
    assert (f"{100 * items:.1f}% of the hidden items ({100 * weight:.1f}% of the weighted "
            "loss)") in warned[0] and "loss.gloss_global" in warned[0]
  if case == "20 equal":
    assert 0.30 < items < 0.34
  if case == "8 skewed":
    assert items < objectives.UNREACHABLE_WARN < weight


def test_a_failed_save_is_one_message_and_orbax_thread_tracebacks_are_dropped(
    tiny_model_dir, ce_run, tmp_path, monkeypatch):
  """A full disk: Orbax logs each write thread's traceback, then raises to the caller. The
  tools show the raised error alone, in one line naming the step and what to do, which
  train.log keeps as what ended the run."""
  import logging
  import os
  from acl_jax import logs
  from acl_jax.train import checkpoint as ckpt_lib, loop
  wd = _copy_run(ce_run, tmp_path)
  full = "RESOURCE_EXHAUSTED: Failed to write 542932 bytes: No space left on device"

  def no_space(self, *a, **kw):
    raise ValueError(full + "\n  (and a long traceback)")
  import orbax.checkpoint as ocp
  monkeypatch.setattr(ocp.CheckpointManager, "save", no_space)
  with pytest.raises(OSError, match=r"Saving the checkpoint of step 9 in .*ckpt failed \(ValueE"
                     r"rror: RESOURCE_EXHAUSTED.*No space left on device\)\. The earlier "
                     r"checkpoints are intact.*resume from step 6"):
    loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, **LONGER), wd)
  assert ckpt_lib  # the error is raised by Checkpoints.save
  last = open(os.path.join(wd, "train.log")).read().splitlines()[-1]  # what ended the run
  assert "Stopped: Saving the checkpoint of step 9" in last and "resume from step 6" in last
  logs.setup()
  kept = []
  handler = logging.Handler()
  handler.emit = kept.append
  logging.getLogger().addHandler(handler)
  try:
    absl = logging.getLogger("absl")
    absl.error("[thread=array_type_handler] _SignalingThread.run() raised an exception: %s", full)
    absl.error("something else")
  finally:
    logging.getLogger().removeHandler(handler)
  assert [r.getMessage() for r in kept] == ["something else"]
  assert os.path.isdir(os.path.join(wd, "ckpt", "6"))
