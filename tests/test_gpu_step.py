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


def test_a_gpu_kernels_time_joins_its_hlo_instruction(tmp_path):
  """profile_step.summarize joins a trace event to the compiled HLO by its name (XLA:CPU's
  events) or, for a GPU kernel named otherwise, by its "hlo_op" argument; events of neither
  (the host's Python, say) are left out."""
  import gzip  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  from benchmarks import profile_step  # pylint: disable=import-outside-toplevel
  names = profile_step.hlo_op_names(
      '  %dot.3 = f32[32,384]{1,0} dot(%a, %b), metadata={op_name="jit(per_device)/'
      'layer_0/mlp/fc1/dot_general"}\n'
      '  ROOT %fusion.7 = f32[32,384]{1,0} fusion(%dot.3), metadata={op_name="jit(per_device)/'
      'layer_0/LayerNorm_0/mul"}\n')
  events = [{"ph": "X", "name": "fusion.7", "dur": 3000},
            {"ph": "X", "name": "sm90_xmma_gemm_f32f32", "dur": 6000,
             "args": {"hlo_op": "dot.3"}},
            {"ph": "X", "name": "PjitFunction(step)", "dur": 50000}]
  trace = tmp_path / "t.trace.json.gz"
  with gzip.open(trace, "wt") as f:
    json.dump({"traceEvents": events}, f)
  res = profile_step.summarize(str(trace), names, steps=3, top=5)
  assert res["kinds_ms"] == {"matmul": 2.0, "LayerNorm": 1.0}
  assert len(res["top_ops_ms"]) == 2
