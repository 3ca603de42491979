"""freshuser27: a new user planning DeepSeek-V3 (and Llama 3.1 405B) on 256 GB300 (NVL72) against 256 GB200 and 256
B300 in NVFP4 and MXFP8 from the README, with profiles that come from datasheets only.

Each test pins one defect found that way. Expected values are arithmetic on datasheet numbers and on the command's
own inputs, never btacalc's output.
"""

from __future__ import annotations

import json

import pytest

from btacalc.config.hardware import resolve_hardware

NVLINK5_PER_DIRECTION = 900e9  # B/s: "1.8 TB/s GPU-to-GPU" (HGX and GB300 NVL72 pages), both directions
B200_NCCL_ALL_TO_ALL_SHARE = 0.6408  # nccl-tests alltoall_perf on 8 B200 (b200.toml's cited fit): 576.7 / 900 GB/s
KIB, MIB = 1024, 1024 ** 2


def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def _row(report: dict, name: str) -> dict:
    (row,) = [c for c in report["throughput"]["collectives"] if c["name"] == name]
    return row


@pytest.mark.parametrize("hw", ["gb300", "b300"])
def test_blackwell_ultra_nvlink_all_to_all_at_nccls_all_to_all_share(cli, hw):
    """The expert all-to-all inside an NVLink domain runs at NCCL's measured all-to-all share of NVLink 5 (0.6408 on
    B200/GB200), not the ring collectives' 0.802. The B300 and GB300 profiles carried every other collective number
    from B200/GB200 but not this one, so the same exchange over the same 18 NVLink 5 links (900 GB/s per direction)
    ran 0.802 / 0.6408 = 1.25x faster on Blackwell Ultra than on Blackwell: 0.617 s against 0.764 s per step for
    DeepSeek-V3 at EP 8 on 256 GPUs, 3.7% of the GB300 step, in the GB300-vs-GB200 verdict."""
    args = ("--model", "qwen3-30b-a3b", "--devices", "8", "--ep", "8", "--global-batch", "64", "--micro-batch", "1")
    report = _plan(cli, "--hw", hw, *args)
    row = _row(report, "expert_all_to_all")
    h, k, s, ep = 2048, 8, 4096, 8  # Qwen3-30B-A3B: hidden 2048, top-8; one sequence of 4,096 tokens per micro-batch
    sent = s * k * h * 2 * (ep - 1) / ep  # 16-bit token copies one rank sends to its 7 peers per all-to-all
    assert row["link"] == "nvlink"
    assert row["message_bytes"] == pytest.approx(sent, rel=1e-12)
    bandwidth_s = row["message_calls"] * sent / (NVLINK5_PER_DIRECTION * B200_NCCL_ALL_TO_ALL_SHARE)
    assert row["time_s"] == pytest.approx(row["calls"] * row["latency_s"] + bandwidth_s, rel=1e-9)
    blackwell = _row(_plan(cli, "--hw", hw[:-3] + "200", *args), "expert_all_to_all")
    assert row["time_s"] == pytest.approx(blackwell["time_s"], rel=1e-12)


@pytest.mark.parametrize("hw,sms", [("b200", 148), ("gb200", 148), ("b300", 160), ("gb300", 160)])
def test_blackwell_sram_bytes_is_the_sum_its_note_gives(hw, sms):
    """chip.sram_bytes of the Blackwell profiles is L2 126 MiB + SMs x 256 KiB, as each note says: B200/GB200 148 SMs
    (170,917,888 B; the file had 170,655,744 B, 147 SMs), B300/GB300 160 SMs (174,063,616 B; the file had 176,160,768
    B = 168 MiB, 168 SMs)."""
    profile = resolve_hardware(hw)
    assert profile.chip.cores.value == sms
    assert profile.chip.sram_bytes.value == 126 * MIB + sms * 256 * KIB


