r"""The sweeps behind RESULTS.md: what each trains, at which budget and on how many seeds.

  python scripts/sweep.py --status                  # every sweep: done, remaining, compute
  nohup python scripts/sweep.py --sweep lr_pick > runs/lr_pick.log 2>&1 &
  nohup python scripts/sweep.py --sweep glue > runs/glue.log 2>&1 &

Each sweep is a list of arms (one task, some methods, an optional grid, seeds). A run's
record row goes to results/records/<sweep>.jsonl when it finishes; scripts/report.py builds
RESULTS.md's tables from those files. Records named `pilot_*` (PILOTS) hold
short-budget runs: their rows keep their own budgets, and sweep.py does not train them.

The protocol, stated once here and in RESULTS.md:
- One learning rate per task, from LR_GRID, picked by CE's mean dev score over the seeds of
  the `lr_pick` sweep and used for every method (`optim.lr=@lr_pick` below). Run lr_pick
  first; the other sweeps refuse to start a task whose pick is not complete.
- GLUE (the ACL protocol): CoLA, MRPC and RTE 3 epochs, SST-2 1 epoch; dev is evaluated once
  per epoch and the number reported is the final checkpoint's (the last evaluation): the
  labelled dev set cannot both select a checkpoint and score it without optimism.
- TextGCN (the G-Loss protocol): up to 10 epochs, early-stopped on dev macro-F1 (a seeded
  10% of train) with patience 3; the selected checkpoint is scored on test; class-balanced CE
  (`loss.class_weights=balanced`), as the G-Loss reference runs use.
"""
import dataclasses
import math

LR_GRID = ("2e-5", "5e-5")
LR_PICK = "@lr_pick"  # resolved per task from the lr_pick sweep's record (scripts/sweep.py)

GLUE_DATA = "task.data_dir=../shared/data/glue"
TEXTGCN_DATA = "task.data_dir=../shared/data"

# Per task: its config file and the fixed overrides of its protocol (budget and data).
PROTOCOL = {
    # One epoch of SST-2 is 2,105 steps: dev every 500 shows whether the curve has flattened.
    "sst2": ("configs/glue.py", (GLUE_DATA, "task.max_length=64", "num_epochs=1",
                                 "eval_every=500")),
    "cola": ("configs/glue.py", (GLUE_DATA, "task.max_length=64", "num_epochs=3",
                                 "eval_every=0")),
    "mrpc": ("configs/glue.py", (GLUE_DATA, "task.max_length=128", "num_epochs=3",
                                 "eval_every=0")),
    "rte": ("configs/glue.py", (GLUE_DATA, "task.max_length=128", "num_epochs=3",
                                "eval_every=0")),
}
for _t, _len in (("mr", 64), ("r8", 128), ("r52", 128), ("ohsumed", 128), ("20ng", 128)):
  PROTOCOL[_t] = ("configs/textgcn.py", (TEXTGCN_DATA, f"task.max_length={_len}",
                                         "num_epochs=10", "early_stop_patience=3",
                                         "eval_every=0", "loss.class_weights=balanced"))

GLUE = ("sst2", "cola", "mrpc", "rte")
TEXTGCN = ("mr", "r8")
TEXTGCN_MORE = ("r52", "ohsumed", "20ng")
# The headline pairs (ACL against CE and CE+SCL, G-Loss against CE) get 5 seeds, the rest 3.
HEADLINE = ("ce", "scl", "acl", "gloss")
OTHERS = ("acl_embed", "scl_grad", "gloss_sqrt", "triplet", "cosine")
SEEDS5, SEEDS3 = (0, 1, 2, 3, 4), (0, 1, 2)


