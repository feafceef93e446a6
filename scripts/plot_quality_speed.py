"""Plots early-exit quality-speed curves from sweep JSON files (`acl_jax.exits.plot`).

One curve per file (one file per training strategy or workdir). Left panel: metric against the
measured wall-clock speed-up; right panel: metric against the layer speed-up M / mean layers.

  python -m scripts.plot_quality_speed runs/jt/exits_entropy.json runs/acl/exits_entropy.json \
      --labels JT ACL-CL --out quality_speed.png
"""
import argparse
import sys
from typing import Optional, Sequence

from acl_jax.exits import plot


def main(argv: Optional[Sequence[str]] = None) -> str:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("files", nargs="+", help="sweep JSON files, one curve each")
  parser.add_argument("--labels", nargs="+", default=None, help="one curve label per file")
  parser.add_argument("--out", default="quality_speed.png", help="PNG to write")
  parser.add_argument("--title", default=None)
  parser.add_argument("--metric-name", default=None,
                      help="y-axis metric (default: the sweeps' metric_name)")
  args = parser.parse_args(argv)
  out = plot.plot(args.files, args.out, args.labels, args.title, args.metric_name)
  print(f"wrote {out}")
  return out


if __name__ == "__main__":
  main(sys.argv[1:])
