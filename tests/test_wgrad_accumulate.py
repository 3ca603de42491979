"""--no-gradient-accumulation-fusion (issue 21, task det2): the separate main-gradient add per parameter and
micro-batch (btacalc/model/gpu/fixed.py), and the Megatron-LM CI rows that run it with --deterministic-mode.

Expected values are written from the sources: TransformerEngine @ d0067d0d linear.py L1231-1262 (the unfused
wgrad GEMM writes the activation dtype, 2 B), Megatron-LM @ d98e8a64 distributed_data_parallel.py L578
(main_grad.add_(grad): read 2 B + read 4 B + write 4 B), the H100's 3.35 TB/s x 0.870 streaming share
(tests/test_streaming_bandwidth.py) and Llama 3 8B's shapes (h 4,096, 32 heads of 128, 8 KV heads, SwiGLU
f 14,336, vocabulary 128,256, untied, 32 layers)."""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import resolve_hardware
from btacalc.config.megatron_codec import RUN_ROWS, decode, encode, render_flags
from btacalc.config.presets import load_preset
from btacalc.model.gpu.fixed import wgrad_accumulate_bytes_per_param, wgrad_accumulate_s
from btacalc.model.gpu.timing import gpu_step_time
from btacalc.model.problem import make_problem
from btacalc.planning.measured import load_runs, predict

H100_STREAM = 3.35e12 * 0.870  # datasheet HBM x the streaming kernels' measured share

# Llama 3 8B, per device at TP 4 (the linear weights split 4 ways, the two norm vectors whole)
H, KV_H, D, F, L = 4096, 8, 128, 14336, 32
LAYER_LINEARS = H * (H + 2 * KV_H * D) + H * H + 3 * H * F  # qkv, output projection, SwiGLU gate/up/down
LAYER_PER_DEVICE_TP4 = LAYER_LINEARS // 4 + 2 * H
VOCAB_TP4 = 251 * 512  # 128,256 rounded up to a multiple of 128 x TP = 512 (Megatron's padding)
EMBEDDINGS_PER_DEVICE_TP4 = 2 * VOCAB_TP4 * H // 4  # untied input embedding and output layer
MODEL_PER_DEVICE_TP4 = L * LAYER_PER_DEVICE_TP4 + EMBEDDINGS_PER_DEVICE_TP4 + H  # + the final norm


def _problem(fusion: bool, gradient_bytes: int = 4, **layout):
    run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=gradient_bytes,
                     gradient_accumulation_fusion=fusion)
    return make_problem(load_preset("llama-3-8b"), resolve_hardware("h100"), run, Layout(**layout))


def test_the_unfused_add_moves_the_16_bit_gradient_and_the_main_gradient_twice():
    """Read the GEMM's BF16 wgrad (2 B), read the fp32 main gradient (4 B), write it back (4 B): 10 B; with
    --grad-reduce-in-bf16 the main gradient is 2 B: 2 + 2 + 2 = 6 B."""
    assert wgrad_accumulate_bytes_per_param(2, 4) == 2 + 4 + 4 == 10
    assert wgrad_accumulate_bytes_per_param(2, 2) == 2 + 2 + 2 == 6


def test_one_layers_extra_bytes_at_tp4_on_an_h100():
    """One Llama 3 8B layer at TP 4 holds (4096 x 6144 + 4096^2 + 3 x 4096 x 14336) / 4 + 2 x 4096 =
    54,534,144 parameters: 545 MB of extra traffic per micro-batch, 0.187 ms at 3.35 TB/s x 0.870."""
    assert LAYER_PER_DEVICE_TP4 == 54_534_144
    p = _problem(False, devices=8, tensor_parallel=4)
    t = wgrad_accumulate_s(p, LAYER_PER_DEVICE_TP4)
    assert t == pytest.approx(LAYER_PER_DEVICE_TP4 * 10 / H100_STREAM)
    assert t == pytest.approx(0.187e-3, rel=2e-3)
    # fused (Megatron's default): the GEMM accumulates, nothing separate to time
    assert wgrad_accumulate_s(_problem(True, devices=8, tensor_parallel=4), LAYER_PER_DEVICE_TP4) == 0.0


@pytest.mark.parametrize("gradient_bytes", [4, 2])
def test_the_step_row_is_every_stage_parameter_once_per_micro_batch(gradient_bytes):
    """TP 4, DP 2, M = 4 micro-batches: the row is 4 x 2,008,289,280 parameters x (2 + 2g) B at the streaming
    bandwidth (the whole main-gradient buffer: ZeRO-1 shards only the optimizer state); 0 with the fusion."""
    assert MODEL_PER_DEVICE_TP4 == 2_008_289_280
    m = 4
    layout = dict(devices=8, tensor_parallel=4, zero_stage=1, micro_batches=m)
    unfused = gpu_step_time(_problem(False, gradient_bytes, **layout), 1, 1)
    expected = m * MODEL_PER_DEVICE_TP4 * (2 + 2 * gradient_bytes) / H100_STREAM
    assert unfused.phase_time_s["wgrad_accumulate"] == pytest.approx(expected, rel=1e-9)
    fused = gpu_step_time(_problem(True, gradient_bytes, **layout), 1, 1)
    assert fused.phase_time_s["wgrad_accumulate"] == 0.0
    assert unfused.step_time_s > fused.step_time_s


