r"""t-SNE of dev features for several runs side by side, label embeddings marked.

  python eval.py --workdir runs/sst2_ce --split dev --dump_features     # once per run
  python scripts/plot_tsne.py runs/sst2_ce runs/sst2_scl runs/sst2_acl \
      --labels CE CE+SCL ACL --out results/tsne_sst2.png

Features and label embeddings are L2-normalised and embedded together (one t-SNE per run,
seed 0, at most --max_points examples), so the label-embedding anchors land among the
points they attract.
"""
import argparse
import os

import numpy as np


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("workdirs", nargs="+")
  p.add_argument("--labels", nargs="+")
  p.add_argument("--split", default="dev")
  p.add_argument("--max_points", type=int, default=1000)
  p.add_argument("--out", default="tsne.png")
  a = p.parse_args(argv)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  from sklearn.manifold import TSNE  # pylint: disable=import-outside-toplevel
  labels = a.labels or [os.path.basename(os.path.normpath(w)) for w in a.workdirs]
  fig, axes = plt.subplots(1, len(a.workdirs), figsize=(4.5 * len(a.workdirs), 4.2),
                           squeeze=False)
  for ax, wd, title in zip(axes[0], a.workdirs, labels):
    path = os.path.join(wd, f"features_{a.split}.npz")
    if not os.path.isfile(path):
      raise SystemExit(f"{path} missing: run `python eval.py --workdir {wd} --split {a.split} "
                       "--dump_features` first.")
    d = np.load(path)
    idx = np.random.default_rng(0).permutation(len(d["labels"]))[:a.max_points]
    x = np.concatenate([d["feats"][idx], d["label_emb"]])
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    xy = TSNE(2, random_state=0, init="pca", perplexity=min(30, len(x) - 1)).fit_transform(x)
    k = len(d["label_emb"])
    y = d["labels"][idx]
    ax.scatter(xy[:-k, 0], xy[:-k, 1], c=y, cmap="tab10", s=6, alpha=0.6, vmin=0, vmax=9)
    ax.scatter(xy[-k:, 0], xy[-k:, 1], c=np.arange(k), cmap="tab10", s=220, marker="*",
               edgecolors="k", vmin=0, vmax=9)
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
  fig.suptitle(f"t-SNE of {a.split} features (stars: label embeddings)")
  fig.tight_layout()
  fig.savefig(a.out, dpi=110)
  print(f"wrote {a.out}")


if __name__ == "__main__":
  main()
