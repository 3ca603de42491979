"""Helpers shared by the tests (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from btacalc.config.execution import Layout, RunOptions
from btacalc.config.hardware import HardwareProfile, resolve_hardware
from btacalc.model.memory import resolve_memory_model
from btacalc.model.problem import Problem, make_problem


def resolved(model: Any, hw: str | HardwareProfile = "wse3", layout: Layout = Layout(), **run: Any) -> Problem:
    """A problem with its memory model resolved (auto: resident if it fits, else streamed on a wafer)."""
    hardware = resolve_hardware(hw) if isinstance(hw, str) else hw
    return resolve_memory_model(make_problem(model, hardware, RunOptions(**run), layout))


def flash_problem(model: str, hw: str, **layout: Any) -> Problem:
    """A GPU problem under flash attention without recompute, its NVLink domain the profile's node (the collective
    tests' plans: test_a2a_network, test_review31); `layout`: Layout fields."""
    hardware = resolve_hardware(hw)
    fields: dict[str, Any] = dict(devices_per_node=int(hardware.system.devices_per_node.value))
    fields.update(layout)
    from btacalc.config.presets import resolve_model

    return make_problem(resolve_model(model), hardware, RunOptions(attention="flash", recompute="none"),
                        Layout(**fields))


def with_calibration(hw: HardwareProfile, **numbers: Any) -> HardwareProfile:
    """`hw` with calibration numbers replaced (e.g. compute_efficiency=Number(...))."""
    return hw.model_copy(update={"calibration": hw.calibration.model_copy(update=numbers)})


DATA = Path(__file__).parent / "data"

# Moonlight-16B-A3B's config.json (huggingface.co/moonshotai/Moonlight-16B-A3B, model_type deepseek_v3), as a user
# writes it from the model card: MLA without query compression, 64 routed experts (top 6) and 2 shared, one dense
# layer, a sigmoid router with the aux-loss-free bias, and a sequence-wise auxiliary loss of coefficient 0.001.
MOONLIGHT = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 163840,
    "hidden_size": 2048, "intermediate_size": 11264, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
    "routed_scaling_factor": 2.446, "kv_lora_rank": 512, "q_lora_rank": None, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1,
    "num_experts_per_tok": 6, "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "aux_loss_alpha": 0.001, "seq_aux": True, "hidden_act": "silu",
    "max_position_embeddings": 8192, "initializer_range": 0.02, "rms_norm_eps": 1e-05, "rope_theta": 50000.0,
    "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
}



def hf_config(name: str) -> dict[str, Any]:
    """A stored Hugging Face config.json (tests/data/NAME.config.json)."""
    return json.loads((DATA / f"{name}.config.json").read_text())


def emitted(cli: Any, given: str, kind: str = "megatron") -> str:
    """`btacalc plan GIVEN --emit KIND`'s output (a plan that does not fit is emitted too)."""
    code, out, err = cli("plan", *given.split(), "--emit", kind)
    assert code in (0, 1), err
    return out


def planned_as_it_ran(run: Any) -> Any:
    """A measured row btacalc plans as it ran: expressed without a reason and predicted with an error (runs10, runs11);
    the prediction, for the row's own band checks."""
    from btacalc.planning.measured import express, predict

    request, reason = express(run)
    assert reason == "" and request is not None
    result = predict(run)
    assert result.expressible and result.error is not None
    return result


# A Megatron-LM launch of a small MoE GPT over 8 GPUs with EP 8 and the alltoall dispatcher (the EP overlap's
# options are tested on it: add the flag under test, with or without --overlap-moe-expert-parallel-comm)
MOE_TOY_LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
                  "--num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
                  "--global-batch-size 64 --bf16 --vocab-size 32000 --num-experts 8 --moe-router-topk 2 "
                  "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --moe-grouped-gemm "
                  "--disable-bias-linear --swiglu --normalization RMSNorm")
# Qwen3-30B-A3B on 16 H100s with the EP overlap: the plan whose emitted launch the overlap's options round-trip in
EP_OVERLAP_PLAN = ("-m", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--overlap-a2a",
                   "--micro-batch", "1", "--global-batch", "256", "--seq", "4096")


