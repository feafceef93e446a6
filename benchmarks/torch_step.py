r"""HF PyTorch's BERT train step at a `benchmarks/gpu_step.py` shape, for the same GPU's row.

  python -m benchmarks.torch_step --shape bert_base --mode eager      # one JSON line on stdout

`BertForSequenceClassification` (random init, the shape's layers, hidden, heads, FFN and
vocab; HF's default attention, SDPA) in train mode, `torch.optim.AdamW`, and per step:
zero_grad, the forward and loss under bfloat16 autocast (`--dtype float32`: none), backward,
clip to norm 1.0, step. This is what acl-jax's step does (`gpu_step.build_step`: CE, clip,
AdamW, dropout on) and what a user's HF loop would do. `--mode compile` wraps the model in
`torch.compile` first; its first step includes the compile.

`gpu_step.py` runs this module in a child process (`run_child`) with a time limit, so torch
and JAX never share a process or the GPU's memory pool, and a compile that runs long is
stopped instead of eating the run's budget. The timing loop is gpu_step's: warm up, then time
steps until `--min_time` seconds (at least 5), synchronizing every 5 steps.
"""
import argparse
import json
import subprocess
import sys
import time

from acl_jax import cpuinfo  # light: no jax, so the torch process stays jax-free


def build(shape, device: str, mode: str):
  """(model, optimizer, batch) for `shape` on `device`; the model compiled for "compile"."""
  # pylint: disable=import-outside-toplevel
  import torch
  from transformers import BertConfig, BertForSequenceClassification
  torch.manual_seed(0)
  cfg = BertConfig(vocab_size=shape.vocab, hidden_size=shape.hidden,
                   num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                   intermediate_size=shape.ffn, max_position_embeddings=max(512, shape.seq),
                   num_labels=2)
  model = BertForSequenceClassification(cfg).to(device).train()
  opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
  gen = torch.Generator().manual_seed(0)
  ids = torch.randint(1000 % shape.vocab, shape.vocab, (shape.batch, shape.seq), generator=gen)
  batch = {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
           "token_type_ids": torch.zeros_like(ids).to(device),
           "labels": torch.randint(0, 2, (shape.batch,), generator=gen).to(device)}
  if mode == "compile":
    model = torch.compile(model)
  return model, opt, batch


def time_steps(shape, device: str, mode: str, dtype: str, min_time: float,
               max_steps: int) -> dict:
  """Seconds per train step (module docstring) after a first step and 2 warm-up steps."""
  import torch  # pylint: disable=import-outside-toplevel
  t0 = time.perf_counter()
  model, opt, batch = build(shape, device, mode)
  setup_s = time.perf_counter() - t0
  sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
  autocast = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16,
                            enabled=dtype == "bfloat16")

  def step():
    opt.zero_grad(set_to_none=True)
    with autocast:
      loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss

  t0 = time.perf_counter()
  loss = step()
  sync()
  first_s = time.perf_counter() - t0
  for _ in range(2):
    step()
  sync()
  n, t0 = 0, time.perf_counter()
  while n < max_steps and (n < 5 or time.perf_counter() - t0 < min_time):
    loss = step()
    n += 1
    if n % 5 == 0:
      sync()
  sync()
  elapsed = time.perf_counter() - t0
  n_params = sum(p.numel() for p in model.parameters())
  return {"setup_s": setup_s, "first_step_s": first_s, "steps": n, "step_s": elapsed / n,
          "loss": float(loss), "n_params": int(n_params), "torch": torch.__version__,
          "device": (torch.cuda.get_device_name() if device.startswith("cuda") else "cpu")}


def run_child(shape_name: str, smoke: bool, mode: str, dtype: str, min_time: float,
              max_steps: int, timeout: float) -> dict:
  """This module in a child process (see the module docstring): its JSON result, or
  {"error": why} when it failed, could not import torch or transformers, or ran past
  `timeout` seconds."""
  cmd = [sys.executable, "-m", "benchmarks.torch_step", "--shape", shape_name, "--mode", mode,
         "--dtype", dtype, "--min_time", str(min_time), "--max_steps", str(max_steps)]
  if smoke:
    cmd.append("--smoke")
  try:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1.0),
                       check=False)
  except subprocess.TimeoutExpired:
    return {"error": f"stopped after {timeout:.0f} s (time limit)"}
  lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
  if p.returncode != 0 or not lines:
    return {"error": f"exit {p.returncode}: {p.stderr.strip()[-600:]}"}
  return json.loads(lines[-1])


def main(argv=None):
  from benchmarks import gpu_step  # pylint: disable=import-outside-toplevel
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--shape", default="bert_base")
  ap.add_argument("--smoke", action="store_true", help="--shape names a smoke shape")
  ap.add_argument("--mode", default="eager", choices=("eager", "compile"))
  ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
  ap.add_argument("--device", default="", help="default: cuda when available, else cpu")
  ap.add_argument("--min_time", type=float, default=3.0)
  ap.add_argument("--max_steps", type=int, default=200)
  args = ap.parse_args(argv)
  import torch  # pylint: disable=import-outside-toplevel
  shape = (gpu_step.SMOKE_SHAPES if args.smoke else gpu_step.SHAPES)[args.shape]
  device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
  res = time_steps(shape, device, args.mode, args.dtype, args.min_time, args.max_steps)
  res["cpu"] = cpuinfo.describe()  # the host CPU's family, model and vector ISA
  print(json.dumps(res), flush=True)


if __name__ == "__main__":
  main()
