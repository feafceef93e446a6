r"""t-SNE of dev features for several runs side by side, coloured by class.

  python eval.py --workdir runs/sst2_ce --split dev --dump_features     # once per run
  python -m scripts.plot_tsne runs/sst2_ce runs/sst2_scl runs/sst2_acl \
      --labels CE CE+SCL ACL --out runs/tsne_sst2.png

Features are L2-normalised and embedded with t-SNE (one per run, seed 0, at most --max_points
examples). Runs whose loss trains label embeddings as contrastive anchors (ACL-Embed, ACL,
ACL-CL) also get those embeddings, embedded together with the points they attract and drawn
as stars; a CE or SCL run's classifier rows are no such anchors and are left out. Each panel
names its run, task, model and split; the legend names the classes (the run's labels.json).
"""
import argparse
import os

import numpy as np

from acl_jax import provenance  # light: no jax

# Losses whose label embeddings (the exit's classifier rows) are items of the contrastive loss.
LABEL_EMBEDDING_LOSSES = ("acl_embed",)


def has_label_embeddings(config: dict | None) -> bool:
  """Whether the run trains label embeddings as anchors (ACL-Embed, hence ACL and ACL-CL)."""
  return bool(config) and config.get("loss", {}).get("name") in LABEL_EMBEDDING_LOSSES


def panel_title(label: str, config: dict | None, split: str) -> str:
  """`label` over "task · model · split" (what the run's config.json says)."""
  cfg = config or {}
  task = cfg.get("task", {}).get("name", "")
  model = os.path.basename(os.path.normpath(cfg.get("model", {}).get("name", ""))) or ""
  return label + "\n" + " · ".join(x for x in (task, model, split) if x)


def main(argv=None):
  """Writes the figure; returns a dict per panel: title, stars (drawn or not), classes."""
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
  fig, axes = plt.subplots(1, len(a.workdirs), figsize=(4.5 * len(a.workdirs), 4.6),
                           squeeze=False)
  cmap = plt.get_cmap("tab10")
  panels = []
  for ax, wd, label in zip(axes[0], a.workdirs, labels):
    path = os.path.join(wd, f"features_{a.split}.npz")
    if not os.path.isfile(path):
      raise SystemExit(f"{path} missing: run `python eval.py --workdir {wd} --split {a.split} "
                       "--dump_features` first.")
    d = np.load(path)
    config = provenance.run_config(wd)
    names = provenance.read_labels(wd) or [str(n) for n in d["label_names"]]
    stars = has_label_embeddings(config)
    idx = np.random.default_rng(0).permutation(len(d["labels"]))[:a.max_points]
    k = len(d["label_emb"]) if stars else 0
    x = np.concatenate([d["feats"][idx]] + ([d["label_emb"]] if stars else []))
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    xy = TSNE(2, random_state=0, init="pca", perplexity=min(30, len(x) - 1)).fit_transform(x)
    pts, y = xy[:len(idx)], d["labels"][idx]
    for c, name in enumerate(names):  # one scatter per class: the legend names it
      sel = y == c
      ax.scatter(pts[sel, 0], pts[sel, 1], color=cmap(c % 10), s=6, alpha=0.6, label=name)
    if stars:
      ax.scatter(xy[-k:, 0], xy[-k:, 1], c=[cmap(c % 10) for c in range(k)], s=220,
                 marker="*", edgecolors="k", label="label embeddings")
    title = panel_title(label, config, a.split)
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(fontsize=7, markerscale=2 if not stars else 0.8, loc="best")
    panels.append({"title": title, "stars": stars, "classes": list(names)})
  fig.suptitle(f"t-SNE of the last exit's {a.split} features (L2-normalised)")
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
  fig.savefig(a.out, dpi=110)
  plt.close(fig)
  print(f"wrote {a.out}")
  return panels


if __name__ == "__main__":
  main()
