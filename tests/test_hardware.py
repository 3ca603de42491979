from __future__ import annotations

import re

import pytest

from btacalc.errors import BtacalcError
from btacalc.config.hardware import builtin_profiles, parse_profile, resolve_hardware


def test_the_profiles_ship():
    assert set(builtin_profiles()) == {"wse2", "wse3", "a100-40gb", "a100-80gb", "b200", "h100", "h100-96gb", "h200", "gb200", "b300",
                                      "gb300"}


@pytest.mark.parametrize("name", ["wse2", "wse3", "a100-40gb", "a100-80gb", "b200", "b300", "gb300", "h100-96gb"])
def test_every_number_has_a_url_and_kind(name):
    prof = resolve_hardware(name)
    for field, num in prof.numbers().items():
        assert num.source.startswith("https://"), field
        if num.kind != "published":
            assert len(num.note) > 20, f"{name}.{field} is {num.kind} but does not say how"


def test_published_values_from_sources():
    # SOURCES.md §6 (vendor figures)
    assert resolve_hardware("wse2").chip.sram_bytes.value == 40e9
    assert resolve_hardware("wse3").chip.sram_bytes.value == 44e9
    assert resolve_hardware("wse3").chip.cores.value == 900_000
    assert resolve_hardware("a100-80gb").memory.offchip_bandwidth_bytes_per_s.value == 2.039e12
    assert resolve_hardware("a100-40gb").chip.peak_flops_per_s.value == 312e12
    assert resolve_hardware("b200").chip.peak_flops_per_s.value == 2.25e15
    # the WSE streaming link: 1.2 Tb/s = 150 GB/s
    assert resolve_hardware("wse3").memory.offchip_bandwidth_bytes_per_s.value == 1.2e12 / 8


def test_unpublished_wse_peaks_are_marked_estimates():
    for name in ("wse2", "wse3"):
        assert resolve_hardware(name).chip.peak_flops_per_s.kind == "estimate"


def test_capacity_follows_memory_model():
    assert resolve_hardware("wse3").memory_capacity_bytes == 44_000_000_000  # SRAM
    assert resolve_hardware("a100-80gb").memory_capacity_bytes == 81_920 * 2**20  # HBM, as the driver reports it


def _profile_text(**override):
    from btacalc.paths import data_dir

    text = (data_dir("hardware_profiles") / "a100-80gb.toml").read_text()
    for old, new in override.items():
        text = text.replace(old, new)
    return text


