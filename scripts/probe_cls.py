r"""How informative is each layer's exit input before fine-tuning? (multi-exit diagnostic)

  python -m scripts.probe_cls --task sst2 --data_dir ../shared/data/glue --split dev
  python -m scripts.probe_cls --task sst2 --data_dir ../shared/data/glue --pooling mean

For the pretrained model, prints per layer the spread of the exit input ([CLS] state, or the
masked token mean with --pooling mean) across examples (mean over dimensions of the
per-dimension std), its mean norm, and the accuracy of a logistic-regression probe trained
on a seeded 70% of the split and tested on the rest.
"""
import argparse

import numpy as np


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", default="sst2")
  p.add_argument("--data_dir", default="../shared/data/glue")
  p.add_argument("--split", default="dev")
  p.add_argument("--model", default="minilm-l6")
  p.add_argument("--max_length", type=int, default=64)
  p.add_argument("--pooling", default="cls", choices=("cls", "mean"),
                 help="the exit input probed (model.exit_pooling)")
  a = p.parse_args()
  import jax  # pylint: disable=import-outside-toplevel
  from sklearn.linear_model import LogisticRegression  # pylint: disable=import-outside-toplevel
  import acl_jax  # pylint: disable=import-outside-toplevel
  from acl_jax import data  # pylint: disable=import-outside-toplevel
  task = data.load_task(a.task, a.data_dir)
  ds = task.splits[a.split]
  model, params, tok = acl_jax.load_pretrained(a.model, task.num_labels,
                                               exits="all", exit_pooling=a.pooling)
  # Without a pooler an exit's feature is its input: the [CLS] state or the token mean.
  fwd = jax.jit(lambda p_, i, m: model.apply({"params": p_}, i, m)[1]["feats"])
  texts = list(ds["text"])
  pairs = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
  cls = []
  for s in range(0, len(texts), 128):
    enc = tok(texts[s:s + 128], pairs[s:s + 128] if pairs else None, padding=True,
              truncation=True, max_length=a.max_length, return_tensors="np")
    cls.append(np.asarray(fwd(params, enc["input_ids"], enc["attention_mask"])))
  cls = np.concatenate(cls, axis=1)
  y = np.asarray(ds["label"])
  idx = np.random.default_rng(0).permutation(len(y))
  tr, te = idx[:int(0.7 * len(y))], idx[int(0.7 * len(y)):]
  name = "[CLS]" if a.pooling == "cls" else "token mean"
  print(f"| layer | {name} spread across examples | mean norm | probe accuracy |")
  print("|---|---|---|---|")
  for m, x in enumerate(cls, 1):
    acc = LogisticRegression(max_iter=2000).fit(x[tr], y[tr]).score(x[te], y[te])
    print(f"| {m} | {x.std(0).mean():.4f} | {np.linalg.norm(x, axis=1).mean():.2f} | "
          f"{100 * acc:.1f} |")


if __name__ == "__main__":
  main()