def test_emit_and_import_carry_the_flag():
    """Megatron's --no-gradient-accumulation-fusion stores False into gradient_accumulation_fusion (default
    True): the plan writes the flag only when the fusion is off, and reads it back."""
    rows = tuple(r for r in RUN_ROWS if r.name == "gradient accumulation fusion")
    args = encode({"run.gradient_accumulation_fusion": False}, rows)
    assert args == {"gradient_accumulation_fusion": False}
    assert render_flags(args) == ["--no-gradient-accumulation-fusion"]
    assert encode({"run.gradient_accumulation_fusion": True}, rows) == {}
    assert decode(args, rows)[0]["run.gradient_accumulation_fusion"] is False
    assert decode({}, rows)[0]["run.gradient_accumulation_fusion"] is True


CI_ROWS = [r for r in load_runs() if r.id.startswith("gpt-7b-megatron-ci-") and r.id.endswith("-dev-time")]


@pytest.mark.parametrize("run", CI_ROWS, ids=[r.id for r in CI_ROWS])
def test_the_ci_rows_are_predicted_with_what_is_not_timed_stated(run):
    """The CI test (model_config.yaml @ d98e8a64) sets --deterministic-mode, --no-gradient-accumulation-fusion
    and NVTE_FWD/BWD_LAYERNORM_SM_MARGIN 16: the unfused add is timed, the rest is listed per run."""
    assert len(CI_ROWS) == 6
    r = run.recipe
    assert r.deterministic_mode and r.gradient_accumulation_fusion is False and r.layernorm_sm_margin == 16
    result = predict(run)
    assert result.expressible and result.error is not None
    assert set(result.not_timed) == {"deterministic_mode", "layernorm_sm_margin"}
    assert "NCCL_ALGO=Ring is timed" in result.not_timed["deterministic_mode"]
    assert "SMs - 16" in result.not_timed["layernorm_sm_margin"]
    # the add is in the prediction: the same row with the fusion on is faster
    fused = run.model_copy(update={"recipe": r.model_copy(update={"gradient_accumulation_fusion": None})})
    assert predict(fused).predicted.tokens_per_s_per_device > result.predicted.tokens_per_s_per_device


def test_a_wafer_refuses_the_option_in_one_line(cli):
    """The unfused add is Megatron's DDP hook (distributed_data_parallel.py L578); a wafer run has no such kernel,
    so --no-gradient-accumulation-fusion on a wafer profile is refused (as --cpu-offloading-num-layers is), not
    accepted and shown in the plan's inputs while nothing reads it."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "wse3", "--devices", "1", "--seq", "4096",
                         "--no-gradient-accumulation-fusion")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--no-gradient-accumulation-fusion" in err and "GPU" in err


def _json_of(cli, *args: str) -> dict:
    import json

    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_sweep_and_compare_take_the_option_as_plan_does(cli):
    """--no-gradient-accumulation-fusion reaches sweep's points and compare's GPU rows: each gives the step time
    plan gives with the option (the add timed, as the tests above derive it), which is longer than without it;
    compare's wafer row, which has no such add, is planned as without the option."""
    common = ["-m", "llama-3-8b", "--devices", "8", "--recompute", "full", "--seq", "4096"]
    plan = {f: _json_of(cli, "plan", "--hw", "h100", *common, *f)["throughput"]["step_time_s"]
            for f in ((), ("--no-gradient-accumulation-fusion",))}
    assert plan[("--no-gradient-accumulation-fusion",)] > plan[()]
    swept = _json_of(cli, "sweep", "--hw", "h100", *common, "--vary", "global-batch=256", "--quiet",
                     "--no-gradient-accumulation-fusion")
    point = swept["points"][0]
    unfused = _json_of(cli, "plan", "--hw", "h100", *common, "--global-batch", "256",
                       "--no-gradient-accumulation-fusion")
    assert point["throughput"]["step_time_s"] == pytest.approx(unfused["throughput"]["step_time_s"], rel=1e-12)
    rows = _json_of(cli, "compare", "--hw", "h100,wse3", "-m", "llama-3-8b", "--devices", "8", "--recompute", "full",
                    "--seq", "4096", "--quiet", "--no-gradient-accumulation-fusion")["rows"]
    by_hw = {r["hardware"]: r for r in rows}
    assert by_hw["h100"]["step_time_s"] == pytest.approx(plan[("--no-gradient-accumulation-fusion",)], rel=1e-12)
    assert by_hw["wse3"]["fits"]


def test_the_add_reads_the_main_gradient_bytes_the_wgrad_gemm_reads():
    """The fused wgrad GEMM (gpu/costs.py) and the unfused add both take the main gradient's bytes from the run's
    gradient_bytes: with 4-byte elements and --grad-bytes 2 the catalogue's gradient state rate is the element
    (4 B), but the main gradient is 2 B: read the 4 B wgrad, read and write the 2 B main gradient, 4 + 2 + 2 = 8 B."""
    from btacalc.model.state import bytes_per_param

    run = RunOptions(seq_len=4096, attention="flash", gradient_bytes=2, bytes_per_element=4,
                     gradient_accumulation_fusion=False)
    p = make_problem(load_preset("llama-3-8b"), resolve_hardware("h100"), run, Layout(devices=8, tensor_parallel=4))
    rates = bytes_per_param(p)
    assert rates["gradients"] == 4  # main_grads = "param": beta*P (formulas/training_state.toml)
    t = wgrad_accumulate_s(p, LAYER_PER_DEVICE_TP4)
    assert t == pytest.approx(LAYER_PER_DEVICE_TP4 * (4 + 2 + 2) / H100_STREAM)
