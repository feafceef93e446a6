"""A study's protocol as one value: its tasks, budgets, lr rule, arms, comparisons and their
rules, stages, margins, anchors and deviations, with the statistics its verdicts use.

A `Protocol` is plain frozen data. The planner (`planner.decisions(protocol, rows)`), the
runner (`scripts/sweep.py --protocol`) and the report (`scripts/report.py --protocol`) take it
as an argument; no module reads a global one. This project's own study is one such value,
`studies/papers.py`'s `PAPERS`; a study of your own is another file like it (README, "Your own
study").

The verdict of a comparison (`Protocol.verdict`) is a paired t-interval on the seed-by-seed
difference, method minus baseline, in points:
- "beats" (superiority): the `decide_level` interval lies above zero;
- "matches or beats" (non-inferiority): its lower end lies above minus the task's margin, and
  "within the margin, lower" where the whole interval lies below zero;
- "worse": it lies wholly below minus the margin (or zero, for superiority);
- otherwise "undecided" at the first look; at the second, "inconclusive", or "lower;
  non-inferiority not shown" for a non-inferior interval wholly below zero.

A value says what the study is; whether the planner can take it to the end is
`checks.check`'s question, asked where a protocol enters: `loader.load` and the planner's
`decisions`. Nothing here imports jax.
"""
import dataclasses
import math
from typing import Mapping

from acl_jax.study.stats import Verdict, interval, t_quantile  # pylint: disable=unused-import

LOWER_NOT_SHOWN = "lower; non-inferiority not shown"
VERDICT_WORDS = ("beats", "matches or beats", "within the margin, lower", "worse",
                 LOWER_NOT_SHOWN, "undecided", "inconclusive")
MULTI_EXIT = ("jt", "2st", "alt", "kd", "acl_cl")  # methods scored at every exit
FRAMEWORKS = ("jax", "torch")  # train.py; the HF transformers + PyTorch loop


@dataclasses.dataclass(frozen=True)
class Task:
  """One task's protocol: its config, budget, scored split and metric, and margin."""
  name: str
  label: str
  config: str  # the config file, e.g. "configs/glue.py" (run as <config>:<task>,<method>)
  max_length: int
  epochs: int
  metric: str  # the metric scored (and the lr pick's, on dev)
  scored: str  # the split the final weights are scored on: "dev" or "test"
  margin: float = 1.0  # non-inferiority margin, in points of the metric (MCC x100)
  unit: float = 1.0  # points per "point" of the lr and budget rules: 2 for MCC
  train_size: int = 0  # training examples
  sets: tuple[str, ...] = ()  # fixed overrides of every run of the task, but lr and epochs
  config_arg: str = ""  # the config file's task argument ("" = name), e.g. "csv"

  @property
  def config_task(self) -> str:
    return self.config_arg or self.name

  @property
  def family(self) -> str:
    """The config file's stem: "glue", "textgcn", "files", ..."""
    return self.config.rsplit("/", 1)[-1].removesuffix(".py")


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One claim's test on one task: `method` against `baseline`, paired by seed."""
  claim: str  # key of Protocol.claims
  task: str
  method: str
  baseline: str
  kind: str  # "noninferior" (matches or beats) or "superior" (beats)
  extra: tuple[str, ...] = ()  # overrides both arms share beyond the task's protocol


@dataclasses.dataclass(frozen=True)
class Variant:
  """A method that no preset is: `method`, a preset, with `sets` on top, e.g. CE with balanced
  class weights as a baseline: `variants={"ce_balanced": Variant("ce",
  ("loss.class_weights=balanced",))}`. Its runs are named by the variant and trained as the
  preset with those overrides; like any run, one is identified by its resolved config, so a
  run that another record holds under another name is taken from it. Its own fields, where
  a comparison's arms may differ, are the preset's and those `sets` sets."""
  method: str
  sets: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Arm:
  """Later-stage runs: methods x grid x seeds on one task, at its protocol. `seeds` empty:
  the protocol's first look. `framework` "torch": the HF transformers + PyTorch loop
  (benchmarks/hf_run.py; CE only, torch installed) at the task's lr and epochs, recorded
  like any run, e.g. an anchor for CE."""
  task: str
  methods: tuple[str, ...]
  seeds: tuple[int, ...] = ()
  grid: tuple[tuple[str, tuple[str, ...]], ...] = ()
  extra: tuple[str, ...] = ()
  framework: str = "jax"


