"""Training: end to end, exact resume after SIGKILL, data parallelism, multi-process, bad input."""
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from acl_jax.errors import FileError
from tests import helpers


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _final_params(workdir):
  """The params of the latest checkpoint, flattened (restored without a target: raw arrays)."""
  import orbax.checkpoint as ocp
  path = os.path.join(workdir, "ckpt")
  steps = sorted(int(d) for d in os.listdir(path) if d.isdigit())
  with ocp.StandardCheckpointer() as c:
    tree = c.restore(os.path.join(path, str(steps[-1]), "state"))
  import jax
  return steps[-1], np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree["params"])])


def _copy(run, tmp_path, name):
  """A copy of the shared run `run` to change, and its results.json (what training returned)."""
  import shutil
  wd = shutil.copytree(run, str(tmp_path / name))
  with open(os.path.join(wd, "results.json")) as f:
    return wd, json.load(f)


def test_train_eval_end_to_end(ce_run, tmp_path):
  """The tiny quickstart run (the `ce_run` fixture: loop.train_and_evaluate), evaluated again
  by eval.py."""
  wd, res = _copy(ce_run, tmp_path, "run")
  assert res["train"]["final_step"] == 6
  from acl_jax import provenance
  assert res["train"]["code_versions"] == [provenance.git_revision()]  # which code trained it
  dev = res["dev"]
  assert 0.0 <= dev["accuracy"] <= 1.0 and dev["num_examples"] == 64
  assert {"macro_f1", "silhouette_micro", "silhouette_macro"} <= set(dev)
  recs = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl"))]
  assert [r["step"] for r in recs if r["kind"] == "dev"] == [3, 6]
  # The latest checkpoint holds the whole state (resume); the best the params (evaluation).
  tree = lambda kind: open(glob.glob(os.path.join(wd, kind, "*", "state", "_METADATA"))[0]).read()
  assert "opt_state" in tree("ckpt") and "opt_state" not in tree("best")
  assert "params" in tree("best")
  assert all(np.isfinite(r["loss"]) for r in recs if r["kind"] == "train")
  # eval.py rebuilds the model from the workdir and merges its splits into results.json:
  # what it did not evaluate (here the training record and a stale split) stays.
  path = os.path.join(wd, "results.json")
  before = json.load(open(path))
  before["old_split"] = {"accuracy": 0.5}
  before["dev"] = {"accuracy": -1.0}
  json.dump(before, open(path, "w"))
  p = helpers.run_py(["eval.py", "--workdir", wd, "--split", "dev,test", "--dump_features"])
  assert p.returncode == 0, p.stderr[-3000:]
  out = json.load(open(path))
  assert out["train"] == res["train"] and out["old_split"] == {"accuracy": 0.5}
  assert not [f for f in os.listdir(wd) if ".tmp" in f]  # the atomic write left no temp file
  assert out["dev"]["accuracy"] == pytest.approx(dev["accuracy"])
  assert out["test"]["num_examples"] == 64
  f = np.load(os.path.join(wd, "features_dev.npz"))
  assert f["feats"].shape == (64, 32) and f["label_emb"].shape == (2, 32)
  assert (f["preds"] == f["labels"]).mean() == pytest.approx(dev["accuracy"])


@pytest.mark.parametrize("source", ["device", "host"])
def test_the_donating_step_writes_the_replicated_state_in_place(source):
  """`step.replicate` places the state in buffers XLA owns, so the donating train step
  writes its outputs into them from the first call on. On CPU, buffers made from host memory
  alias it and cannot be donated: the first step then allocated a second state beside the
  temp block (BENCHMARKS.md, "Where the memory goes")."""
  import jax
  from acl_jax.train import setup as setup_lib, step as step_lib
  from tests.acl_utils import config, tiny_setup
  model, params, batches = tiny_setup(num_batches=1)
  if source == "host":
    params = jax.tree.map(np.asarray, params)
  mesh = step_lib.make_mesh(jax.devices()[:1])
  tr = setup_lib.make_trainer(config("ce"), model, params, mesh, num_labels=3, total_steps=10)
  pointers = lambda s: [x.unsafe_buffer_pointer() for x in jax.tree.leaves((s.params,
                                                                           s.opt_state))]
  before = pointers(tr.state)
  state, _ = tr.train_step(tr.state, step_lib.shard_batch(batches[0], mesh))
  assert pointers(state) == before


