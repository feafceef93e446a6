"""results/STAGE2.md's tables, and STAGE3.md's shallow-exit rule: each later rule's numbers in
full, from the records
(acl_jax/study/later.py reads them under the rules; RESULTS.md's claims table gives the verdicts).

Every function takes the records index ({(record, run): row}) and the method labels, and
returns a markdown table, or one "*pending*" line naming how many of its runs are recorded.
"""
from acl_jax.study import fmt, later, protocol as proto


def _pending(p: proto.Protocol, idx, stage, task, methods, grid=()) -> str:
  """"*pending*" with the first look's runs recorded of these methods (at these values)."""
  points = [g for g in grid] or [()]
  names = [(m, s, g) for m in methods for s in p.look_seeds[0] for g in points]
  done = sum(later.find(p, idx, stage, task, m, s, g) is not None for m, s, g in names)
  return f"*pending*: {done} of {len(names)} first-look runs recorded.\n"


def _pct(level: float) -> str:
  return f"{100 * level:g}%"


def _verdict(v: proto.Verdict) -> str:
  return f"{v.mean:+.2f} {fmt.span(*v.decide)}"


def exits_table(p: proto.Protocol, idx: dict, rule: proto.ExitRule, labels: dict,
                stage: int = 2) -> str:
  """Per baseline: the paired gain at each exit (the describing level), the shallow-minus-deep
  contrast (with no deep exits, the shallow exits' own gain) and the matched-cost accuracy
  (the deciding level, with their verdicts), and the curve at the rule's described layers."""
  res = [later.exit_result(p, idx, stage, rule, b) for b in rule.baselines]
  if None in res:
    return _pending(p, idx, stage, rule.task, (rule.method,) + rule.baselines)
  rows = []
  for b, r in zip(rule.baselines, res):
    word = {"beats": "holds", "worse": "fails"}.get(r.contrast.word, r.contrast.word)
    matched = (f"{_verdict(r.matched)} {r.matched.word}" if r.matched else "not reached")
    described = ", ".join(
        f"{layers:g}: " + (f"{got[0]:+.2f} {fmt.span(*got[1:])}" if got else "—")
        for layers, got in r.described.items())
    rows.append([f"{labels[rule.method]} − {labels[b]}", r.look, r.contrast.n,
                 *[f"{m:+.2f}" for m, _, _ in r.per_exit.values()],
                 f"{_verdict(r.contrast)} {word}", matched, described])
  head = ["pair", "look", "seeds", *[f"exit {m}" for m in later.exits_of(rule)],
          f"{later.contrast_name(rule)}, {_pct(p.decide_level)}",
          f"at {rule.layers:g} mean layers, {_pct(p.decide_level)}",
          f"at {' and '.join(f'{x:g}' for x in rule.described_layers)} layers, "
          f"{_pct(p.describe_level)}"]
  per_exit = "; ".join(
      f"{labels[b]}: " + ", ".join(f"exit {m} {fmt.span(lo, hi)}" for m, (_, lo, hi)
                                     in r.per_exit.items()) for b, r in zip(rule.baselines, res))
  return fmt.table(head, rows) + (f"\nPaired per-exit gains, {_pct(p.describe_level)} "
                                  f"intervals: {per_exit}.\n")


def range_table(p: proto.Protocol, idx: dict, rule: proto.RangeRule, labels: dict,
                stage: int = 2) -> str:
  """Per method: the seed means at each value, their range and its noise floor; then the paired
  per-seed range, sensitive minus robust."""
  got = later.range_result(p, idx, stage, rule)
  grid = [((rule.field, v),) for v in rule.values]
  if got is None:
    return _pending(p, idx, stage, rule.task, (rule.robust, rule.sensitive), grid)
  look, (word, robust, sensitive, v) = got
  seeds = p.look_seeds[0] + (p.look_seeds[1] if look == 2 else ())
  rows = []
  for method, sp in ((rule.robust, robust), (rule.sensitive, sensitive)):
    scores = later.grid_scores(p, idx, stage, rule.task, method, rule.field, rule.values, seeds)
    rows.append([labels[method], *[fmt.mean_sd(s, n=False) for s in scores], f"{sp.range:.2f}",
                 f"{sp.floor:.2f}", "yes" if sp.passes else "no"])
  head = ["method", *[f"{rule.field.split('.')[-1]} {x}" for x in rule.values],
          "range of means", f"noise floor ({_pct(p.decide_level)})", "range passes floor"]
  return fmt.table(head, rows) + (
      f"\nLook {look}, {len(seeds)} seeds. Per-seed range over the values, "
      f"{labels[rule.sensitive]} − {labels[rule.robust]}: {_verdict(v)} "
      f"({_pct(p.decide_level)}), {v.word}. The claim: **{word}**.\n")