def overlap_round_trip(cli: Any, tmp_path: Path, option: str, emit: str) -> tuple[str, str]:
    """EP_OVERLAP_PLAN with `option`, emitted as `emit` (megatron or bridge) and planned again from that file:
    (the emitted text, the re-read plan's JSON)."""
    code, out, err = cli("plan", *EP_OVERLAP_PLAN, option, "--emit", emit)
    assert code in (0, 1), err
    path = tmp_path / "launch.txt"
    path.write_text(out)
    code, back, err = cli("plan", f"--from-{emit}", str(path), "--hw", "h100", "--devices", "16", "--json",
                          *(("-m", "qwen3-30b-a3b") if emit == "bridge" else ()))
    assert code in (0, 1), err
    return out, back


ROOT = Path(__file__).resolve().parents[1]


def default_dispositions() -> None:
    """In the child before exec: the stopping signals at their default action, whatever the test run inherited (a
    background job of a non-interactive shell ignores SIGINT and SIGQUIT, which btacalc then keeps ignoring)."""
    import signal

    for name in ("SIGINT", "SIGQUIT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def started(args: list[str], cwd: Path) -> "subprocess.Popen[str]":
    """`python -m btacalc ARGS` started in `cwd` from this checkout, its standard error captured (signal tests), with
    the stopping signals at their default action (`default_dispositions`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "btacalc", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=default_dispositions)


def read_terminal(leader: int, limit_s: float = 120) -> bytes:
    """All a pseudo-terminal's other end wrote, until it closes (Linux reads EIO then) or nothing comes for
    `limit_s`; the caller closes `leader`."""
    import select

    shown = b""
    while select.select([leader], [], [], limit_s)[0]:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        shown += chunk
    return shown


def on_terminal(args: list[str], rows: int, columns: int, limit_s: float = 120) -> tuple[int, str]:
    """`python -m btacalc ARGS` from this checkout with its standard output on a pseudo-terminal of `rows` x
    `columns` (COLUMNS and LINES unset, standard error discarded): its exit code and what the terminal showed."""
    import fcntl
    import struct
    import termios

    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "btacalc", *args], stdout=follower, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
    os.close(follower)
    try:
        shown = read_terminal(leader, limit_s)
    finally:
        os.close(leader)
    return proc.wait(timeout=limit_s), shown.decode("utf-8", "replace")


def wait_for_temp(folder: Path, proc: "subprocess.Popen[str]", limit_s: float = 60) -> None:
    """Until a command streaming its output has a temporary file in `folder` (it is mid-write)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and proc.poll() is None:
        if any(p.name.endswith(".tmp") for p in folder.iterdir()):
            return
        time.sleep(0.02)
    pytest.fail("the command never started streaming")


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_prose() -> str:
    """The README outside fenced blocks, lines joined by spaces (a sentence may wrap)."""
    kept, fenced = [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append(line.strip())
    return " ".join(kept)


def readme_table_errors() -> dict[str, float]:
    """The README's generated measured-runs table (tools/accuracy.py writes it from `validate`; tests/test_measured.py
    checks it): the error per run id, in percent as printed there (one decimal; a Unicode minus read as '-')."""
    text = README.read_text(encoding="utf-8")
    body = text.split("<!-- accuracy:begin (tools/accuracy.py) -->\n", 1)[1].split("\n<!-- accuracy:end -->", 1)[0]
    out = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        hit = re.match(r"([+\-−]\d+\.\d)%", cells[7]) if len(cells) > 7 else None
        if hit:
            out[cells[0]] = float(hit.group(1).replace("−", "-"))
    return out


def readme_quote(pattern: str) -> re.Match:
    """The README prose's match of `pattern`; a failure names the pattern the prose no longer holds."""
    match = re.search(pattern, readme_prose())
    assert match, f"the README no longer says {pattern!r}: update this test with the prose"
    return match


def one_line_error(code: int, out: str, err: str, fragment: str = "") -> None:
    """Bad input's contract: exit 2, one line on stderr naming `fragment`, nothing on stdout (the hostile suites)."""
    assert code == 2, (code, err[-500:])
    assert err.startswith("btacalc: error:") and len(err.strip().splitlines()) == 1, err
    assert fragment in err, err
    assert out == ""


def bash_words(script: str, folder: Path) -> list[str]:
    """What bash gives torchrun when it runs `script` in `folder` (torchrun a function that prints its words, one per
    line): the launch as its shell reads it, not as btacalc does (the hostile suites' reference)."""
    import shutil

    assert shutil.which("bash")
    run = subprocess.run(["bash", "-c", 'torchrun() { printf "%s\\n" "$@"; }; source /dev/stdin'], input=script,
                         capture_output=True, text=True, cwd=folder, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()
