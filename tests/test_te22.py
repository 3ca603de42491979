"""te22: the run's TransformerEngine release and the per-tensor FP8 transposes it still writes on Blackwell
(docs/precision.md "te22"; btacalc/data/te_releases.toml).

What the code does, on compute capability 10.x (non-TN FP8 GEMMs supported), per-tensor FP8 (delayed or current):
- TE 1.x casts every operand with its transpose on every architecture (v1.10 module/base.py L797-815, linear.py L126);
  from 2.0 the C++ quantizer writes the transpose only below 10.0 (bee4649c csrc/extensions/quantizer.cpp L106, L220).
- TE 2.0-2.2.0.dev0 (NeMo 25.04's bee4649c) transposes the tensor _all_gather_fp8 gathers whenever the quantizer asks
  for columnwise usage (bee4649c distributed.py L874-924): the column-parallel input's backward re-gather
  (layernorm_linear.py L610-620) and the row-parallel output gradient's gather (module/base.py L848-855) without
  Userbuffers. Guarded from v2.2 (TE PR 1620, distributed.py L928-934 @ v2.2).
- With Userbuffers, LayerNormLinear's bulk-dgrad gathered input is transposed unconditionally up to v2.3
  (layernorm_linear.py L683-695 @ bee4649c, L711-723 @ v2.3), not from v2.4; the row-parallel gradient's ring-exchange
  gather is quantised rowwise only and update_usage skips the transpose from 10.0 (float8_tensor.py L431-446).

Each gathered transpose reads and writes 1 B per gathered element (t x the local shard) at the profile's
single-output cast share f1; the GB200 profile's f1 = 0.730 of 8 TB/s (TE's cast benchmark, ROCm/TransformerEngine
PR 598: 2^26 x 3.03125 B / 34.84 us over 8 TB/s).
"""

from __future__ import annotations

import pytest

from btacalc.config.execution import Layout, Overlaps
from btacalc.config.hardware import resolve_hardware
from btacalc.config.precision import recipe
from btacalc.config.presets import load_preset
from btacalc.config.te_release import container_te, te_behaviour, te_release_key, te_releases
from btacalc.errors import BtacalcError
from btacalc.model.gpu.costs import layer_parts
from btacalc.model.gpu.precision import cast_rates
from support import resolved

H = 18432  # Nemotron-4 340B hidden size (NeMo Nemotron4Config340B)
S, B, TP = 4096, 1, 8  # the dgxc GB200 layout: seq 4096, micro-batch 1, TP 8 with sequence parallelism
BEE = "2.2.0.dev0+bee4649c"  # NeMo 25.04's TE
F1, HBM = 0.730, 8e12  # GB200: TE's single-copy cast share, HBM3e bandwidth


def _layer(te_version: str, tp_comm: bool, precision: str = "fp8", hw: str = "gb200"):
    p = resolved(load_preset("nemotron4-340b"), hw,
                 Layout(devices=TP, tensor_parallel=TP, sequence_parallel=True, devices_per_node=TP,
                        overlap=Overlaps(tp_comm=tp_comm)),
                 recompute="none", attention="flash", seq_len=S, precision=precision, te_version=te_version)
    return p, layer_parts(p, p.evaluate(1, B))[0]


def test_the_profile_casts_at_the_benchmarked_share():
    k, m = resolve_hardware("gb200").kernels, resolve_hardware("gb200").memory
    assert k.cast_bandwidth_fraction.value == F1 == pytest.approx(2**26 * 3.03125 / 34.84e-6 / 8e12, abs=5e-4)
    assert m.offchip_bandwidth_bytes_per_s.value == HBM


def test_nemo_25_04_runs_te_2_2_dev_at_bee4649c():
    """NeMo v2.3.0's requirements/manifest.json pins TE bee4649c15a7..., which the container build checks out; the
    TE repository numbers it 2.2.0.dev0 (25 commits before the v2.2 tag). NeMo 24.09: TE 1.10 (the NeMo framework
    24.09 software component table)."""
    te, name = container_te("dgxc-benchmarking v25.05.01 (NeMo 25.04.00 container)")
    assert (te, name) == (BEE, "nemo-25.04")
    commit = te.split("+")[1]
    assert "ref " + commit in te_releases().container[name].source  # the manifest's ref, as cited
    assert container_te("NeMo 25.04") == (BEE, "nemo-25.04")
    te, name = container_te("MLPerf Training v4.1, NeMo 24.09 container")
    assert te == "1.10" and "Transformer Engine 1.10" in te_releases().container[name].source
    assert container_te("NeMo 26.04.01") is None and container_te("NeMo 25.02") is None  # no published pin