@dataclasses.dataclass(frozen=True)
class Arm:
  """One task's runs: every method x grid point x seed."""
  task: str
  methods: tuple[str, ...]
  seeds: tuple[int, ...]
  grid: tuple[tuple[str, tuple[str, ...]], ...] = ()
  extra: tuple[str, ...] = ()  # overrides beyond the task's protocol
  protocol: bool = True  # False: `extra` replaces the protocol's budget (the HF check)

  @property
  def config(self) -> str:
    return PROTOCOL[self.task][0]

  @property
  def set(self) -> tuple[str, ...]:
    base = PROTOCOL[self.task][1] if self.protocol else (PROTOCOL[self.task][1][0],)
    keys = {kv.partition("=")[0] for kv in self.extra}
    lr = () if "optim.lr" in keys or any(k == "optim.lr" for k, _ in self.grid) else (
        f"optim.lr={LR_PICK}",)
    return tuple(kv for kv in base if kv.partition("=")[0] not in keys) + self.extra + lr


@dataclasses.dataclass(frozen=True)
class Sweep:
  about: str
  arms: tuple[Arm, ...]
  early_exit: str = ""  # entropy thresholds of eval.py's early-exit sweep on dev, run after
  latest: str = ""  # splits scored with the final weights (eval.py --checkpoint latest)


def _arms(tasks, methods, seeds, **kw):
  return tuple(Arm(t, tuple(methods), tuple(seeds), **kw) for t in tasks)


MULTI_EXIT = ("jt", "2st", "alt", "kd", "acl_cl")
ME_EXTRA = ("model.exit_pooling=mean", "optim.head_lr_mult=20")

SWEEPS = {
    "lr_pick": Sweep(
        "CE at each lr of the grid on every task; picks each task's lr",
        _arms(GLUE + TEXTGCN + TEXTGCN_MORE, ["ce"], SEEDS3,
              grid=(("optim.lr", LR_GRID),))),
    "glue": Sweep(
        "single-exit methods on GLUE (the ACL protocol)",
        _arms(GLUE, HEADLINE, SEEDS5) + _arms(GLUE, OTHERS, SEEDS3)),
    "textgcn": Sweep(
        "single-exit methods on MR and R8 (the G-Loss protocol)",
        _arms(TEXTGCN, HEADLINE, SEEDS5) + _arms(TEXTGCN, OTHERS, SEEDS3)),
    "textgcn_more": Sweep(
        "CE against CE+G-Loss on R52, Ohsumed and 20NG",
        _arms(TEXTGCN_MORE, ["ce", "gloss"], SEEDS3)),
    "lambda_mr": Sweep(
        "lambda sensitivity on MR: CE+SCL against ACL, and SCL in ACL's additive form",
        (Arm("mr", ("scl", "acl"), SEEDS3, grid=(("loss.lam", ("0.1", "0.3", "0.5", "0.7",
                                                               "0.9")),)),
         Arm("mr", ("scl",), SEEDS3, grid=(("loss.lam", ("0.1", "0.3", "0.5", "0.7", "0.9")),
                                           ("loss.combine", ("additive",)))))),
    "gloss_ablation_mr": Sweep(
        "G-Loss gamma_keep and sigma on MR, one axis at a time around the preset",
        (Arm("mr", ("gloss",), SEEDS3, grid=(("loss.gamma_keep", ("0.3", "0.5", "0.7",
                                                                   "0.9")),)),
         Arm("mr", ("gloss",), SEEDS3, grid=(("loss.sigma", ("0.1", "0.3", "0.667", "1.5",
                                                              "5.0")),)))),
    "multi_exit": Sweep(
        "multi-exit strategies on SST-2 and MR (mean-pooled exits), with early-exit curves",
        _arms(("sst2", "mr"), MULTI_EXIT, SEEDS3, extra=ME_EXTRA),
        early_exit="0.05,0.1,0.2,0.3,0.4,0.5,0.6"),
    "hf_baseline_mr": Sweep(
        "CE on MR as the HF PyTorch baseline trains it: 2 epochs, L64, B32, lr 5e-5, final "
        "weights on test",
        (Arm("mr", ("ce",), SEEDS3, protocol=False,
             extra=("task.max_length=64", "num_epochs=2", "early_stop_patience=0",
                    "eval_every=0", "batch_size=32", "optim.lr=5e-5")),),
        latest="test"),
}