def test_train_py_trims_the_heap_around_each_evaluation(tiny_model_dir, tmp_path, monkeypatch):
  """train.py hands the heap's free memory back before an evaluation (the train step's temp
  block, which acl_jax.host_heap keeps) and after it and its saves, so their buffers and the
  next step's block are never resident at once: the loop's `on_phase` hook, wired by
  train.py to `Heap.trim`."""
  import train
  from acl_jax import host_heap
  from acl_jax.train import scoring
  events, evaluate = [], scoring.evaluate

  def recorded(*a, **kw):
    events.append("eval")
    return evaluate(*a, **kw)
  monkeypatch.setattr(scoring, "evaluate", recorded)
  heap = host_heap.Heap(kept=False, malloc_trim=lambda pad: events.append("trim"))
  train.train(helpers.tiny_config(tiny_model_dir), str(tmp_path / "run"), heap)
  first = events.index("eval")
  assert events[first - 1:first + 2] == ["trim", "eval", "trim"], events


def test_merge_results_keeps_other_splits_and_drops_stale_ones():
  from acl_jax.evaluate import merge_results
  old = {"checkpoint_step": 6, "dev": {"a": 1}, "test": {"a": 2}, "train": {"final_step": 6}}
  same = merge_results(old, {"checkpoint_step": 6, "dev": {"a": 3}})
  assert same == {"checkpoint_step": 6, "dev": {"a": 3}, "test": {"a": 2},
                  "train": {"final_step": 6}}
  other = merge_results(old, {"checkpoint_step": 4, "dev": {"a": 3}})
  assert other == {"checkpoint_step": 4, "dev": {"a": 3}, "train": {"final_step": 6}}