def test_versions_order_as_te_numbers_them():
    assert te_release_key("2.2.0.dev0+bee4649c") < te_release_key("2.2") == te_release_key("2.2.0") \
        < te_release_key("2.2.1") < te_release_key("2.3") < te_release_key("2.10")
    assert te_release_key("1.10") < te_release_key("2.0")
    with pytest.raises(BtacalcError, match="te_version"):
        te_release_key("two point two")


@pytest.mark.parametrize("version, cast, gather, bulk", [
    ("1.10", True, True, True),  # TE 1.x: transposes everything, as on Hopper
    ("2.1", False, True, True),
    (BEE, False, True, True),  # NeMo 25.04
    ("2.2", False, False, True),  # the v2.2 tag carries PR 1620's gather guard
    ("2.3", False, False, True),
    ("2.4", False, False, False),
    ("2.20.0.dev0+d0067d0", False, False, False),  # the pinned TE
])
def test_which_transposes_each_release_writes_on_blackwell(version, cast, gather, bulk):
    b = te_behaviour(version)
    assert (b.cast_transposes, b.gather_transposes, b.ub_bulk_dgrad_transposes) == (cast, gather, bulk)


def test_the_recipe_copies_follow_the_release():
    """TE 1.x on a cc-10 chip writes both copies (2), 2.x one; Hopper two under every release."""
    fp8 = recipe("fp8")
    assert fp8.copies(10.0, te_behaviour("1.10")) == 2
    assert fp8.copies(10.0, te_behaviour(BEE)) == 1
    assert fp8.copies(9.0, te_behaviour(BEE)) == 2
    assert fp8.sp_gather_pass(10.0, te_behaviour(BEE), gathered_transpose=True) == (1, 2.0)
    assert fp8.sp_gather_pass(10.0, te_behaviour(BEE)) == (1, 0.0)
    assert recipe("mxfp8").sp_gather_pass(10.0, te_behaviour("1.10"), gathered_transpose=True) == (2, 0.0)


@pytest.mark.parametrize("precision", ["fp8", "fp8-current"])
def test_one_nemotron_340b_layer_on_gb200_at_te_2_2_dev(precision):
    """Per layer and micro-batch, each gathered operand's local shard is s·b·h/t = 4096·18432/8 = 9,437,184 elements;
    its local cast writes one rowwise copy as the pinned TE's does, and TE 2.2.0.dev0 adds the transpose of the
    t·local gathered elements, 1 B read + 1 B written each: 9,437,184·8·2 = 150,994,944 B per operand at 0.730 of
    8 TB/s = 25.86 us. Without Userbuffers all four operands (QKV and fc1 inputs, projection and fc2 gradients):
    603,979,776 B, 103.4 us; with them (--tp-comm-overlap) the two inputs only: 51.7 us. At the pinned TE: 0."""
    local = S * B * H / TP
    assert local == 9_437_184
    per_operand = local * TP * 2
    assert per_operand == 150_994_944
    one = per_operand / (F1 * HBM)
    assert one == pytest.approx(25.86e-6, rel=1e-3)
    phases = ("qkv_proj", "attn_out_proj", "mlp")
    for tp_comm, inputs, grads in ((False, 1, 1), (True, 1, 0)):
        _, pinned = _layer("2.20.0.dev0+d0067d0", tp_comm, precision)
        _, old = _layer(BEE, tp_comm, precision)
        extra = {ph: old.cast_s[ph] - pinned.cast_s[ph] for ph in phases}
        assert extra["qkv_proj"] == pytest.approx(inputs * one, rel=1e-9)  # the QKV input
        assert extra["attn_out_proj"] == pytest.approx(grads * one, rel=1e-9, abs=1e-15)  # the projection gradient
        assert extra["mlp"] == pytest.approx((inputs + grads) * one, rel=1e-9)  # fc1 input, fc2 gradient
        total = sum(extra.values())
        assert total == pytest.approx((4 if not tp_comm else 2) * one, rel=1e-9)
    assert 4 * one == pytest.approx(103.4e-6, rel=1e-3) and 2 * one == pytest.approx(51.7e-6, rel=1e-3)
    p, _ = _layer("2.20.0.dev0+d0067d0", True, precision)
    rates = cast_rates(p)
    assert rates is not None and rates.sp_gather_extra_bytes == rates.sp_gather_input_extra_bytes == 0.0  # pinned TE
    p, _ = _layer(BEE, False, precision)
    rates = cast_rates(p)
    assert rates is not None
    assert rates.sp_gather_extra_bytes == rates.sp_gather_input_extra_bytes == pytest.approx(TP * 2 / F1, rel=1e-12)


