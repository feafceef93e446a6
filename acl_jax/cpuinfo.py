"""What a timing was taken on: the CPU's name, vendor family and model, and its vector ISA.

The name alone hides differences that decide speed: "AMD EPYC" is a Zen 3 with AVX2 only on one
host and a Zen 5 with AVX-512 on another, and XLA:CPU and torch rank differently on them. Every
speed figure, run record ("timed on") and benchmark output names all of it. Light: no jax.
"""
import os
import platform

# /proc/cpuinfo flags that change which GEMM and vector kernels run, as named in reports.
ISA = (("amx_tile", "AMX"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"),
       ("avx512_vnni", "AVX512-VNNI"), ("avx2", "AVX2"), ("fma", "FMA"))


def cpu(path: str = "/proc/cpuinfo") -> dict:
  """{"name", "vendor", "family", "model", "isa": [named ISA extensions present]} of the first
  processor listed; fields the file lacks are empty ("" or [])."""
  fields = {}
  try:
    with open(path) as f:
      for line in f:
        if not line.strip():
          break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
  except OSError:
    pass
  flags = set(fields.get("flags", "").split())
  return {"name": fields.get("model name") or platform.processor() or "unknown CPU",
          "vendor": fields.get("vendor_id", ""), "family": fields.get("cpu family", ""),
          "model": fields.get("model", ""), "isa": [name for flag, name in ISA if flag in flags]}


def describe(info: dict | None = None, cores: int | None = None) -> str:
  """One line, e.g.
  "AMD EPYC (family 26, model 2; AVX-512, AVX512-BF16, AVX512-VNNI, AVX2, FMA), 2 cores"."""
  info = info or cpu()
  parts = []
  if info["family"]:
    parts.append(f"family {info['family']}, model {info['model']}")
  parts.append(", ".join(info["isa"]) or "no AVX2")
  cores = os.cpu_count() if cores is None else cores
  return f"{info['name']} ({'; '.join(parts)}), {cores} cores"


def kind(info: dict | None = None) -> str:
  """A file-name-safe tag of the CPU kind: vendor, family and model, e.g. "amd_f25m1" (Zen 3)
  or "intel_f6m143"; the ISA follows from them."""
  info = info or cpu()
  vendor = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(
      info["vendor"], "".join(c for c in info["vendor"].lower() if c.isalnum()) or "cpu")
  return f"{vendor}_f{info['family'] or 0}m{info['model'] or 0}"
