r"""lambda-sensitivity curves from a sweep over loss.lam (scripts/sweep.py summary.json).

  python scripts/sweep.py --root runs/sweeps/rte_lam --config configs/glue.py:rte \
      --methods scl,acl --grid loss.lam=0.1,0.3,0.5,0.7,0.9 --seeds 0,1,2 ...
  python scripts/plot_lambda.py runs/sweeps/rte_lam --metric dev/accuracy --out lam.png

One curve per method, mean +- std over seeds as error bars.
"""
import argparse
import json
import os


def curves(summary: dict, metric: str) -> dict[str, list[tuple[float, float, float]]]:
  out: dict[str, list] = {}
  for name, entry in summary.items():
    settings = dict(kv.split("=", 1) for kv in name.split(","))
    if "loss.lam" not in settings or metric not in entry["metrics"]:
      continue
    m = entry["metrics"][metric]
    out.setdefault(settings.get("method", "run"), []).append(
        (float(settings["loss.lam"]), m["mean"], m["std"]))
  return {k: sorted(v) for k, v in out.items()}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("root")
  p.add_argument("--metric", default="dev/accuracy")
  p.add_argument("--out", default="lambda.png")
  a = p.parse_args(argv)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  cs = curves(json.load(open(os.path.join(a.root, "summary.json"))), a.metric)
  if not cs:
    raise SystemExit(f"No loss.lam runs with {a.metric} in {a.root}/summary.json.")
  fig, ax = plt.subplots(figsize=(6, 4))
  for method, pts in cs.items():
    lam, mean, std = zip(*pts)
    ax.errorbar(lam, [100 * m for m in mean], yerr=[100 * s for s in std], marker="o",
                capsize=3, label=method)
  ax.set_xlabel("lambda")
  ax.set_ylabel(f"{a.metric} (%)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(a.out, dpi=110)
  print(f"wrote {a.out}")


if __name__ == "__main__":
  main()
