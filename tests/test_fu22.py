"""fu22: two proposals of the last new-user review (docs/story.md "freshuser22"), built.

1. The router's load-balancing loss a model states (ModelSpec.aux_loss_coeff, aux_loss_per_sequence) is written by
   `--emit megatron` / `--emit bridge` and is now read back by `--from-megatron` / `--from-bridge` into the model
   (it was listed "not modelled", so the model read back lost it and a re-emitted launch dropped the flags).
2. A copied hardware profile gets its architecture's expected-error group, not the broad "GPUs, MoE" one.

Expected values come from the inputs (the config.json's coefficients, Megatron-LM's flag texts at d98e8a64,
megatron/training/arguments.py L3532-3537) and, for 2, from the shipped expected_error.json filtered by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import resolve_model
from support import MOONLIGHT

DATA = Path(__file__).parent / "data"
AUX_DESTS = ("--moe-aux-loss-coeff", "--moe-router-load-balancing-type", "model.moe_aux_loss_coeff",
             "model.moe_router_load_balancing_type")


def _model(tmp_path, which: str) -> tuple[str, float, str]:
    """(the --model argument, the coefficient its config.json states, the Megatron balancing type that loss is)."""
    if which == "moonlight":
        path = tmp_path / "moonlight" / "config.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(MOONLIGHT))
        return str(path), MOONLIGHT["aux_loss_alpha"], "seq_aux_loss"
    qwen = json.loads((DATA / "qwen3-30b-a3b.config.json").read_text())
    return "qwen3-30b-a3b", qwen["router_aux_loss_coef"], "aux_loss"  # transformers' loss over all tokens


def _flag_lines(text: str) -> list[str]:
    return [line.strip().rstrip("\\").strip() for line in text.splitlines() if line.strip().startswith("--")]


def _emit(cli, path: Path, *source: str, emit: str = "megatron") -> str:
    layout = ("--ep", "16") if source[0] == "--model" else ()  # a file gives its own layout
    code, out, err = cli("plan", *source, "--hw", "h100", "--devices", "16", *layout, "--emit", emit, "-o", str(path))
    assert code == 0, err
    return path.read_text()


def _read_json(cli, path: Path, emit: str = "megatron") -> dict:
    flag = "--from-megatron" if emit == "megatron" else "--from-bridge"
    code, out, err = cli("plan", flag, str(path), "--hw", "h100", "--devices", "16", "--json")
    assert code == 0, err
    doc = json.loads(out)
    # the file's own name is in these; everything else must be the same
    doc["model"].pop("name"), doc["model"].pop("source"), doc["imported"].pop("source")
    return doc


def _imported(path: Path, emit: str):
    text = path.read_text()
    return (import_megatron(text, str(path), 16) if emit == "megatron" else import_bridge(text, str(path), 16))


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
@pytest.mark.parametrize("which", ["qwen3", "moonlight"])
def test_the_aux_loss_round_trips(cli, tmp_path, which, emit):
    """emit -> read back -> emit again -> read back: the same flags, the same plan JSON, and the model read back
    holds the config.json's coefficient and balancing type; neither setting is listed as not modelled."""
    model, coeff, balancing = _model(tmp_path, which)
    suffix = "sh" if emit == "megatron" else "txt"
    a, b = tmp_path / f"a.{suffix}", tmp_path / f"b.{suffix}"
    first = _emit(cli, a, "--model", model, emit=emit)
    flag = "--moe-aux-loss-coeff" if emit == "megatron" else "model.moe_aux_loss_coeff"
    assert any(line.strip().startswith(flag) and str(coeff) in line for line in first.splitlines()), first
    read = "--from-megatron" if emit == "megatron" else "--from-bridge"
    second = _emit(cli, b, read, str(a), emit=emit)
    if emit == "megatron":
        assert _flag_lines(first) == _flag_lines(second)
    else:
        # not this change's: an MLA model read from overrides gets the MLA YaRN fields of Bridge's MLA provider,
        # which the second file states (a known gap of the Bridge round trip, in main before fu22)
        mla_yarn = ("model.rotary_scaling_factor=", "model.mscale", "model.original_max_position_embeddings=",
                    "model.beta_")
        assert [line for line in first.splitlines() if not line.startswith("#")] == \
            [line for line in second.splitlines() if not line.startswith(("#", *mla_yarn))]
    assert "does not carry" not in second and "give your model's coefficient" not in second
    one, two = _read_json(cli, a, emit), _read_json(cli, b, emit)
    assert one == two
    assert not [row for row in one["imported"]["ignored"] if row["flag"] in AUX_DESTS]
    for path in (a, b):
        spec = _imported(path, emit).model
        assert spec.aux_loss_coeff == coeff
        assert spec.aux_loss_per_sequence is (balancing == "seq_aux_loss")
        assert spec.load_balancing == balancing