def test_te_2_2_release_and_2_4_on_gb200():
    """The v2.2 tag guards the gather (no transpose without Userbuffers) but LayerNormLinear's bulk-dgrad input is still
    transposed with them (one operand in QKV, one in the MLP); v2.4 guards both: the pinned TE's cast times."""
    _, pinned = _layer("2.20.0.dev0+d0067d0", True)
    one = S * B * H / TP * TP * 2 / (F1 * HBM)
    _, rel22 = _layer("2.2", True)
    assert rel22.cast_s["qkv_proj"] - pinned.cast_s["qkv_proj"] == pytest.approx(one, rel=1e-9)
    _, rel22_nccl = _layer("2.2", False)
    _, pinned_nccl = _layer("2.20.0.dev0+d0067d0", False)
    assert rel22_nccl.cast_s == pytest.approx(pinned_nccl.cast_s, rel=1e-12)
    _, rel24 = _layer("2.4", True)
    assert rel24.cast_s == pytest.approx(pinned.cast_s, rel=1e-12)


def test_te_1_10_casts_as_on_hopper_on_blackwell():
    """TE 1.x writes both 1-byte copies in one cast-transpose kernel: 2 + 2·1 B per element at the profile's two-copy
    share 0.651 (the same PR's 52.34 us for 2^26·4.0625 B MXFP8), and the weight cache holds 2 B per parameter."""
    p, _ = _layer("1.10", True)
    rates = cast_rates(p)
    assert rates is not None
    assert rates.activation_bytes_per_cast == pytest.approx((2 + 2 * 1) / 0.651, rel=1e-9)
    assert rates.cache_bytes_per_param == 2
    p, _ = _layer(BEE, True)
    assert cast_rates(p).cache_bytes_per_param == 1  # type: ignore[union-attr]


def test_hopper_is_the_same_under_every_release():
    """Below cc 10 every TE writes the transposes: the H100 layer's casts do not depend on the release."""
    _, a = _layer(BEE, False, hw="h100")
    _, b = _layer("2.20.0.dev0+d0067d0", False, hw="h100")
    assert a.cast_s == pytest.approx(b.cast_s, rel=1e-12)


@pytest.mark.parametrize("args, fragment", [
    (("--precision", "fp8", "--te-version", "2.2-beta"), "expected a TransformerEngine version"),
    (("--precision", "bf16", "--te-version", "1.10"), "(fp8, fp8-current, fp8-blockwise, mxfp8, nvfp4); bf16 runs "
                                                      "the same"),
])
def test_bad_te_version_is_one_line_and_exit_2(cli, args, fragment):
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("btacalc: error: --te-version") and fragment in err


def test_plan_json_shows_the_release_and_it_slows_a_gb200_sp_plan(cli):
    """The report's inputs carry the TE (the default with its reason, or the one given); NeMo 25.04's TE slows a TP 8
    sequence-parallel FP8 plan on GB200 (its gathered transposes: Llama 3 70B, micro-batch 2, where the GEMMs and not
    the host launches bind the step)."""
    import json

    # --fp8-param-gather: since projcopy (docs/memory.md) delayed scaling also keeps the output projection's FP8 copy
    # of O, 0.5 GB more than fits at micro-batch 2; at DP 1 the parameter gather changes memory only
    args = ("plan", "-m", "llama-3-70b", "--hw", "gb200", "--devices", "8", "--tp", "8", "--precision", "fp8",
            "--global-batch", "16", "--micro-batch", "2", "--fp8-param-gather", "--json")
    reports = {}
    for te in (None, BEE):
        code, out, err = cli(*args, *(("--te-version", te) if te else ()))
        assert code == 0, err
        reports[te] = json.loads(out)
    assert reports[None]["inputs"]["te_version"] == "2.20.0.dev0+d0067d0"
    assert "te_version" in reports[None]["inputs"]["defaults"]
    assert reports[BEE]["inputs"]["te_version"] == BEE and "te_version" not in reports[BEE]["inputs"]["defaults"]
    assert reports[BEE]["throughput"]["tokens_per_s"] < reports[None]["throughput"]["tokens_per_s"]