def _against_preset(p: proto.Protocol, idx: dict, stage: int, task: str, method: str,
                    field: str, values, preset: str, seeds) -> list[list[str]] | None:
  """A row per value (the preset's among them): mean ± std at `seeds` (a value recorded at the
  first look's alone: those), and the paired difference to the preset at the describing
  level; None while the preset is unrecorded at `seeds`."""
  base = later.grid_scores(p, idx, stage, task, method, field, (preset,), seeds)
  if base is None:
    return None
  rows = []
  for value in sorted(set(values) | {preset}, key=float):
    got = (later.grid_scores(p, idx, stage, task, method, field, (value,), seeds)
           or later.grid_scores(p, idx, stage, task, method, field, (value,), p.look_seeds[0]))
    if got is None:
      rows.append([value, "pending", ""])
      continue
    s = got[0]
    mean, lo, hi = proto.interval([a - b for a, b in zip(s, base[0])], p.describe_level)
    rows.append([value + (" (preset)" if value == preset else ""),
                 f"{fmt.mean_sd(s, n=False)} (n={len(s)})",
                 "—" if value == preset else f"{mean:+.2f} {fmt.span(lo, hi)}"])
  return rows


def _preset_head(p: proto.Protocol, field: str, method: str, preset: str, labels) -> list:
  return [field.split(".")[-1], f"{labels[method]}, points",
          f"− {preset}, paired, {_pct(p.describe_level)}"]


def stable_table(p: proto.Protocol, idx: dict, rule: proto.StableRule, labels: dict,
                 arm_values=(), stage: int = 2):
  """Each value's mean ± std, each against the preset (paired, the describing level), and the
  rule's ends."""
  got = later.stable_result(p, idx, stage, rule)
  if got is None:
    return _pending(p, idx, stage, rule.task, (rule.method,),
                    [((rule.field, v),) for v in rule.values])
  look, (word, v) = got
  seeds = p.look_seeds[0] + (p.look_seeds[1] if look == 2 else ())
  rows = _against_preset(p, idx, stage, rule.task, rule.method, rule.field,
                         tuple(arm_values) + tuple(rule.values), rule.preset, seeds)
  return fmt.table(_preset_head(p, rule.field, rule.method, rule.preset, labels), rows) + (
      f"\nThe rule, look {look}: {rule.values[0]} − {rule.values[1]} {_verdict(v)} "
      f"({_pct(p.decide_level)}), "
      f"within ±{p.tasks[rule.task].margin:g} for stable: **{word}**.\n")


def described_tables(p: proto.Protocol, idx: dict, labels: dict) -> str:
  """Each grid that decides no claim (`Protocol.described`), read from the stage whose arm
  trains it: every value against the preset, paired by seed at the first look's seeds; or
  "*pending*" with the runs recorded."""
  out = []
  for d in p.described:
    stage = later.described_stages(p, d)[0]
    seeds = p.look_seeds[0]
    grid = [((d.field, v),) for v in d.values]
    rows = None
    if later.grid_scores(p, idx, stage, d.task, d.method, d.field, d.values, seeds) is not None:
      rows = _against_preset(p, idx, stage, d.task, d.method, d.field, d.values, d.preset,
                             seeds)
    what = (f"{labels[d.method]} on {p.tasks[d.task].label} over `{d.field}` "
            f"({p.tasks[d.task].scored} {p.tasks[d.task].metric}; stage {stage}):")
    out.append(f"{what} " + _pending(p, idx, stage, d.task, (d.method,), grid) if rows is None
               else f"{what}\n\n" + fmt.table(_preset_head(p, d.field, d.method, d.preset,
                                                            labels), rows))
  return "\n".join(out) if out else "*pending*: the protocol describes no grid.\n"


def stage2_md(p: proto.Protocol, idx: dict, labels: dict) -> dict[str, str]:
  """{table name: body} of results/STAGE2.md's blocks."""
  exits, lam, gamma = (r for r in p.rules[2] if not isinstance(r, proto.Comparison))
  arm = next(a for a in p.arms[2] if a.task == gamma.task and a.grid)
  return {"stage2_exits": exits_table(p, idx, exits, labels),
          "stage2_lambda": range_table(p, idx, lam, labels),
          "stage2_gamma_keep": stable_table(p, idx, gamma, labels, arm.grid[0][1])}


def stage3_exits(p: proto.Protocol, idx: dict, labels: dict) -> str:
  """results/STAGE3.md's shallow-exit block: stage 3's ExitRule (ACL-CL against 2ST and ALT),
  laid out as stage 2's."""
  rule = next(r for r in p.rules[3] if isinstance(r, proto.ExitRule))
  return exits_table(p, idx, rule, labels, stage=3)