@dataclasses.dataclass(frozen=True)
class ExitRule:
  """"`method` lifts shallow exits the most": per seed, the mean paired gain (method −
  baseline, dev accuracy of the final weights, points) over the shallow exits minus that over
  the deep ones; the claim holds against a baseline when that contrast's interval lies above
  zero, and fails when it lies below. With no `deep` exits the contrast is the shallow exits'
  gain itself: the method's exits against the baseline's at the same layers. At matched cost: accuracy at `layers` mean layers per
  example on the entropy early-exit curve (linear between thresholds), paired by seed,
  superiority."""
  claim: str
  task: str
  method: str
  baselines: tuple[str, ...]
  shallow: tuple[int, ...] = (1, 2, 3)
  deep: tuple[int, ...] = (4, 5, 6)
  layers: float = 3.0
  described_layers: tuple[float, ...] = (2.0, 4.0)


@dataclasses.dataclass(frozen=True)
class RangeRule:
  """"`robust` is robust to `field`, `sensitive` is not": each method's range of seed means
  over `values`, against its seed-noise floor (the studentized range at the deciding level of
  that many means of n seeds, at the pooled within-value spread: Tukey's critical
  difference); and the paired per-seed range (max − min over values), sensitive minus robust,
  superiority. The claim holds when that interval lies above zero and `sensitive`'s range
  passes its floor; it fails when `robust`'s range passes its own floor, or the interval lies
  below zero."""
  claim: str
  task: str
  robust: str
  sensitive: str
  field: str
  values: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class StableRule:
  """"`method` is stable for `field` over `values`": the paired difference between the two
  ends of the range, seed by seed (points), lies within ± the task's margin (stable: an
  equivalence test at the deciding level), or wholly outside it (unstable). The grid's other
  values are described against the preset."""
  claim: str
  task: str
  method: str
  field: str
  values: tuple[str, str]
  preset: str


@dataclasses.dataclass(frozen=True)
class Described:
  """A grid that decides no claim: each of `method`'s `values` of `field` on `task`, at the
  first look's seeds, against `preset` (the method's preset, stage 1's run), paired by seed at
  the describing level."""
  task: str
  method: str
  field: str
  values: tuple[str, ...]
  preset: str


@dataclasses.dataclass(frozen=True)
class CostRule:
  """A cost claim, decided on train-step times that `benchmarks/cost_claims.py` measures in
  one process with nothing else running and appends to `record`: per round, one time per
  method, the methods taking turns. The statistic is the mean over rounds with its two-sided
  t-interval at the deciding level.
  - kind "share": the seconds of `method`'s own loss term alone (its forward and backward,
    timed apart from the model) over `method`'s whole train step. Holds when the interval lies
    below `bound`, fails when it lies above it.
  - kind "ratio": `method`'s step over `baseline`'s, on the log scale. Holds when the interval
    lies below 1 (faster); fails when it does not but lies above `bound` (the paper's ratio:
    neither a saving nor the paper's saving is shown)."""
  claim: str
  task: str
  kind: str  # "share" or "ratio"
  method: str
  bound: float
  baseline: str = ""
  record: str = "cost"


def same_lr(a, b) -> bool:
  """Two learning rates, as strings or floats, are the same rate: equal up to float32 rounding
  (a config may have stored 1e-4 as 9.99999974e-05), while a protocol's rates differ by more."""
  return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-6)


def epochs_text(n) -> str:
  """"1 epoch", "3 epochs"."""
  return f"{n} epoch{'' if n == 1 else 's'}"


def points(value: float) -> float:
  """A metric fraction in points (x100: accuracy and F1 in %, MCC x100)."""
  return 100.0 * value