@pytest.mark.slow
def test_resume_after_sigkill_is_exact(tiny_model_dir, tmp_path):
  """Train N steps straight; separately SIGKILL mid-run and resume: final params equal.

  Slow (three 60-step training subprocesses, over 2 minutes on 2 cores): the default suite
  resumes in process, in test_crash_between_checkpoint_saves_is_mended.
  """
  args = ["train.py", "--config", "configs/quickstart.py:runlocal",
          f"--config.model.name={tiny_model_dir}", "--config.num_steps=60",
          "--config.eval_every=20", "--config.checkpoint_every=4", "--config.progress=False",
          "--config.model.dropout=0.1", "--config.task.max_train_examples=256"]
  # The uninterrupted run and the one to kill start together (their workdirs are apart).
  straight = str(tmp_path / "straight")
  whole = subprocess.Popen([sys.executable] + args + ["--workdir", straight], cwd=helpers.REPO,
                           env=helpers.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
  killed = str(tmp_path / "killed")
  proc = subprocess.Popen([sys.executable] + args + ["--workdir", killed], cwd=helpers.REPO,
                          env=helpers.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  ckpt = os.path.join(killed, "ckpt")
  deadline = time.time() + 240
  while time.time() < deadline:
    done = [int(d) for d in os.listdir(ckpt) if d.isdigit()] if os.path.isdir(ckpt) else []
    if done and max(done) >= 24:
      break
    time.sleep(0.05)
  assert proc.poll() is None, "run finished before it could be killed"
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  step_at_kill, _ = _final_params(killed)
  assert 24 <= step_at_kill < 60
  assert whole.wait(timeout=300) == 0, whole.stderr.read()[-3000:]
  p = helpers.run_py(args + ["--workdir", killed])
  assert p.returncode == 0, p.stderr[-3000:]
  s1, a = _final_params(straight)
  s2, b = _final_params(killed)
  assert s1 == s2 == 60
  np.testing.assert_array_equal(a, b)
  ra = json.load(open(os.path.join(straight, "results.json")))
  rb = json.load(open(os.path.join(killed, "results.json")))
  assert ra["dev"] == rb["dev"] and ra["train"]["best_step"] == rb["train"]["best_step"]
  # The JSONL log has no duplicated steps after the resume.
  steps = [json.loads(x)["step"] for x in open(os.path.join(killed, "metrics.jsonl"))
           if '"train"' in x]
  assert steps == sorted(set(steps))


def test_crash_between_checkpoint_saves_is_mended(tiny_model_dir, ce_run, tmp_path, caplog):
  """A crash after the latest save of an improving eval but before its best save: the resume
  writes the best checkpoint from the restored state. A best checkpoint ahead of the latest
  (`ckpt/` was deleted) is moved to `best_stale/`, not
  deleted, and selection restarts. Both end as a straight run (`ce_run`, the same config)
  does, with the best checkpoint at results.json's best_step."""
  import shutil
  from acl_jax.train import loop
  cfg = lambda: helpers.tiny_config(tiny_model_dir)
  with open(os.path.join(ce_run, "results.json")) as f:
    straight = json.load(f)

  def best_dir_step(wd):
    return max(int(d) for d in os.listdir(os.path.join(wd, "best")) if d.isdigit())

  wd = str(tmp_path / "crashed")
  with helpers.crash_at_best_save(3):
    loop.train_and_evaluate(cfg(), wd)
  assert sorted(os.listdir(os.path.join(wd, "ckpt"))) == ["3"]
  assert not [d for d in os.listdir(os.path.join(wd, "best")) if d.isdigit()]
  mended = loop.train_and_evaluate(cfg(), wd)

  ahead = str(tmp_path / "ahead")
  shutil.copytree(ce_run, ahead)
  shutil.rmtree(os.path.join(ahead, "ckpt"))  # only the best checkpoint is left
  os.remove(os.path.join(ahead, "results.json"))  # else a finished run refuses to retrain
  with caplog.at_level("WARNING"):
    restarted = loop.train_and_evaluate(cfg(), ahead)
  assert "selection restarts from step 0" in caplog.text
  old_best = best_dir_step(ce_run)
  assert os.listdir(os.path.join(ahead, "best_stale")) == [str(old_best)]
  for res, d in ((mended, wd), (restarted, ahead)):
    assert res["dev"] == straight["dev"]
    assert res["train"]["best_step"] == straight["train"]["best_step"] == best_dir_step(d)


def test_changed_optimizer_fails_resume_clearly_but_evaluates(tiny_model_dir, ce_run, tmp_path):
  """A workdir whose optimizer state this config no longer builds (head_lr_mult switches to
  parameter groups): resuming names the problem; evaluation reads the params alone."""
  from acl_jax.train import loop
  from acl_jax import evaluate
  wd, first = _copy(ce_run, tmp_path, "run")
  changed = helpers.tiny_config(tiny_model_dir, **{"optim.head_lr_mult": 2.0, "num_steps": 9})
  with pytest.raises(ValueError, match="not this optimizer's state.*new --workdir"):
    loop.train_and_evaluate(changed, wd)
  again = evaluate.evaluate_workdir(wd, ["dev"])
  assert again["dev"] == first["dev"] and again["checkpoint_step"] == first["checkpoint_step"]


def test_optimizer_mismatch_with_equal_leaf_count_is_named(tmp_path):
  """Old and new optimizer states with as many arrays but another structure (as 2ST's
  chain(adamw, scale_by_schedule) against conditionally_mask(adamw)): the resume error names
  the optimizer, not a raw tree mismatch; params still restore alone."""
  import jax
  import jax.numpy as jnp
  import optax
  from acl_jax.train import checkpoint as ckpt_lib
  from acl_jax.train.state import TrainState
  params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
  old_tx = optax.chain(optax.adam(1e-3), optax.scale_by_schedule(lambda n: 1.0))
  new_tx = optax.chain(optax.scale_by_schedule(lambda n: 1.0), optax.adam(1e-3))
  old, new = (TrainState.create(params, tx, seed=0) for tx in (old_tx, new_tx))
  assert len(jax.tree.leaves(old.opt_state)) == len(jax.tree.leaves(new.opt_state))
  meta = {"step": 0, "param_shapes": ckpt_lib.param_shapes(params), "code_versions": ["a1"]}
  wd = str(tmp_path / "run")
  ckpts = ckpt_lib.Checkpoints(wd)
  ckpts.save(old, meta)
  with pytest.raises(ValueError, match="not this optimizer's state"):
    ckpts.restore(new)
  got, _ = ckpts.restore_params(params)
  np.testing.assert_array_equal(got["w"], params["w"])
  restored, _ = ckpts.restore(old)
  assert jax.tree.structure(restored.opt_state) == jax.tree.structure(old.opt_state)
  ckpts.close()


@pytest.mark.slow
def test_two_processes_jax_distributed(tiny_model_dir, tmp_path):
  port = _free_port()
  wd = str(tmp_path / "dist")
  procs = [subprocess.Popen(
      [sys.executable, "-m", "tests.workers", "distributed", tiny_model_dir, wd, str(port),
       str(i), str(tmp_path / f"p{i}.npz")], cwd=helpers.REPO, env=helpers.env(),
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
  errs = [p.communicate(timeout=300)[1] for p in procs]
  assert all(p.returncode == 0 for p in procs), errs[0][-2000:] + errs[1][-2000:]
  a, b = (np.load(str(tmp_path / f"p{i}.npz")) for i in range(2))
  assert int(a["step"]) == int(b["step"]) == 6
  assert str(a["fingerprint"]) == str(b["fingerprint"])
  assert float(a["dev"]) == float(b["dev"])


@pytest.mark.slow
def test_sigterm_to_one_of_two_processes_stops_both_at_one_checkpointed_step(tiny_model_dir,
                                                                             tmp_path):
  """jax.distributed: SIGTERM to process 1 during step 2 of 30; JAX's preemption service
  agrees on one step, both processes checkpoint it and stop, and both finish on resume."""
  from acl_jax import provenance
  wd = str(tmp_path / "dist")

  def both(sigterm_at):
    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.workers", "distributed_sigterm", tiny_model_dir, wd,
         str(port), str(i), str(tmp_path / f"p{i}.npz"), str(sigterm_at)], cwd=helpers.REPO,
        env=helpers.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs[0][-2000:] + errs[1][-2000:]
    return [np.load(str(tmp_path / f"p{i}.npz")) for i in range(2)]
  a, b = both(2)
  assert bool(a["stopped"]) and bool(b["stopped"])
  step = int(a["step"])
  assert int(b["step"]) == step and 2 <= step < 30
  assert step in provenance.checkpoint_steps(wd)
  a, b = both(0)
  assert not a["stopped"] and int(a["step"]) == int(b["step"]) == 30
  assert str(a["fingerprint"]) == str(b["fingerprint"])


# ---- bad input ------------------------------------------------------------------------------

def test_unknown_config_key_and_method():
  p = helpers.run_py(["train.py", "--config", "configs/quickstart.py", "--workdir", "/tmp/x",
                      "--config.optim.learning_rate=1e-3"])
  assert p.returncode != 0 and "learning_rate" in p.stderr
  p = helpers.run_py(["train.py", "--config", "configs/quickstart.py:nonsense", "--workdir",
                      "/tmp/x"])
  assert p.returncode != 0 and "Unknown config argument 'nonsense'" in p.stderr


def test_process_flags_without_a_coordinator_fail(tmp_path):
  """--num_processes/--process_id alone would start N independent single-host runs."""
  p = helpers.run_py(["train.py", "--config", "configs/quickstart.py", "--workdir",
                      str(tmp_path / "x"), "--num_processes=2", "--process_id=0"])
  assert p.returncode != 0 and "without --coordinator" in p.stderr
  assert not (tmp_path / "x").exists()


def test_unknown_task_model_loss(tiny_model_dir, tmp_path):
  from acl_jax.train import loop
  with pytest.raises(ValueError, match="known"):
    loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, **{"task.name": "imdbx"}),
                            str(tmp_path / "a"))
  with pytest.raises(OSError, match="offline"):
    loop.train_and_evaluate(helpers.tiny_config("no-such-org/no-such-model"), str(tmp_path / "b"))
  with pytest.raises(ValueError, match="Unknown loss.name 'focal'; known"):
    loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir, **{"loss.name": "focal"}),
                            str(tmp_path / "c"))


