"""freshuser24: GPT-OSS-120B planned as a new user would, from the README (128 H100 / 64 GB200 against a CS-3).

Each test pins one defect the user tripped on; the expected values are arithmetic from the inputs given or
Megatron-LM's own files (cited), not btacalc's output.
"""

from __future__ import annotations

import json
import math


def _flat(text: str) -> str:
    """The output's words on one line (a rich panel's borders and line breaks out)."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


# "What would fit" said "(smallest power-of-two device count; EP = gcd(N, E))" beside an EP that is not gcd(N, E):
# the user's own --ep, kept (--ep 4 at 32 devices, where gcd(32, 128) = 32), or the default under --pp, which
# splits the experts over devices / PP (gcd(32 / 2, 128) = 16, not gcd(32, 128) = 32)
def test_what_would_fit_states_the_rule_its_expert_parallelism_follows(cli):
    experts = 128  # gpt-oss-120b's num_local_experts
    code, out, _ = cli("plan", "-m", "gpt-oss-120b", "--hw", "h100", "-n", "16", "--ep", "4")
    given = _flat(out)
    assert code == 1 and "--devices 32 --ep 4 " in given
    assert math.gcd(32, experts) != 4 and "gcd(N, E)" not in given and "the given --ep kept" in given

    code, out, _ = cli("plan", "-m", "gpt-oss-120b", "--hw", "h100", "-n", "8", "--pp", "2")
    piped = _flat(out)
    ep = math.gcd(32 // 2, experts)
    assert code == 1 and ep == 16 and f"--devices 32 --ep {ep} " in piped
    assert "EP = gcd(N / (ETP·PP), E)" in piped and "EP = gcd(N, E)" not in piped


def _launch_with(cli, tmp_path, extra: str, name: str, old: str = "--softmax-type learnable") -> str:
    """The emitted GPT-OSS-120B launch (128 H100, PP 8, EP 8) with `extra` added after `old`, as a file."""
    code, out, _ = cli("plan", "-m", "gpt-oss-120b", "--hw", "h100", "-n", "128", "--pp", "8", "--ep", "8",
                       "--emit", "megatron")
    assert code == 0 and old in out
    path = tmp_path / name
    path.write_text(out.replace(old, f"{old} {extra}"))
    return str(path)


# Megatron-LM's own GPT-OSS example launch sets --attention-softmax-in-fp32 beside --softmax-type learnable
# (NVIDIA/Megatron-LM@d98e8a64 examples/gptoss/02_train.sh TRAINING_ARGS); --from-megatron refused it with "set
# softmax_fp32 false", a preset field no launch has. Only Megatron-Core's own DotProductAttention reads the flag
# (megatron/core/transformer/dot_product_attention.py L106; core/extensions/transformer_engine.py never reads it),
# so under TransformerEngine's attention the run is the same run: same tokens/s, with a note saying so
def test_a_gpt_oss_launch_with_the_fp32_softmax_switch_reads_as_the_same_run(cli, tmp_path):
    same = _launch_with(cli, tmp_path, "", "plain.sh")
    fp32 = _launch_with(cli, tmp_path, "--attention-softmax-in-fp32", "fp32.sh")
    code, plain, _ = cli("plan", "--hw", "h100", "--from-megatron", same, "--json")
    assert code == 0
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", fp32, "--json")
    assert code == 0, err

    base, read = json.loads(plain), json.loads(out)
    assert read["throughput"]["tokens_per_s"] == base["throughput"]["tokens_per_s"]
    assert read["memory_bytes"]["total"] == base["memory_bytes"]["total"]
    assert any("--attention-softmax-in-fp32" in n and "no effect" in n for n in read["imported"]["notes"])


# under Megatron-Core's own attention (--attention-backend local, which needs --spec local: arguments.py L436-437)
# the flag does run the softmax in fp32, which btacalc's sinks (GPT-OSS's 16-bit softmax) do not model: refused in
# one line naming the launch's flag, not the preset field
def test_the_fp32_softmax_switch_under_local_attention_is_refused_by_its_flag(cli, tmp_path):
    path = tmp_path / "local.sh"
    local = _launch_with(cli, tmp_path, "--attention-softmax-in-fp32", "fp32.sh")
    path.write_text(open(local).read().replace("--attention-backend fused", "--attention-backend local --spec local"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--attention-softmax-in-fp32" in err and "softmax_fp32 false" not in err
