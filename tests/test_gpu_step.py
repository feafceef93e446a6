"""The FLOP count and peak table of benchmarks/gpu_step.py (pure Python; no accelerator)."""
from benchmarks import gpu_step


def test_model_flops_are_6_n_tokens_plus_attention():
  s = gpu_step.SHAPES["bert_base"]
  n = 12 * (4 * 768 ** 2 + 2 * 768 * 3072)  # QKV, attention out, FFN in and out
  assert s.matmul_params() == n == 84_934_656
  per_example = 3 * s.forward_flops_per_example()
  assert per_example == 6 * n * 128 + 3 * 4 * 12 * 128 ** 2 * 768


def test_peaks_by_device_kind():
  assert gpu_step.peak_for("NVIDIA H200", "bfloat16")[0] == 989.4
  assert gpu_step.peak_for("NVIDIA H100 80GB HBM3", "float32")[0] == 494.7  # TF32, default
  assert gpu_step.peak_for("NVIDIA H100 PCIe", "bfloat16")[0] == 756.0
  assert gpu_step.peak_for("NVIDIA A100-SXM4-40GB", "float32")[2] == 19.5
  assert gpu_step.peak_for("cpu", "bfloat16")[0] is None