@pytest.mark.parametrize("over,match", [
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"eval_every": -1}, "eval_every must be >= 0"),
    ({"num_steps": 0, "num_epochs": 0}, "num_epochs must be >= 1 when num_steps is 0")])
def test_bad_step_counts_fail_before_loading(tmp_path, over, match):
  """Checked before any data or model is read (the model name here does not exist)."""
  from acl_jax.train import loop
  with pytest.raises(ValueError, match=match):
    loop.train_and_evaluate(helpers.tiny_config("no-such-org/no-such-model", **over),
                            str(tmp_path / "a"))


def test_finished_run_without_checkpoints_is_not_retrained(tmp_path):
  """Pruned checkpoints of a finished run must not turn a rerun into a silent retrain."""
  from acl_jax.train import loop
  wd = tmp_path / "run"
  (wd / "ckpt").mkdir(parents=True)
  (wd / "results.json").write_text(json.dumps({"train": {"final_step": 6}, "dev": {}}))
  with pytest.raises(ValueError, match="no checkpoint to resume from"):
    loop.train_and_evaluate(helpers.tiny_config("no-such-org/no-such-model"), str(wd))
  (wd / "results.json").write_text(json.dumps({"dev": {}}))  # eval.py's alone: not finished
  with pytest.raises(OSError, match="offline"):  # gets past the check, to the model load
    loop.train_and_evaluate(helpers.tiny_config("no-such-org/no-such-model"), str(wd))