@dataclasses.dataclass(frozen=True, eq=False)
class Protocol:
  """Everything a study's verdicts depend on, fixed before the runs it judges.

  Stage 1 runs each task through its gates (the lr grid, the anchor's extra lr, the budget
  check) and then `comparisons`, at `look_seeds[0]`, and `look_seeds[1]` for those left
  undecided. Later stages (`arms`, decided by `rules`) start when the stage before is
  recorded. A change after the first comparison run is a deviation: it goes in `deviations`
  with its reason.
  """
  name: str
  tasks: Mapping[str, Task]
  comparisons: tuple[Comparison, ...]  # stage 1's
  claims: Mapping[str, str]  # claim key -> the claim in words
  stages: Mapping[int, str]  # stage -> what it holds, in words
  arms: Mapping[int, tuple[Arm, ...]] = dataclasses.field(default_factory=dict)  # stages 2+
  rules: Mapping[int, tuple] = dataclasses.field(default_factory=dict)  # stages 2+
  # The learning-rate rule: CE seed 0 at each rate of lr_grid; the better final dev score
  # picks (ties within lr_tie points go to lr_preferred). A task whose CE misses its anchor
  # also trains at lr_high, taken when better by more than lr_tie. lr_from: task -> the task
  # whose rate it takes.
  lr_grid: tuple[str, ...] = ("2e-5", "5e-5")
  lr_preferred: str = "5e-5"
  lr_high: str = "1e-4"
  lr_tie: float = 0.5
  lr_from: Mapping[str, str] = dataclasses.field(default_factory=dict)
  # The budget check: CE seed 0 at twice the epochs; more than budget_gain points better
  # doubles every method's epochs. None: no check, the tasks' epochs stand.
  budget_gain: float | None = 1.5
  look_seeds: tuple[tuple[int, ...], ...] = ((0, 1, 2), (3, 4))
  # cpu_budget_h: the CPU machine-hours a study may spend (None: no limit). A second look
  # starts on a CPU only while the hours recorded on CPUs, the estimate of every first-look
  # run left (every stage) and those of the second looks admitted before it fit; a look with
  # a recorded run finishes; on an accelerator every look starts (status.cpu_budget).
  # later_after_first_looks: a later stage starts once the stage before has no first-look
  # run left, beside its second looks (its arms share no run with them).
  cpu_budget_h: float | None = None
  later_after_first_looks: bool = False
  # same_device_pairs: a task's runs at one seed in a stage's record (its pairs) train on one
  # device kind (every CPU one kind, each accelerator another): the sweep holds back a run
  # whose pair trained on another kind, and the report lists pairs that mix them (devices.py).
  same_device_pairs: bool = False
  decide_level: float = 0.975
  describe_level: float = 0.95
  power: float = 0.8
  anchors: Mapping[str, float] = dataclasses.field(default_factory=dict)  # CE's, points
  anchor_source: str = ""
  hf_anchor: tuple[str, str] = ("", "")  # (record, what it holds): CE against HF PyTorch
  glue_hf_anchor: tuple[str, str] = ("", "")  # the same where CE misses a published anchor
  diagnostics: tuple = ()  # (task, method, settings) trained at seed 0 beside stage 1
  described: tuple[Described, ...] = ()  # grids described, not decided
  presets: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)
  deviations: tuple[tuple[str, str], ...] = ()  # (what changed, why)
  variants: Mapping[str, Variant] = dataclasses.field(default_factory=dict)  # name -> Variant
  pilots: tuple[str, ...] = ()  # records of earlier runs, reported apart
  # The report's words: each method's label, each claim's published number in words, the
  # published scores ({task: {method: points}}), and the claims not testable here, as claims
  # table rows (claim, published, why, verdict, budget).
  labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
  sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
  claims_source: str = ""  # where the claims are stated, in the claims table's header
  published: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
  untestable: tuple[tuple[str, ...], ...] = ()
  cost_rules: tuple[CostRule, ...] = ()  # claims decided on measured step times
  exit_thresholds: str = "0.05,0.1,0.2,0.3,0.4,0.5,0.6"  # eval.py's early-exit sweep
  multi_exit: tuple[str, ...] = MULTI_EXIT
  # The cost model: seconds per CE epoch before a task has a recorded run, the per-process
  # startup, and each method's step cost relative to CE. Recorded run times replace them.
  prior_epoch_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
  startup_s: float = 60.0
  method_cost: Mapping[str, float] = dataclasses.field(default_factory=dict)
  # The records (results/records/<name>.jsonl) of each kind of run.
  lr_record: str = "lr"
  budget_record: str = "budget"
  gate_record: str = "gate_diagnostic"

  @property
  def stage_record(self) -> dict[int, str]:
    """stage -> the record its runs go to."""
    return {s: f"stage{s}" for s in self.stages}

  def first_seeds(self, arm: Arm) -> tuple[int, ...]:
    return arm.seeds or self.look_seeds[0]

  def label(self, method: str) -> str:
    return self.labels.get(method, method)

  def first_stages(self) -> dict[str, int]:
    """Each task's first stage: its lr and budget runs count there."""
    out = {c.task: 1 for c in self.comparisons}
    for stage, arms in sorted(self.arms.items()):
      for arm in arms:
        out.setdefault(arm.task, stage)
    return out

  def later_claims(self) -> list[tuple[str, int]]:
    """(claim, the first stage whose rules test it) of the claims stage 1 does not test, in
    the order the rules first name them."""
    first = {c.claim for c in self.comparisons}
    out = {}
    for stage in sorted(self.rules):
      for r in self.rules[stage]:
        if r.claim not in first:
          out.setdefault(r.claim, stage)
    return list(out.items())

  # ---- what a run scores ------------------------------------------------------------------
  def dev_score(self, row: dict) -> float | None:
    """The final weights' dev score (the last dev evaluation), in points: the lr pick's and
    the budget check's number, and the one reported where dev is scored."""
    if not row.get("evals"):
      return None
    value = row["evals"][-1]["dev"].get(self.tasks[row["task"]].metric)
    return None if value is None else points(value)

  def score(self, row: dict) -> float | None:
    """The number a run reports, in points: the final weights on the task's scored split."""
    task = self.tasks[row["task"]]
    if task.scored == "dev":
      return self.dev_score(row)
    value = row.get("latest", {}).get(task.scored, {}).get(task.metric)
    return None if value is None else points(value)

  # ---- the gates ------------------------------------------------------------------------
  def pick_lr(self, scores: dict[str, float], unit: float = 1.0) -> str:
    """The better of lr_grid by final dev score; within lr_tie (x unit), lr_preferred."""
    if len(self.lr_grid) == 1:
      return self.lr_grid[0]
    best = max(self.lr_grid, key=lambda lr: scores[lr])
    if all(abs(scores[best] - scores[lr]) <= self.lr_tie * unit for lr in self.lr_grid):
      return self.lr_preferred
    return best

  def misses_anchor(self, task: str, ce_score: float) -> bool:
    """CE below its anchor by more than the task's margin (tasks with an anchor only)."""
    anchor = self.anchors.get(task)
    return anchor is not None and ce_score < anchor - self.tasks[task].margin

  def take_high(self, pick_score: float, high_score: float, unit: float = 1.0) -> bool:
    return high_score > pick_score + self.lr_tie * unit

  def budget_doubles(self, base: float, doubled: float, unit: float = 1.0) -> bool:
    return self.budget_gain is not None and doubled - base > self.budget_gain * unit

  # ---- the verdicts ---------------------------------------------------------------------
  def verdict(self, diffs, kind: str, margin: float, look: int) -> Verdict:
    """The verdict of a comparison's paired differences (points) at look 1 or 2."""
    mean, lo, hi = interval(diffs, self.decide_level)
    _, dlo, dhi = interval(diffs, self.describe_level)
    floor = -margin if kind == "noninferior" else 0.0
    if lo > 0:
      word = "beats"
    elif lo > floor:
      word = "matches or beats" if hi >= 0 else "within the margin, lower"
    elif hi < floor:
      word = "worse"
    elif look == 1:
      word = "undecided"
    else:  # wholly below zero but reaching past the margin: lower, not shown non-inferior
      word = LOWER_NOT_SHOWN if kind == "noninferior" and hi < 0 else "inconclusive"
    return Verdict(word, mean, (lo, hi), (dlo, dhi), len(diffs), sum(d > 0 for d in diffs),
                   look, self.decide_level, self.power)

  # ---- the cost model -------------------------------------------------------------------
  def estimate_seconds(self, task: str, method: str, epochs: int,
                       measured: dict | None = None) -> float:
    """A run's machine seconds: the task's measured seconds per epoch for this method (from
    `measured`: {(task, method): seconds per epoch}), else its CE rate times the method's
    cost, else the prior."""
    measured = measured or {}
    cost = self.method_cost.get(method, 1.0)
    if (task, method) in measured:
      per_epoch = measured[(task, method)]
    elif (task, "ce") in measured:
      per_epoch = measured[(task, "ce")] * cost
    else:
      per_epoch = self.prior_epoch_s.get(task, 0.0) * cost + self.startup_s / max(epochs, 1)
    return per_epoch * epochs

  def estimate_runs(self, runs, measured: dict | None = None) -> float:
    """The machine seconds of planned runs (planner.Run), each as `estimate_seconds`."""
    return sum(self.estimate_seconds(r.task, r.method, r.epochs, measured) for r in runs)