def _with_balancing(text: str, balancing: str, emit: str) -> str:
    """The launch (or overrides) with the loss's type set to `balancing`."""
    if emit == "megatron":
        return re.sub(r"(--moe-aux-loss-coeff [^ \\\n]+)", rf"\1 \\\n    --moe-router-load-balancing-type {balancing}",
                      text)
    return text + f"model.moe_router_load_balancing_type={balancing}\n"


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
@pytest.mark.parametrize("balancing", ["none", "global_aux_loss"])
def test_a_launchs_balancing_type_is_kept(cli, tmp_path, emit, balancing):
    """--moe-router-load-balancing-type none (no loss at all: Megatron-Core's router adds none of the three, router.py
    L388-408 @ d98e8a64, whatever the coefficient) and global_aux_loss (over the global batch, router.py L507-548)
    are kept as given, and written again."""
    suffix = "sh" if emit == "megatron" else "txt"
    a, b = tmp_path / f"a.{suffix}", tmp_path / f"b.{suffix}"
    text = _emit(cli, a, "--model", "qwen3-30b-a3b", emit=emit)
    a.write_text(_with_balancing(text, balancing, emit))
    spec = _imported(a, emit).model
    assert spec.load_balancing == balancing and spec.aux_loss_per_sequence is False
    assert spec.aux_loss_coeff == 0.001
    again = _emit(cli, b, "--from-megatron" if emit == "megatron" else "--from-bridge", str(a), emit=emit)
    said = (f"--moe-router-load-balancing-type {balancing}" if emit == "megatron"
            else f"model.moe_router_load_balancing_type={balancing}")
    assert said in (_flag_lines(again) if emit == "megatron" else again.splitlines())
    assert _imported(b, emit).model.load_balancing == balancing


def test_a_launch_without_the_flags_reads_no_coefficient(cli, tmp_path):
    """A launch that gives neither flag trains Megatron-LM's defaults (aux_loss, coefficient 0.0, arguments.py
    L3532-3537): the model holds no coefficient (as a config.json without one), and the re-emitted launch says so
    as the first one did, without writing a 0."""
    a, b = tmp_path / "a.sh", tmp_path / "b.sh"
    text = _emit(cli, a, "--model", "qwen3-30b-a3b")
    a.write_text("".join(line for line in text.splitlines(keepends=True) if "--moe-aux-loss-coeff" not in line))
    spec = _imported(a, "megatron").model
    assert spec.aux_loss_coeff is None and spec.load_balancing == "aux_loss"
    again = _emit(cli, b, "--from-megatron", str(a))
    assert not any(f.startswith("--moe-aux-loss-coeff") for f in _flag_lines(again))
    assert "(--moe-aux-loss-coeff 0)" in again


@pytest.mark.parametrize("given", ["--moe-router-load-balancing-type sinkhorn --moe-aux-loss-coeff 0",
                                   "--moe-router-load-balancing-type aux_loss seq_aux_loss "
                                   "--moe-aux-loss-coeff 0.01 0.001"])