def test_evaluation_fails_before_loading_the_model(tmp_path):
  """eval.py on a folder train.py did not write, on a run without weights (restored from a
  records archive, or pruned), or for a split the task lacks, fails before the model loads (a
  missing model here would fail with "offline" instead)."""
  from acl_jax import evaluate, provenance
  wd = tmp_path / "run"
  wd.mkdir()
  with pytest.raises(FileError, match="config.json not found"):
    evaluate.evaluate_workdir(str(wd), ["dev"])
  provenance.record_config(str(wd), helpers.tiny_config("no-such-org/no-such-model"), 0,
                           resumed=False)
  (wd / "results.json").write_text(json.dumps({"train": {"final_step": 6}, "dev": {}}))
  with pytest.raises(FileError, match="No checkpoint in .*records archive"):
    evaluate.evaluate_workdir(str(wd), ["dev"])
  (wd / "best" / "6").mkdir(parents=True)
  with pytest.raises(ValueError, match="Split 'tset' not in task"):
    evaluate.evaluate_workdir(str(wd), ["dev", " tset"])


def test_num_labels_mismatch_with_checkpoint(tiny_model_dir, tmp_path):
  from acl_jax.train import loop
  from acl_jax import evaluate
  wd = str(tmp_path / "run")
  data = tmp_path / "d.csv"
  rows = lambda k: "text,label\n" + "".join(f"sample text {i},{i % k}\n" for i in range(90))
  data.write_text(rows(2))
  cfg = helpers.tiny_config(tiny_model_dir, **{"task.name": "csv", "task.train_file": str(data)})
  loop.train_and_evaluate(cfg, wd)
  with pytest.raises(ValueError, match="task.name: 'csv' -> 'quickstart'"):  # another run
    loop.train_and_evaluate(helpers.tiny_config(tiny_model_dir), wd)
  # The run's data now holds 3 classes: evaluation sizes the head by the data, and the
  # checkpoint's 2-class head does not fit it.
  data.write_text(rows(3))
  with pytest.raises(ValueError, match="num_labels differs"):
    evaluate.evaluate_workdir(wd, ["dev"])