def test_user_profile_file_loads(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(_profile_text(**{'name = "a100-80gb"': 'name = "mine"'}))
    assert resolve_hardware(str(p)).name == "mine"


@pytest.mark.parametrize(
    "old, new, fragment",
    [
        ("value = 85899345920", 'value = "lots"', "memory.offchip_memory_bytes.value"),
        ("value = 85899345920", "value = -1", "memory.offchip_memory_bytes.value"),
        ('source = "https://glennklockwood.com/garden/processors/A100"\nnote = "SXM TDP"',
         'source = "my notes"\nnote = "SXM TDP"', "power_w.source"),
        ('kind = "published"\nsource = "https://glennklockwood.com/garden/processors/A100"\nnote = "SXM TDP"',
         'kind = "estimate"\nsource = "https://glennklockwood.com/garden/processors/A100"\nnote = ""', "power_w"),
        ('family = "gpu"', 'family = "tpu"', "family"),
        ("[chip.power_w]", "[chip.power_watts]", "power"),
    ],
)
def test_malformed_profile_names_the_field(old, new, fragment):
    text = _profile_text(**{old: new})
    assert text != _profile_text()
    with pytest.raises(BtacalcError) as exc:
        parse_profile(text, "mine.toml")
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_profile_that_is_not_toml():
    with pytest.raises(BtacalcError, match="not valid TOML"):
        parse_profile("name = ", "x.toml")


def test_shipped_profiles_pass_the_sram_cross_check_within_the_rounding():
    """cores x per-core SRAM against the total: WSE-2's published 850,000 x 48 KB = 40.8 GB is 2% over
    its published 40 GB (two significant figures each); GPUs' totals include the L2 (per-core is less)."""
    from btacalc.config.hardware import SRAM_ROUNDING

    ratios = {n: p.chip.cores.value * p.chip.sram_bytes_per_core.value / p.chip.sram_bytes.value
              for n, p in builtin_profiles().items()}
    assert ratios["wse2"] == pytest.approx(1.02) and ratios["wse3"] == pytest.approx(1.0, abs=1e-4)
    assert all(r <= 1 + SRAM_ROUNDING for r in ratios.values())
    assert all(r < 0.5 for n, r in ratios.items() if n.startswith(("a100", "b200")))


def test_an_error_names_file_field_value_and_rule():
    with pytest.raises(BtacalcError) as exc:
        text = re.sub(r"(\[calibration\.compute_efficiency\]\nvalue = )[^\n]*", r"\g<1>1e9", _profile_text())
        parse_profile(text, "mine.toml")
    assert str(exc.value) == "mine.toml: calibration.compute_efficiency.value = 1e+09: must be a finite number in [1e-06, 1]"


def test_every_number_has_a_range_with_a_unit():
    for name, prof in builtin_profiles().items():
        for key, num in prof.numbers().items():
            rng = prof.range_of(key)
            assert rng is not None and rng.admits(num.value), (name, key)


def test_hw_show_prints_units(cli):
    code, out, _ = cli("hw", "show", "wse3")
    assert code == 0
    for text in ("44 GB", "48.888 kB", "15.8 PFLOP/s", "21 PB/s", "23 kW", "1.2 PB", "150 GB/s", "900,000", "0.85", "5 us"):
        assert text in out, text
    assert "4.4e+10" not in out and "1.58e+16" not in out and "4.4e10" not in out  # the raw floats of before


@pytest.mark.parametrize("name", ["h100", "a100-80gb", "wse3"])
def test_hw_show_json_names_the_calibration_family_the_table_names(cli, name, monkeypatch):
    """hw show's table names the profile's calibration family; --json carries it too (tidy6): the family of
    btacalc/data/calibration.toml that lists the profile, read here from the file itself."""
    import json
    import tomllib

    from btacalc.paths import package_data

    listed = [f for f in tomllib.loads(package_data("calibration.toml").read_text(encoding="utf-8"))["family"]
              if name in f["profiles"]]
    assert len(listed) == 1
    code, out, _ = cli("hw", "show", name, "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["name"] == name and shown["calibration_family"]["name"] == listed[0]["name"]
    assert shown["calibration_family"]["profiles"] == listed[0]["profiles"]
    assert shown["calibration_family"]["factors"] == listed[0]["factors"]
    monkeypatch.setenv("COLUMNS", "400")
    code, table, _ = cli("hw", "show", name)
    assert f"calibration family {listed[0]['name']} " in table


def test_hw_show_json_of_a_profile_file_is_in_no_family(cli, tmp_path):
    import json

    p = tmp_path / "h100.toml"  # a built-in profile's name, as a file: its own calibration applies as written
    p.write_text(_profile_text())
    code, out, _ = cli("hw", "show", str(p), "--json")
    assert code == 0 and "calibration_family" in json.loads(out) and json.loads(out)["calibration_family"] is None


def test_hw_check_a_user_file(cli, tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(_profile_text(**{'name = "a100-80gb"': 'name = "mine"'}))
    code, out, err = cli("hw", "check", str(p))
    assert code == 0 and err == "" and out.startswith(f"{p}: valid profile mine") and "85.8993 GB" in out


def test_hw_show_lists_where_each_link_latency_was_measured(cli):
    """review7: nccl2's scaleup_reference / scaleout_reference scale every ring and tree call's latency, yet `hw show`
    and `hw check` listed only a profile's numbers; each reference is a row now, with its kind, note and source."""
    import tomllib

    from btacalc.paths import data_dir

    refs = tomllib.loads((data_dir("hardware_profiles") / "h100.toml").read_text())["collectives"]
    code, out, err = cli("hw", "show", "h100")
    assert code == 0, err
    flat = " ".join(out.split())
    for side, nodes in (("scaleup", "1 node"), ("scaleout", "2 nodes")):
        ref = refs[f"{side}_reference"]
        assert f"collectives.{side}_reference" in out
        assert f"{ref['collective']} {ref['message_bytes']:,.0f} B, {ref['ranks']} GPUs / {nodes}" in flat, flat