def test_expected_error_says_when_none_of_its_runs_is_on_the_plans_profile(cli):
    """README ("At a glance"): "b300 and gb300 have no measured run in the shipped set (their profiles take Blackwell's
    fitted factor)". A GB300 plan's expected error named its runs "gpu-blackwell (b200, gb200, b300, gb300), ..." and
    said nothing more, as if GB300 runs were among them. It now says none is, and where the factors come from; a GB200
    plan, whose runs are there, is told nothing of the kind. The shipped runs' profiles are read from the shipped
    file, not from btacalc's answer."""
    from btacalc.paths import package_data

    runs = json.loads(package_data("expected_error.json").read_text(encoding="utf-8"))["runs"]
    assert not [r for r in runs if r["hw"] in ("b300", "gb300")]
    assert [r for r in runs if r["hw"] == "gb200" and r["moe"]]
    args = ("--model", "qwen3-30b-a3b", "--devices", "8", "--ep", "8", "--global-batch", "64", "--micro-batch", "1")
    ultra = _plan(cli, "--hw", "gb300", *args)["throughput"]["expected_error"]["basis"]
    assert "none on gb300, which takes gpu-blackwell's factors (btacalc hw show gb300)" in ultra
    blackwell = _plan(cli, "--hw", "gb200", *args)["throughput"]["expected_error"]["basis"]
    assert "none on" not in blackwell
    code, out, _ = cli("plan", "--hw", "b300", *args)
    assert code == 0 and "none on b300" in " ".join(out.split())


def test_low_precision_plan_says_its_mfu_is_over_the_16_bit_peak(cli):
    """README: MFU = model FLOPs / (step time x devices x the profile's 16-bit peak), under FP8/FP4 too. An NVFP4 plan
    on GB300 printed "MFU 46.5%" and said nothing of it; against the 15 PFLOP/s FP4 peak its GEMMs run at it would be
    a sixth of that. The throughput caption now names the peak: GB300 NVL72's 360 PFLOP/s of sparse FP16/BF16 over 72
    GPUs, halved for dense, 2.5 PFLOP/s. A 16-bit plan's caption is as before."""
    args = ("--model", "qwen3-30b-a3b", "--hw", "gb300", "--devices", "8", "--ep", "8", "--global-batch", "64",
            "--micro-batch", "1")
    peak = 360e15 / 72 / 2
    code, out, _ = cli("plan", *args, "--precision", "nvfp4")
    assert code == 0
    assert f"MFU over the 16-bit peak {peak / 1e15:g} PFLOP/s (chip.peak_flops_per_s), under nvfp4 too" in " ".join(
        out.split())
    code, out, _ = cli("plan", *args)
    assert code == 0 and "MFU over" not in out


def test_estimated_capacity_is_not_called_what_the_driver_reports(cli):
    """No nvidia-smi total of a B300 or GB300 is published: their capacities are 288 GB each (NVIDIA's NIM notes for
    the B300 SXM6 SKU, the Blackwell Ultra blog) scaled by the B200's 183,359 MiB per 180 GB (1,018.66 MiB per
    advertised GB), estimates in the profiles. The plan's memory
    caption called 307.62 GB "the driver reports" on GB300 as on B200, whose 183,359 MiB is a published nvidia-smi
    total; it now says the GB300 number is an estimate and keeps the B200's words."""
    for hw, gb in (("gb300", 288), ("b300", 288)):
        assert resolve_hardware(hw).memory.offchip_memory_bytes.value == round(gb * 183_359 / 180) * MIB
    args = ("--model", "qwen3-30b-a3b", "--devices", "8", "--ep", "8", "--global-batch", "64", "--micro-batch", "1")
    code, out, _ = cli("plan", "--hw", "gb300", *args)
    text = " ".join(out.split())
    capacity = f"{round(288 * 183_359 / 180) * MIB / 1e9:.2f} GB"
    assert code == 0 and f"of the {capacity} the driver is estimated to report" in text
    code, out, _ = cli("plan", "--hw", "b200", *args)
    assert code == 0 and f"of the {183_359 * MIB / 1e9:.2f} GB the driver reports" in " ".join(out.split())