def test_eval_split_with_one_class_skips_only_the_silhouette(tiny_model_dir, tmp_path, caplog):
  """A split too small for a silhouette (one class) still finishes the run and reports its
  other metrics."""
  from acl_jax.train import loop
  # The other tiny runs' steps and data (their compiled train steps serve), one dev example.
  cfg = helpers.tiny_config(tiny_model_dir, **{"task.max_eval_examples": 1})
  with caplog.at_level("WARNING"):
    res = loop.train_and_evaluate(cfg, str(tmp_path / "run"))
  assert "accuracy" in res["dev"] and "silhouette_macro" not in res["dev"]
  assert "No silhouette on dev" in caplog.text


def test_nan_loss_names_step_and_term():
  from acl_jax.train.train_log import check_finite
  check_finite(3, {"loss": 1.0, "loss/main": 1.0, "grad_norm": 2.0, "train_acc": float("nan")})
  with pytest.raises(FloatingPointError, match=r"step 7: .*loss/aux=nan"):
    check_finite(7, {"loss": float("nan"), "loss/main": 0.5, "loss/aux": float("nan")})
  # A non-finite gradient under finite losses would corrupt the params a step before it showed.
  with pytest.raises(FloatingPointError, match=r"step 4: gate/norm_acl=inf, grad_norm=nan"):
    check_finite(4, {"loss": 1.0, "grad_norm": float("nan"), "gate/norm_acl": float("inf")})


def test_resume_drops_a_half_written_metrics_line(tmp_path):
  from acl_jax.train import train_log
  lines = ['{"step": 10, "kind": "train"}\n', '{"step": 20, "kind": "train"}\n',
           '{"step": 30, "kind": "train"}\n', '{"step": 40, "ki']  # crashed mid-write
  (tmp_path / "metrics.jsonl").write_text("".join(lines))
  train_log.MetricWriter(str(tmp_path), resume_step=20)
  assert (tmp_path / "metrics.jsonl").read_text() == "".join(lines[:2])


def test_git_revision(tmp_path):
  from acl_jax import provenance
  assert provenance.git_revision(str(tmp_path)) == "unknown"  # not a checkout
  rev = provenance.git_revision()
  head = rev.removesuffix("+dirty")
  assert rev == "unknown" or (len(head) == 40 and int(head, 16) >= 0)


def test_git_revision_is_dirty_only_for_code(tmp_path):
  import shutil
  import subprocess
  from acl_jax import provenance
  if shutil.which("git") is None:
    pytest.skip("git is not installed: git_revision reports 'unknown' (test above)")
  (tmp_path / "results").mkdir()
  (tmp_path / "docs").mkdir()
  files = {"pkg.py": "a", "results/t.md": "r", "results/p.png": "x", "README.md": "d",
           "docs/x.md": "d"}
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "-c",
         "commit.gpgsign=false"]
  subprocess.run(git + ["init", "-q"], check=True)
  subprocess.run(git + ["add", "-A"], check=True)
  subprocess.run(git + ["commit", "-qm", "init"], check=True)
  head = provenance.git_revision(str(tmp_path))
  assert len(head) == 40
  for name in ("results/t.md", "results/p.png", "README.md", "docs/x.md"):  # results, docs
    (tmp_path / name).write_text("changed")
  assert provenance.git_revision(str(tmp_path)) == head
  (tmp_path / "pkg.py").write_text("changed")
  assert provenance.git_revision(str(tmp_path)) == head + "+dirty"
