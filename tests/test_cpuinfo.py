"""acl_jax.cpuinfo names what a timing was taken on: name, family, model and vector ISA."""
from acl_jax import cpuinfo

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx fma avx2 bmi2

processor\t: 1
model name\t: something else
"""
SAPPHIRE = """vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: avx2 fma avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16
"""


def test_one_name_two_kinds(tmp_path):
  """Two CPUs both named "AMD EPYC" (or both Xeon) are told apart by family, model and ISA."""
  (tmp_path / "zen3").write_text(ZEN3)
  (tmp_path / "spr").write_text(SAPPHIRE)
  zen3 = cpuinfo.cpu(str(tmp_path / "zen3"))
  assert zen3 == {"name": "AMD EPYC", "vendor": "AuthenticAMD", "family": "25", "model": "1",
                  "isa": ["AVX2", "FMA"]}
  assert cpuinfo.describe(zen3, cores=2) == "AMD EPYC (family 25, model 1; AVX2, FMA), 2 cores"
  spr = cpuinfo.cpu(str(tmp_path / "spr"))
  assert spr["isa"] == ["AMX", "AVX-512", "AVX512-BF16", "AVX512-VNNI", "AVX2", "FMA"]
  assert "family 6, model 143" in cpuinfo.describe(spr, cores=2)
  assert (cpuinfo.kind(zen3), cpuinfo.kind(spr)) == ("amd_f25m1", "intel_f6m143")  # file tags


def test_no_cpuinfo(tmp_path):
  info = cpuinfo.cpu(str(tmp_path / "missing"))
  assert info["isa"] == [] and info["family"] == ""
  assert cpuinfo.describe(info, cores=1).endswith("(no AVX2), 1 cores")
  assert cpuinfo.kind(info) == "cpu_f0m0"