def test_a_measured_run_takes_its_containers_te():
    """The dgxc GB200 FP8 row (NeMo 25.04 container) is planned at 2.2.0.dev0; its BF16 twin has no per-tensor cast
    and keeps the default; the MLPerf v4.1 B200 row (NeMo 24.09) at 1.10."""
    from btacalc.planning.measured import express, load_runs

    runs = {r.id: r for r in load_runs()}
    req, why = express(runs["nemotron4-340b-gb200-128-gbs32-fp8-dgxc"])
    assert req is not None and req.te_version == BEE, why
    req, _ = express(runs["nemotron4-340b-gb200-128-gbs32-bf16-dgxc"])
    assert req is not None and req.te_version is None
    req, _ = express(runs["gpt3-175b-b200-64-fp8-mlperf-v41"])
    assert req is not None and req.te_version == "1.10"


def test_a_version_with_spaces_is_that_version(cli):
    """review13: " 1.10 " (a quoted shell word, a TOML string with a newline) was checked stripped but carried as
    typed into the report's inputs and run options ("TransformerEngine  1.10 's"); it is TE 1.10, the same plan."""
    import json

    args = ("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--tp", "2", "--precision", "fp8", "--json")
    reports = []
    for te in ("1.10", " 1.10 ", "1.10\n"):
        code, out, err = cli(*args, "--te-version", te)
        assert code == 0, err
        reports.append(json.loads(out))
    assert [r["inputs"]["te_version"] for r in reports] == ["1.10"] * 3
    assert reports[1]["throughput"] == reports[0]["throughput"] == reports[2]["throughput"]


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
def test_an_emitted_launch_names_the_te_it_was_planned_with(cli, emit):
    """review13: --te-version changes the plan but no Megatron-LM or Bridge argument sets the container's TE, so
    --emit dropped it without a word; the launch's header names it (a comment, which --from-* read back since
    hostile16: tests/test_hostile16.py), and only where it was given for a per-tensor FP8 recipe."""
    args = ("plan", "-m", "llama-3-8b", "--hw", "gb200", "--devices", "8", "--tp", "2", "--emit", emit)
    code, out, err = cli(*args, "--precision", "fp8", "--te-version", BEE)
    assert code == 0, err
    note = [line for line in out.splitlines() if "TransformerEngine" in line and line.startswith("#")]
    assert note == [f"# btacalc option: --te-version {BEE} (the container's TransformerEngine release, which no "
                    "launch argument sets)"]
    code, out, err = cli(*args, "--precision", "fp8")
    assert code == 0 and "--te-version" not in out, err


def test_the_recipes_a_te_release_changes_are_the_per_tensor_fp8_ones():
    """te_releases.toml's guards are about per-tensor FP8 (delayed and current scaling) transposes: those two recipes,
    and no block-scaled or 16-bit one, follow the release (--te-version, a measured run's container, --emit's note)."""
    from btacalc.config.precision import recipes

    assert {name for name, r in recipes().items() if r.follows_te_release} == {"fp8", "fp8-current"}


def test_the_release_matters_from_compute_capability_10_only():
    """Below compute capability 10.0 per-tensor FP8 GEMMs are TN-only (TE @ d0067d0 pytorch/utils.py L658-663), so the
    cast writes the transpose under every release (Recipe.copies: 2 at 9.0 under TE 1.10 and under the pinned TE);
    from 10.0 the release decides (1 copy under the pinned TE, 2 under TE 1.10)."""
    from btacalc.config.precision import recipe
    from btacalc.config.te_release import te_behaviour

    for name in ("fp8", "fp8-current"):
        r = recipe(name)
        assert not r.follows_te_release_on(9.0) and r.follows_te_release_on(10.0)
        assert r.copies(9.0, te_behaviour("1.10")) == r.copies(9.0, te_behaviour("2.20.0.dev0+d0067d0")) == 2
        assert (r.copies(10.0, te_behaviour("1.10")), r.copies(10.0, te_behaviour("2.20.0.dev0+d0067d0"))) == (2, 1)
    assert not recipe("mxfp8").follows_te_release_on(10.0) and not recipe("bf16").follows_te_release_on(10.0)


