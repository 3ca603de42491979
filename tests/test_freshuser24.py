"""freshuser24: GPT-OSS-120B planned as a new user would, from the README (128 H100 / 64 GB200 against a CS-3).

Each test pins one defect the user tripped on; the expected values are arithmetic from the inputs given or
Megatron-LM's own files (cited), not btacalc's output.
"""

from __future__ import annotations

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