@pytest.mark.parametrize("hw,gpu_w,blackwell_system_w,blackwell_gpu_w", [
    ("gb300", 1400, 120e3 / 72, 1200),  # Blackwell Ultra blog's 1,400 W; GB200 NVL72: ~120 kW per rack, 1,200 W GPUs
    ("b300", 1100, 14.3e3 / 8, 1000),  # b300's assumed 1,100 W; DGX B200: 14.3 kW max over 8 GPUs of 1,000 W
])
def test_blackwell_ultra_tokens_per_kw_over_system_power(cli, hw, gpu_w, blackwell_system_w, blackwell_gpu_w):
    """README: per-kW numbers use system power (a DGX node's or NVL72 rack's per GPU). B300 and GB300 gave none, so
    their tokens/s per kW took the GPU alone (1,100 W, 1,400 W) against B200's 1,787.5 W and GB200's 1,667 W of
    system power: 8 GB300 came out 21% better per kW than 8 GB200 on the same run while drawing more. They now take
    their GPU's power plus the rest of the node per GPU as the Blackwell profile counts it."""
    args = ("--model", "qwen3-30b-a3b", "--hw", hw, "--devices", "8", "--ep", "8", "--global-batch", "64",
            "--micro-batch", "1")
    th = _plan(cli, *args)["throughput"]
    system_w = gpu_w + round(blackwell_system_w) - blackwell_gpu_w if hw == "gb300" else \
        gpu_w + blackwell_system_w - blackwell_gpu_w
    assert th["tokens_per_s_per_kw"] == pytest.approx(th["tokens_per_s"] / (8 * system_w / 1e3), rel=1e-12)


def test_cast_column_names_the_weights_share_the_phase_time_leaves_out(cli):
    """Hand check of one GEMM phase (W_o, 4096 x 7168 x 16384 on one GB300 under MXFP8): the row's time is its GEMMs
    at their shares of the 5 PFLOP/s FP8 peak (720 PFLOP/s sparse / 72 / 2) plus its casts, less the weights' cast:
    the step charges that once (TransformerEngine caches the quantised weights for the step's micro-batches), while
    the row's `cast` shows it as 1/M. The caption said the cast was all "inside the phase's time"; the weights' share
    is 117,440,512 params x (2 B read + 2 x (1 + 1/32) B written) at 0.651 of 8 TB/s (the profile's two-copy cast
    share) over M = 128 micro-batches, 0.72 us."""
    args = ("--model", "deepseek-v3", "--hw", "gb300", "--devices", "256", "--pp", "32", "--ep", "8", "--precision",
            "mxfp8", "--global-batch", "1024")
    report = _plan(cli, *args)
    (row,) = [p for p in report["layer_kinds"][1]["phases"] if p["name"] == "attn_out_proj"]
    (gemm,) = row["gemms"]
    assert (gemm["m"], gemm["n"], gemm["k"]) == (4096, 7168, 16384)
    peak = 720e15 / 72 / 2
    gemm_s = (2 * 4096 * 7168 * 16384 / (gemm["efficiency"] * peak)
              + 2 * 2 * 4096 * 7168 * 16384 / (gemm["backward_efficiency"] * peak))
    weights_share = 16384 * 7168 * (2 + 2 * (1 + 1 / 32)) / (0.651 * 8e12) / 128
    assert row["time_s"] == pytest.approx(gemm_s + row["cast_time_s"] - weights_share, rel=1e-9)
    code, out, _ = cli("plan", *args)
    assert code == 0 and "the step charges it once (weight_casts)" in " ".join(out.split())


@pytest.mark.parametrize("hw", ["b300", "b200"])
def test_the_capacity_kind_is_in_the_plan_json_and_reads_back(hw):
    """The caption's words follow the profile's kind of memory.offchip_memory_bytes; the plan JSON carries that kind
    (device_memory.capacity_kind), so a plan reads back equal to itself. Kept out of the JSON, a plan on an
    estimated-capacity profile did not (tests/test_properties' round trip found it on b300)."""
    from btacalc.config.execution import ExecutionRequest
    from btacalc.config.presets import resolve_model
    from btacalc.planning.plan import make_plan
    from btacalc.planning.report import PlanReport

    report = make_plan(resolve_model("llama-3-8b"), resolve_hardware(hw), ExecutionRequest(devices=8))
    text = report.model_dump_json()
    assert json.loads(text)["device_memory"]["capacity_kind"] == resolve_hardware(hw).memory.offchip_memory_bytes.kind
    assert PlanReport.model_validate_json(text) == report
