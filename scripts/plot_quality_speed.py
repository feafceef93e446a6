"""Plots early-exit quality-speed curves from sweep JSON files (`acl_jax.exits.write_table`).

One curve per file (one file per training strategy or workdir). Left panel: metric against the
measured wall-clock speed-up; right panel: metric against the layer speed-up M / mean layers.

  python -m scripts.plot_quality_speed runs/jt/exits_entropy.json runs/acl/exits_entropy.json \
      --labels JT ACL-CL --out quality_speed.png
"""
import argparse
import json
import os
import sys
from typing import Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

PANELS = (("speedup", "measured wall-clock speed-up (x)"),
          ("layer_speedup", "layer speed-up, M / mean layers (x)"))


ABOUT = ("task", "model", "split")


def read_sweep(path: str) -> tuple[Optional[str], list[dict], dict]:
  """(label or None, rows, about) of a sweep JSON: {"label", "rows", "task", "model",
  "split"} (`write_table`) or a bare list of rows; `about` holds the keys of ABOUT it has."""
  with open(path) as f:
    data = json.load(f)
  if isinstance(data, list):
    return None, data, {}
  if not isinstance(data, dict) or "rows" not in data:
    raise ValueError(f"{path}: expected a list of rows or a dict with 'rows'.")
  return data.get("label"), data["rows"], {k: data[k] for k in ABOUT if data.get(k)}


def _common(values) -> str:
  """The one value all sweeps share, several joined by "/" when they differ, "" when none."""
  vals = list(dict.fromkeys(v for v in values if v))
  return "/".join(vals)


def _default_label(path: str) -> str:
  folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
  return folder or os.path.splitext(os.path.basename(path))[0]


def plot(paths: Sequence[str], out: str, labels: Optional[Sequence[str]] = None,
         title: Optional[str] = None, metric_name: Optional[str] = None) -> str:
  """Writes the two-panel PNG of `figure` to `out` and returns `out`."""
  fig = figure(paths, labels, title, metric_name)
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=120)
  plt.close(fig)
  return out


def figure(paths: Sequence[str], labels: Optional[Sequence[str]] = None,
           title: Optional[str] = None, metric_name: Optional[str] = None):
  """The two panels, a curve per sweep file. The title names the policy and the sweeps' task
  and model; the y axis the split and the metric (the rows' metric_name unless given)."""
  if labels is not None and len(labels) != len(paths):
    raise ValueError(f"Got {len(labels)} labels for {len(paths)} files.")
  fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 4.2), squeeze=False)
  policies, abouts, metrics = set(), [], []
  for i, path in enumerate(paths):
    file_label, rows, about = read_sweep(path)
    abouts.append(about)
    metrics += [r.get("metric_name") for r in rows]
    label = labels[i] if labels is not None else file_label or _default_label(path)
    policies.update(r.get("policy") for r in rows if r.get("policy"))
    for ax, (key, _) in zip(axes[0], PANELS):
      pts = sorted((r[key], r["metric"]) for r in rows if r.get(key) is not None)
      if pts:  # an untimed sweep (eval.py --exit_repeats 0) has no measured speed-up
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
  about = {k: _common(a.get(k) for a in abouts) for k in ABOUT}
  metric_name = metric_name or _common(metrics) or "metric"
  ylabel = f"{about['split']} {metric_name}".strip()
  for ax, (_, xlabel) in zip(axes[0], PANELS):
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(ax.get_lines()) > 1:  # the 1.0x guide and at least one curve
      ax.legend()
    else:
      ax.text(0.5, 0.5, "no timed sweep", transform=ax.transAxes, ha="center", color="grey")
  where = ", ".join(about[k] for k in ("task", "model") if about[k])
  fig.suptitle(title or f"Early-exit quality vs speed ({', '.join(sorted(policies)) or '?'})"
               + (f": {where}" if where else ""))
  fig.tight_layout()
  return fig


def main(argv: Optional[Sequence[str]] = None) -> str:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("files", nargs="+", help="sweep JSON files, one curve each")
  parser.add_argument("--labels", nargs="+", default=None, help="one curve label per file")
  parser.add_argument("--out", default="quality_speed.png", help="PNG to write")
  parser.add_argument("--title", default=None)
  parser.add_argument("--metric-name", default=None,
                      help="y-axis metric (default: the sweeps' metric_name)")
  args = parser.parse_args(argv)
  out = plot(args.files, args.out, args.labels, args.title, args.metric_name)
  print(f"wrote {out}")
  return out


if __name__ == "__main__":
  main(sys.argv[1:])
