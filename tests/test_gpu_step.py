"""benchmarks/gpu_step.py: the FLOP count, the peak table, the profile's op counts, and the
fixed-cost check itself (`GPU_SMOKE=1 bash benchmarks/gpu.sh --profile`) on CPU."""
import pytest

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


def test_mpnet_s_relative_bias_is_a_kind_of_its_own():
  """MPNet's shared bias table: its lookup and its gradient's scatter are "relative bias";
  the word-embedding gradient and an encoder matmul keep their kinds."""
  from benchmarks import profile_step  # pylint: disable=import-outside-toplevel
  enc = "jit(per_device)/jit(main)/"
  assert profile_step.kind_of("gather.4", enc + "encoder/relative_attention_bias/take",
                              "f32[32,128,128,12]") == "relative bias"
  assert profile_step.kind_of(
      "scatter.2", enc + "transpose(jvp(encoder/relative_attention_bias/take))",
      "f32[32,12]") == "relative bias"
  assert profile_step.kind_of("scatter.1", enc + "transpose(jvp(embeddings/word_embeddings/"
                              "take))", "f32[30527,768]") == "embedding grad"
  assert profile_step.kind_of("dot.9", enc + "encoder/layer_3/mlp/fc1/dot_general",
                              "f32[4096,3072]") == "matmul"


def test_op_counts_of_a_compiled_module():
  """fixed_cost.op_counts counts the entry computation's launched ops, and whiles, custom
  calls and collectives anywhere."""
  from benchmarks import fixed_cost  # pylint: disable=import-outside-toplevel
  hlo = """HloModule jit_step

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %cc = f32[8]{0} custom-call(%p), custom_call_target="xla_ffi_python_cpu_callback"
  ROOT %t = (s32[], f32[8]{0}) tuple(%p, %cc)
}

ENTRY %main (a: f32[8], b: f32[8,8]) -> (f32[8], f32[8]) {
  %a = f32[8]{0} parameter(0)
  %b = f32[8,8]{1,0} parameter(1)
  %fusion.1 = f32[8]{0} fusion(%a), kind=kLoop, calls=%fused
  %fusion.2 = f32[8]{0} fusion(%fusion.1), kind=kLoop, calls=%fused2
  %copy.3 = f32[8,8]{0,1} copy(%b)
  %all-reduce = (f32[8]{0}, f32[8]{0}) all-reduce(%fusion.1, %fusion.2), replica_groups={{0}}
  %gte = f32[8]{0} get-tuple-element(%all-reduce), index=0
  %w = (s32[], f32[8]{0}) while(%t0), condition=%cond, body=%body
  ROOT %tuple = (f32[8]{0}, f32[8]{0}) tuple(%gte, %fusion.2)
}
"""
  c = fixed_cost.op_counts(hlo)
  assert c["by_opcode"] == {"fusion": 2, "copy": 1, "all-reduce": 1, "while": 1}
  assert c["launched"] == 5 and c["while"] == 1 and c["collectives"] == 1
  assert c["custom_calls"] == {"xla_ffi_python_cpu_callback": 1}


def test_a_gpu_trace_counts_only_the_devices_events(tmp_path):
  """On a GPU the host's launch events carry the HLO names too; only the device's count."""
  import gzip  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  from benchmarks import profile_step  # pylint: disable=import-outside-toplevel
  names = {"fusion.7": ("jit(per_device)/layer_0/LayerNorm_0/mul", "f32[32,384]{1,0}")}
  events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
            {"ph": "X", "name": "fusion.7", "dur": 3000, "pid": 1},
            {"ph": "X", "name": "fusion.7", "dur": 9000, "pid": 2}]
  trace = tmp_path / "t.trace.json.gz"
  with gzip.open(trace, "wt") as f:
    json.dump({"traceEvents": events}, f)
  res = profile_step.summarize(str(trace), names, steps=1, top=5)
  assert res["kinds_ms"] == {"LayerNorm": 3.0} and res["ops_per_step"] == 1


@pytest.mark.slow
def test_the_fixed_cost_check_runs_on_cpu(tmp_path):
  """`GPU_SMOKE=1 bash benchmarks/gpu.sh --profile` (the device check, at a tiny shape): the CE
  step is profiled and its cost beyond the ops named in ms, and HF PyTorch's step is timed in
  the same run (or its absence said)."""
  import json  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = tmp_path / "gpu.json"
  env = dict(os.environ, GPU_SMOKE="1", PYTHON=sys.executable, OMP_NUM_THREADS="1")
  p = subprocess.run(["bash", "benchmarks/gpu.sh", "--profile", "5", "--out", str(out)],
                     cwd=repo, env=env, capture_output=True, text=True, timeout=300,
                     check=False)
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
  assert "fixed cost: traced" in p.stdout
  data = json.loads(out.read_text())
  assert "family" in data["info"]["cpu"] and "cores" in data["info"]["cpu"]  # the host CPU
  res = {r["case"]: r for r in data["results"]}
  assert set(res) == {"tiny/ce/bfloat16", "tiny/hf_torch_eager/bfloat16 autocast"}
  prof = res["tiny/ce/bfloat16"]["profile"]
  assert prof["op_ms"] > 0 and prof["ops_per_step"] > 0 and prof["ops"]["launched"] > 0
  assert 0 < prof["host_ms"] <= prof["sync_step_ms"] and prof["null_host_ms"] > 0
  assert abs(prof["idle_ms"] - (1000 * prof["traced_step_s"] - prof["op_ms"])) < 1e-6
  torch_row = res["tiny/hf_torch_eager/bfloat16 autocast"]
  assert torch_row.get("step_s", 0) > 0 or "No module named" in torch_row["error"]
  assert "error" in torch_row or "family" in torch_row["cpu"]


def test_the_one_device_step_without_collectives_is_the_same_step():
  """fixed_cost.without_collectives drops the step's pmeans (and the all-reduce XLA:CPU makes
  of them) on one device: its first step's params, optimizer state and metrics are the
  step's own, bit for bit."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from benchmarks import fixed_cost, gpu_step  # pylint: disable=import-outside-toplevel
  shape = gpu_step.SMOKE_SHAPES["tiny"]
  fn, state, batch, _ = gpu_step.build_step(shape, "ce", "float32")
  ref = fn(state, batch)
  assert fixed_cost.op_counts(fn.lower(*ref[:1], batch).compile().as_text())["collectives"] >= 2
  with fixed_cost.without_collectives():
    fn, state, batch, _ = gpu_step.build_step(shape, "ce", "float32")
    got = fn(state, batch)
    counts = fixed_cost.op_counts(fn.lower(*got[:1], batch).compile().as_text())
  assert counts["collectives"] <= 1  # CE's psum of its scalar denominator is left
  same = jax.tree.map(lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)), ref, got)
  assert all(jax.tree.leaves(same))
