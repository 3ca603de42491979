"""hostile33: a campaign on low precision, pipeline and MoE dispatch options, measured-run files, Hugging Face
configs and user profiles (twenty-sixth session). Each test is a finding: the one-line refusal, or the number
the plan must equal."""

from __future__ import annotations

import json

import pytest

MOE = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--global-batch", "64")


def _numbers(out: str) -> tuple:
    doc = json.loads(out)
    return doc["throughput"] and doc["throughput"]["step_time_s"], doc["device_memory"]["allocated_bytes"]


@pytest.mark.parametrize("emit, option, suffix", [("megatron", "--from-megatron", ".sh"), ("bridge", "--from-bridge", ".yaml")])
def test_the_all_to_all_overlap_at_ep_1_is_planned_as_the_launch_runs(cli, tmp_path, emit, option, suffix):
    # D1: Megatron-Core asserts EP > 1 for the overlap (transformer_config.py L3014); the plan kept the overlap's
    # buffers ("overlapped: all_to_all") while the launch left the flag out without a note: another memory read back
    code, out, err = cli(*MOE, "--ep", "1", "--overlap-a2a", "--json")
    assert code in (0, 1), err
    asked = json.loads(out)
    code, plain, err = cli(*MOE, "--ep", "1", "--json")
    assert code in (0, 1), err
    assert asked["parallelism"]["overlap_all_to_all"] is False
    assert _numbers(out) == _numbers(plain)
    code, launch, err = cli(*MOE, "--ep", "1", "--overlap-a2a", "--emit", emit)
    assert code in (0, 1), err
    assert "--overlap-moe-expert-parallel-comm was asked for and is left out" in launch
    path = tmp_path / f"run{suffix}"
    path.write_text(launch)
    code, back, err = cli("plan", option, str(path), "--hw", "h100", "--devices", "16", "--json")
    assert code in (0, 1), err
    assert _numbers(back) == _numbers(out)


def test_the_all_to_all_overlap_at_ep_1_is_stated_in_the_table(cli):
    code, out, err = cli(*MOE, "--ep", "1", "--overlap-a2a")
    assert code in (0, 1), err
    text = " ".join(out.split())
    assert "overlapped: none; Megatron-Core refuses overlap_moe_expert_parallel_comm with no expert parallelism" in text


@pytest.mark.parametrize("extra", [(), ("--recompute", "full")])
def test_deepep_without_expert_parallel_ranks_is_refused(cli, extra):
    # D2: Megatron-Core asserts 'DeepEP dispatcher requires TPxEP > 1' (token_dispatcher.py L1836, over the
    # expert tensor x expert parallel group); the plan was the alltoall dispatcher's and --emit wrote a flex launch
    code, out, err = cli(*MOE, "--ep", "1", "--deepep", *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--deepep" in err and "--ep or --etp above 1" in err and "Traceback" not in err


def test_deepep_with_expert_tensor_parallel_ranks_still_plans(cli):
    code, out, err = cli(*MOE, "--ep", "1", "--tp", "2", "--etp", "2", "--deepep", "--recompute", "full", "--json")
    assert code in (0, 1), err
    assert json.loads(out)["parallelism"]["expert_tensor_parallel"] == 2


def test_a_deepep_launch_at_ep_1_is_refused_in_one_line(cli, tmp_path):
    code, launch, err = cli(*MOE, "--ep", "2", "--deepep", "--emit", "megatron")
    assert code in (0, 1) and "--expert-model-parallel-size 2" in launch, err
    path = tmp_path / "run.sh"
    path.write_text(launch.replace("--expert-model-parallel-size 2", "--expert-model-parallel-size 1"))
    code, out, err = cli("plan", "--from-megatron", str(path), "--hw", "h100", "--devices", "16")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--expert-model-parallel-size or --expert-tensor-parallel-size above 1" in err


def test_a_deepep_search_ranks_no_layout_its_plan_refuses(cli):
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--global-batch", "64",
                         "--search", "--deepep", "--json")
    assert code == 0, err
    found = json.loads(out)
    assert all(r["expert_parallel"] * r["expert_tensor_parallel"] > 1 for r in found["ranking"])
    assert found["best"]["throughput"]["step_time_s"] == pytest.approx(found["ranking"][0]["step_time_s"], rel=1e-12)


def test_a_profile_without_a_compute_capability_is_not_said_to_have_0(cli, tmp_path):
    # D3: a GPU profile may leave chip.compute_capability out (hw check passes); the refusal said "b200 has 0"
    import re

    from btacalc.paths import data_dir

    text = (data_dir("hardware_profiles") / "b200.toml").read_text()
    cut = re.sub(r"\[chip\.compute_capability\]\s*\n(?:(?!\[)[^\n]*\n)*", "", text, count=1)
    assert cut != text
    path = tmp_path / "nocc.toml"
    path.write_text(cut)
    code, out, err = cli("hw", "check", str(path))
    assert code == 0, err
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", str(path), "--devices", "8", "--precision", "fp8")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "states no chip.compute_capability" in err and "has 0" not in err


def _launch_run(cli, tmp_path, **fields):
    code, launch, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2",
                            "--precision", "fp8", "--emit", "megatron")
    assert code in (0, 1) and "--tensor-model-parallel-size 2" in launch, err
    run = {"id": "r1", "source": "a test launch", "model": "llama-3-8b", "hw": "h100", "devices": 8, "precision": "fp8",
           "seq": 4096, "global_batch": 1024, "measured": {"tokens_per_s_per_device": 5000.0}, "role": "check",
           "megatron_args": launch, **fields}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [run]}))
    return path, launch


@pytest.mark.parametrize("field, value", [("tp", 4), ("micro_batch", 10**6), ("pp", 2), ("cp", 2), ("zero", 3),
                                          ("fsdp", True), ("sequence_parallel", False), ("recompute", "full")])
def test_a_measured_runs_layout_field_contradicting_its_launch_is_refused(cli, tmp_path, field, value):
    # D4: the launch was planned and the contradicting field (which labels the run in the report) ignored in silence,
    # where seq, global batch, precision and devices that contradict the launch are refused
    path, _ = _launch_run(cli, tmp_path, **{field: value})
    code, out, err = cli("validate", "--measured", str(path), "--json", "--quiet")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"megatron_args give {field} " in err and f"the run's field {field} {value}" in err


def test_a_measured_runs_agreeing_layout_fields_predict_the_launch(cli, tmp_path):
    import re

    _, launch = _launch_run(cli, tmp_path)
    micro_batch = int(re.search(r"--micro-batch-size (\d+)", launch).group(1))
    path, launch = _launch_run(cli, tmp_path, tp=2, pp=1, cp=1, micro_batch=micro_batch, zero=1, fsdp=False,
                               sequence_parallel=True, recompute="none")
    code, out, err = cli("validate", "--measured", str(path), "--json", "--quiet")
    assert code in (0, 1), err
    predicted = json.loads(out)["measured"]["runs"][0]["predicted"]["tokens_per_s_per_device"]
    script = tmp_path / "run.sh"
    script.write_text(launch)
    code, out, err = cli("plan", "--from-megatron", str(script), "--hw", "h100", "--devices", "8", "--json")
    assert code in (0, 1), err
    assert predicted == pytest.approx(json.loads(out)["throughput"]["tokens_per_s"] / 8, rel=1e-12)