def test_what_the_model_cannot_hold_is_listed_not_read(cli, tmp_path, given):
    """Sinkhorn routing (S-BASE, router.py L280-311) and several losses at once are not a ModelSpec's: the flags are
    listed with the reason, not read (the model holds no coefficient), as before."""
    a = tmp_path / "a.sh"
    text = _emit(cli, a, "--model", "qwen3-30b-a3b")
    a.write_text(text.replace("--moe-aux-loss-coeff 0.001", given))
    run = _imported(a, "megatron")
    assert run.model.aux_loss_coeff is None and run.model.load_balancing == "aux_loss"
    listed = dict(run.ignored)
    assert "--moe-router-load-balancing-type" in listed and "--moe-aux-loss-coeff" in listed
    assert "sinkhorn" in listed["--moe-aux-loss-coeff"]


# --- 2. a copied hardware profile is matched by what it is, not by its name ---

def _copied_b200(tmp_path, rename: bool, efficiency: str = "") -> str:
    """hardware_profiles/b200.toml copied with one number edited (HBM bandwidth 8e12 -> 7.7e12), as a user would;
    `rename`: its name changed as well; `efficiency`: its compute_efficiency replaced too."""
    from btacalc.paths import data_dir
    text = (data_dir("hardware_profiles") / "b200.toml").read_text()
    text = text.replace("[memory.offchip_bandwidth_bytes_per_s]\nvalue = 8e12",
                        "[memory.offchip_bandwidth_bytes_per_s]\nvalue = 7.7e12", 1)
    assert "value = 7.7e12" in text
    if rename:
        text = text.replace('name = "b200"', 'name = "my-b200"', 1)
    if efficiency:  # the fitted factor's line, whatever today's refit wrote there
        import re

        text, n = re.subn(r"(\[calibration\.compute_efficiency\]\nvalue = )[^\n]*", rf"\g<1>{efficiency}", text)
        assert n == 1
    path = tmp_path / "my-b200.toml"
    path.write_text(text)
    return str(path)


def _expected(cli, hw: str) -> tuple[dict, str]:
    args = ("plan", "--model", "qwen3-30b-a3b", "--hw", hw, "--devices", "16", "--ep", "16")
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    code, text, err = cli(*args)
    assert code == 0, err
    return json.loads(out)["throughput"]["expected_error"], " ".join(text.split())


@pytest.mark.parametrize("rename", [False, True])
def test_a_copied_profile_gets_its_architectures_expected_error(cli, tmp_path, rename):
    """A BF16 MoE plan without the EP overlap on B200: the Blackwell family's MoE runs without the overlap. In the
    shipped btacalc/data/expected_error.json those are 3 16-bit runs (fewer than 5) and 15 low-precision ones, so the
    group is the 18 MoE runs of gpu-blackwell without the overlap. A copy of b200.toml with its HBM bandwidth edited
    got "GPUs, MoE" (every GPU family's MoE runs), by its name; now the same group and numbers, and the plan says
    how the copy was matched."""
    runs = json.loads((Path(__file__).parent.parent / "btacalc" / "data" / "expected_error.json").read_text())["runs"]
    group = [r for r in runs if r["calibration_family"] == "gpu-blackwell" and r["moe"] and not r["ep_overlap"]]
    assert len([r for r in group if not r["low_precision"]]) < 5 <= len(group)
    original, _ = _expected(cli, "b200")
    hw = _copied_b200(tmp_path, rename)
    copied, text = _expected(cli, hw)
    assert original["runs"] == copied["runs"] == len(group)
    for key in ("median_abs_error", "mean_abs_error", "max_abs_error", "mean_error"):
        assert copied[key] == original[key]
    # hostile41: a copy that keeps the built-in's name over its own numbers is named by its path
    name = "my-b200" if rename else hw
    assert copied["basis"].startswith("gpu-blackwell (b200, gb200, b300, gb300; ")
    assert copied["basis"].endswith("), MoE without the EP overlap")
    said = f"{name} is no built-in profile as shipped: taken as b200's family by its compute capability 10"
    assert said in copied["basis"] and "".join(said.split()) in "".join(text.split())  # a long path may wrap


def test_a_copy_with_its_own_efficiency_is_in_no_family(cli, tmp_path):
    """A copy whose compute_efficiency differs from the family's fitted one is not predicted as the family's runs were:
    it keeps the device-wide group, as before."""
    copied, _ = _expected(cli, _copied_b200(tmp_path, True, efficiency="0.55"))
    assert copied["basis"] == "GPUs, MoE"
