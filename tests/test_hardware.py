from __future__ import annotations

import pytest

from btacalc.errors import BtacalcError
from btacalc.config.hardware import builtin_profiles, parse_profile, resolve_hardware


def test_the_profiles_ship():
    assert set(builtin_profiles()) == {"wse2", "wse3", "a100-40gb", "a100-80gb", "b200", "h100", "h200", "gb200"}


@pytest.mark.parametrize("name", ["wse2", "wse3", "a100-40gb", "a100-80gb", "b200"])
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
    assert resolve_hardware("a100-80gb").memory_capacity_bytes == 80_000_000_000  # HBM


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
        ("value = 8e10", 'value = "lots"', "memory.offchip_memory_bytes.value"),
        ("value = 8e10", "value = -1", "memory.offchip_memory_bytes.value"),
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
