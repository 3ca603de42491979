"""A Bridge launch runs the attention kernel it was planned with (argtypes24's leftover).

Megatron-Bridge applies a Hydra override as the value Hydra parsed (@ 067f987df
src/megatron/bridge/training/utils/omegaconf_utils.py `_apply_overrides`: setattr, with conversions for torch dtypes
and serialised callables only), so `model.attention_backend=unfused` leaves the provider's field the string
'unfused'. Megatron-Core chooses TransformerEngine's kernel from that field by comparing it with AttnBackend's
members (@ d98e8a64 megatron/core/models/common/language_module.py L129-145): flash sets NVTE_FLASH_ATTN=1,
NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=0; fused 0, 1, 0; unfused 0, 0, 1; local 0, 0, 0; auto 1, 1, 1. A string equals
none of them, so no switch is set and TransformerEngine picks the kernel. `--emit bridge` therefore states the
switches as the launch's environment, and `--from-bridge` says when a file names a backend without them."""

from __future__ import annotations

import pytest

# language_module.py L129-145, written out: backend -> (NVTE_FLASH_ATTN, NVTE_FUSED_ATTN, NVTE_UNFUSED_ATTN)
SWITCHES = {"flash": ("1", "0", "0"), "fused": ("0", "1", "0"), "unfused": ("0", "0", "1")}
NAMES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN")


def _environment(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("# environment: "):
            name, _, value = line.removeprefix("# environment: ").partition("=")
            out[name] = value
    return out


@pytest.mark.parametrize("extra, backend", [
    (("--attention", "eager"), "unfused"),
    ((), "fused"),  # btacalc's default kernel on sm90: cuDNN's FusedAttention
    (("--attention-kernel", "flash-attn-2"), "flash"),
])
def test_emitted_bridge_overrides_carry_the_backends_switches(cli, tmp_path, extra, backend):
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--recompute", "full",
                         *extra, "--emit", "bridge")
    assert code == 0, err
    assert f"model.attention_backend={backend}" in out.splitlines()
    env = _environment(out)
    assert tuple(env[n] for n in NAMES) == SWITCHES[backend]
    launch = tmp_path / "overrides.txt"
    launch.write_text(out)
    code, back, err = cli("plan", "--from-bridge", str(launch), "--hw", "h100", "--devices", "8", "--json")
    assert code == 0, err
    assert "without NVTE_" not in back
    bare = tmp_path / "bare.txt"
    bare.write_text("\n".join(line for line in out.splitlines() if "NVTE_" not in line) + "\n")
    code, back, err = cli("plan", "--from-bridge", str(bare), "--hw", "h100", "--devices", "8", "--json")
    assert code == 0, err
    wanted = " ".join(f"{n}={v}" for n, v in zip(NAMES, SWITCHES[backend]))
    assert f"model.attention_backend={backend} without {wanted} in the environment" in back


def test_a_megatron_launch_needs_no_switches(cli):
    """Megatron-LM's argparse converts --attention-backend to the enum (argument_utils.py L109-118 @ d98e8a64:
    type=config_type[cli_arg]), and Megatron-Core then sets the switches itself: the Megatron launch states none."""
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--recompute", "full",
                         "--attention", "eager", "--emit", "megatron")
    assert code == 0, err
    assert "--attention-backend unfused" in out and "NVTE_UNFUSED_ATTN" not in out