# Grid values that are a method's preset (configs/common.py METHODS; gamma_keep's SPEC default
# 0.7): a grid point at one trains the same run as the preset, so scripts/sweep.py takes it
# from another sweep's record (e.g. lambda_mr's CE+SCL at 0.9 is textgcn's CE+SCL) instead of
# training it twice. tests/test_sweep.py checks these against the presets.
PRESETS = {("scl", "loss.lam"): "0.9", ("acl", "loss.lam"): "0.5",
           ("gloss", "loss.gamma_keep"): "0.7", ("gloss", "loss.sigma"): "0.667"}

# Earlier runs at 200-300 steps, kept as records (RESULTS.md labels them short-budget pilots).
PILOTS = ("pilot_glue", "pilot_single_mr", "pilot_lambda_mr", "pilot_gloss_ablation_mr",
          "pilot_multi_exit", "pilot_grad_conflict")

# ---- compute estimate -------------------------------------------------------------------
# Training examples per task (after the seeded 10% dev split of the TextGCN corpora).
TRAIN_SIZE = {"sst2": 67349, "cola": 8551, "mrpc": 3668, "rte": 2490, "mr": 6397, "r8": 4937,
              "r52": 5879, "ohsumed": 3021, "20ng": 10183}
# Seconds per B32 step of MiniLM-L6 on 2 cores of the development machine's Intel(R) Xeon(R)
# Processor at L64: about 1 s on an otherwise idle machine (BENCHMARKS.md's CE steps measure
# 1.2-1.7 s with other jobs running). L128 costs 2.1x L64, the ratio measured there on that
# CPU (keyed dropout, 3.663 s / 1.721 s). Length bucketing makes short sentences cheaper than
# their max length, and packing is expected to cut both further.
STEP_S = {64: 1.0, 128: 2.1}
# Methods whose step takes extra backward passes (BENCHMARKS.md): ACL-Grad's two gradients,
# gated ACL-CL's three.
METHOD_COST = {"acl": 1.52, "scl_grad": 1.52, "acl_cl": 2.12}


def _value(sets, key, default=None):
  for kv in sets:
    k, _, v = kv.partition("=")
    if k == key:
      return v
  return default


def run_steps(task: str, sets) -> int:
  """Upper bound on a run's train steps: its epochs (early stopping may end it sooner)."""
  batch = int(_value(sets, "batch_size", 32))
  return int(_value(sets, "num_epochs", 3)) * math.ceil(TRAIN_SIZE[task] / batch)


def run_seconds(task: str, method: str, sets) -> float:
  length = int(_value(sets, "task.max_length", 128))
  per_step = STEP_S[64 if length <= 64 else 128] * METHOD_COST.get(method, 1.0)
  return run_steps(task, sets) * per_step


# ---- what a run scores --------------------------------------------------------------------
# The metric each task reports (GLUE: its own; the TextGCN corpora: accuracy, as the G-Loss
# paper) and the dev metric that picks its lr (TextGCN: the macro-F1 that early stopping and
# checkpoint selection use).
METRIC = {"sst2": "accuracy", "cola": "mcc", "mrpc": "f1", "rte": "accuracy"}
GLUE_TASKS = tuple(METRIC)
for _t in ("mr", "r8", "r52", "ohsumed", "20ng"):
  METRIC[_t] = "accuracy"


def select_score(row: dict) -> float:
  """A row's dev score for picking the lr: GLUE's last dev evaluation (the final checkpoint),
  a TextGCN corpus's dev macro-F1 at the selected checkpoint."""
  if row["task"] in GLUE_TASKS:
    return row["evals"][-1]["dev"][METRIC[row["task"]]]
  return row["final"]["dev"]["macro_f1"]