@pytest.mark.parametrize("hw", ["h100", "h200"])
def test_on_hopper_te_version_is_refused_not_shown_and_ignored(cli, hw):
    """review: `plan --hw h100 --precision fp8 --te-version 2.1` listed 'TransformerEngine 2.1's FP8 transposes' in its
    run options and planned exactly what every other release gives (test_hopper_is_the_same_under_every_release): an
    option taken and ignored. It is one line and exit 2, naming the chip's compute capability."""
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", hw, "--devices", "8", "--precision", "fp8",
                         "--te-version", "2.1")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "(compute capability 10.x-11.x, 13.0 on)" in err and f"{hw} has 9.0" in err


# TE @ d0067d0 transformer_engine/pytorch/utils.py L658-663, is_non_tn_fp8_gemm_supported, written out:
#     return (10, 0) <= device_capability < (12, 0) or device_capability >= (13, 0)
TE_NON_TN = {8.0: False, 8.9: False, 9.0: False, 10.0: True, 10.3: True, 11.0: True, 12.0: False, 12.1: False,
             13.0: True}


@pytest.mark.parametrize("cc, non_tn", sorted(TE_NON_TN.items()))
def test_the_release_matters_where_te_takes_non_tn_fp8_gemms(cc, non_tn):
    """review14: the rule was `cc >= 10.0`, which gave 12.x (RTX PRO 6000 / RTX 50 Blackwell, sm_120) one per-tensor
    FP8 copy under the pinned TE and took --te-version there; TE's own test leaves 12.x TN-only (two copies under
    every release, as Hopper)."""
    from btacalc.config.precision import non_tn_fp8_gemms

    assert non_tn_fp8_gemms(cc) is non_tn
    r = recipe("fp8")
    assert r.follows_te_release_on(cc) is non_tn
    # the pinned TE writes no transpose only where GEMMs take non-TN layouts; TE 1.10 writes it everywhere
    assert r.copies(cc, te_behaviour("2.20.0.dev0+d0067d0")) == (1 if non_tn else 2)
    assert r.copies(cc, te_behaviour("1.10")) == 2


def test_a_cc12_profile_refuses_te_version(cli, tmp_path):
    """A user's profile of compute capability 12.0 (b200's profile with its capability changed) refuses --te-version
    as Hopper does, and plans per-tensor FP8 as it does under every release."""
    from btacalc.paths import data_dir

    text = (data_dir("hardware_profiles") / "b200.toml").read_text()
    assert "[chip.compute_capability]\nvalue = 10.0\n" in text
    prof = tmp_path / "cc12.toml"
    prof.write_text(text.replace("[chip.compute_capability]\nvalue = 10.0\n", "[chip.compute_capability]\nvalue = 12.0\n")
                    .replace('name = "b200"', 'name = "cc12"', 1))
    args = ("plan", "-m", "llama-3-8b", "--hw", str(prof), "--devices", "8", "--precision", "fp8")
    code, out, err = cli(*args, "--te-version", "2.1")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "has 12.0, whose FP8 GEMMs are TN-only" in err


def test_compare_gives_the_release_to_the_rows_it_changes(cli):
    """compare over H100 and B200 with --te-version: the B200 row takes it (its run options say so), the H100 row
    plans as every release would, without the option; a Hopper-only compare refuses it as plan does."""
    code, out, err = cli("compare", "-m", "llama-3-8b", "--hw", "h100,b200", "--devices", "8", "--precision", "fp8",
                         "--te-version", "2.1")
    assert code == 0, err
    assert "b200 x8 fp8: run options --te-version" in out and "h100 x8 fp8: run options --te-version" not in out
    code, out, err = cli("compare", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--precision", "fp8",
                         "--te-version", "2.1")
    assert code == 2 and "h100 has 9.0" in err


def test_a_hopper_measured_run_keeps_the_pinned_te():
    """A Hopper FP8 row of a named container (dgxc NeMo 25.04, TE 2.2.0.dev0) is planned without a TE release: on
    compute capability 9.0 none changes its casts."""
    from btacalc.planning.measured import express, load_runs

    runs = {r.id: r for r in load_runs()}
    req, why = express(runs["nemotron4-340b-h100-256-gbs64-fp8-dgxc"])
    assert req is not None and req.te_version is None, why
