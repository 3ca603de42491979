"""Parameter counts against the numbers the model authors published (independent sources)."""

from __future__ import annotations

import math

import pytest

from btacalc.config.hardware import resolve_hardware
from btacalc.model.params import model_param_counts
from btacalc.config.hf import load_hf_config
from btacalc.config.presets import load_preset, resolve_model
from btacalc.config.execution import RunOptions
from btacalc.model.problem import make_problem


def counts(spec):
    return model_param_counts(make_problem(spec, resolve_hardware("wse3"), RunOptions()))


def rel(x, ref):
    return abs(x - ref) / ref


def test_qwen3_30b_a3b_published_counts():
    # Model card https://huggingface.co/Qwen/Qwen3-30B-A3B: 30.5B total, 3.3B activated, 29.9B non-embedding
    pc = counts(load_preset("qwen3-30b-a3b"))
    assert rel(pc.total, 30.5e9) < 0.005
    assert rel(pc.non_embedding, 29.9e9) < 0.005
    # Active: we count 3.353B. The card's "3.3B" (like 30.5 and 29.9) is the count cut to one
    # decimal; 3.353 is 1.6% above 3.3, so check the truncation rather than a 0.5% band.
    assert math.floor(pc.active / 1e8) / 10 == 3.3
    assert rel(pc.active, 3.3e9) < 0.02


def test_qwen3_30b_a3b_exact_arithmetic():
    # Written out from config.json: per layer 2 norms (2h) + q/k norm (2 d_h) + QKV h(a+2a_kv)d_h
    # + O a d_h h + router hE + experts 3Ehf; plus embedding and untied head Vh each, final norm h.
    h, a, akv, dh, E, k, f, L, V = 2048, 32, 4, 128, 128, 8, 768, 48, 151936
    layer = 2 * h + 2 * dh + h * (a + 2 * akv) * dh + a * dh * h + h * E + 3 * E * h * f
    total = L * layer + 2 * V * h + h
    active = total - L * 3 * (E - k) * h * f
    pc = counts(load_preset("qwen3-30b-a3b"))
    assert (pc.total, pc.active, pc.non_embedding, pc.per_layer) == (total, active, total - 2 * V * h, layer)


def test_hf_config_of_qwen3_matches_the_preset(data_dir):
    assert counts(load_hf_config(data_dir / "qwen3-30b-a3b.config.json")).total == counts(load_preset("qwen3-30b-a3b")).total


@pytest.mark.parametrize(
    "config, total, active, tol",
    [
        # Mistral AI, "Mixtral of experts" (arXiv 2401.04088): 46.7B total, 12.9B active (13B in the abstract)
        ("mixtral-8x7b.config.json", 46.7e9, 12.9e9, 0.005),
        # Muennighoff et al., OLMoE (arXiv 2409.02060): 6.9B total, 1.3B active
        ("olmoe-1b-7b.config.json", 6.9e9, 1.3e9, 0.015),
        # Meta Llama 3 8B: 8.03B parameters (Hugging Face model page)
        ("llama-3-8b.config.json", 8.03e9, 8.03e9, 0.005),
        # Qwen3-8B model card: 8.2B total
        ("qwen3-8b.config.json", 8.2e9, 8.2e9, 0.005),
    ],
)
def test_hf_configs_against_published_counts(data_dir, config, total, active, tol):
    pc = counts(load_hf_config(data_dir / config))
    assert rel(pc.total, total) < tol
    assert rel(pc.active, active) < tol


def test_qwen3_8b_non_embedding(data_dir):
    # Qwen3-8B model card: 6.95B non-embedding
    assert rel(counts(load_hf_config(data_dir / "qwen3-8b.config.json")).non_embedding, 6.95e9) < 0.005


def test_gpt3_175b():
    # Brown et al. 2020 Table 2.1: 175.0B; Korthikanti's 12Lh^2(1 + 13/(12h) + (V+s)/(12Lh)) = 174.6B
    pc = counts(load_preset("gpt3-175b"))
    L, h, V, s = 96, 12288, 51200, 2048
    assert pc.total == 12 * L * h**2 + 13 * L * h + (V + s) * h + 2 * h
    assert rel(pc.total, 175e9) < 0.005


def test_dense_equivalent_has_the_same_active_params_minus_router():
    moe = load_preset("qwen3-30b-a3b")
    dense = moe.dense_equivalent()
    assert dense.ffn_size == 8 * 768 and not dense.is_moe
    # same active parameters except the router (h*E per layer), which the dense model lacks
    assert counts(moe).active - counts(dense).total == 48 * 2048 * 128


def test_fixed_active_keeps_k_times_f():
    base = load_preset("qwen3-30b-a3b")
    for k in (1, 2, 4, 8):
        m = base.with_overrides(top_k=k, fixed_active=True)
        assert m.top_k * m.ffn_size == 8 * 768
        assert counts(m).active == counts(base).active


def test_resolve_model_reads_a_folder(tmp_path, data_dir):
    (tmp_path / "config.json").write_text((data_dir / "mixtral-8x7b.config.json").read_text())
    assert resolve_model(str(tmp_path)).num_experts == 8


def test_published_checks_read_each_convention_at_its_edge():
    """within_0.5%: |computed - published| <= 0.005 published, the edge included; head_only: the active
    count without the gathered input embedding; rounded / truncated: to the publisher's last digit."""
    from btacalc.config.model import PublishedParams
    from btacalc.model.params import ParamCounts, published_checks

    counts = ParamCounts(total=1_005_000_000, active=200_000_000, non_embedding=900_000_000, per_layer=1,
                         largest_block=1, gathered=50_000_000)
    model = load_preset("qwen3-30b-a3b")

    def check(**pub):
        spec = model.model_copy(update={"published_params": PublishedParams(**pub)})
        return {c.quantity: c.matches for c in published_checks(spec, counts)}

    assert check(total=1e9) == {"total": True}  # exactly 0.5% off: inside
    assert check(total=0.999e9) == {"total": False}  # 0.6% off
    assert check(active=150e6, active_counts="head_only") == {"active": True}  # 200M - 50M gathered
    assert check(active=150e6) == {"active": False}  # embedding_and_head: 200M against 150M
    assert check(active=200e6) == {"active": True}
    assert check(total=1.0e9, total_convention="truncated") == {"total": True}  # 1.005 B -> "1 B"
    assert check(total=1.0e9, total_convention="rounded", total_precision=1e8) == {"total": True}  # 10.05 -> 10
    assert check(total=1.1e9, total_convention="rounded", total_precision=1e8) == {"total": False}
    # the count reported beside the published figure is btacalc's own, under the same convention
    spec = model.model_copy(update={"published_params": PublishedParams(active=2e8, total=1e9)})
    assert {c.quantity: c.computed for c in published_checks(spec, counts)} == {"total": 1_005_000_000,
                                                                                 "active": 200_000_000}


def test_a_model_bounds_its_counts_at_2_to_the_62():
    """hydra: every count and size of a model is bounded on the model (config.model.MAX_COUNT = 2^62, the bound of
    sweep --vary and --seq), whatever builds it: a field at 2^62 is a model (its state bytes, 2^62 x 2^62 products,
    are Python integers), one more is refused naming the field; with_overrides names its parameter, which a front
    end renders as its flag. Nested sections (MLA's ranks) are bounded too."""
    from btacalc.config.model import MAX_COUNT, validate_model
    from btacalc.errors import BtacalcError

    assert MAX_COUNT == 2**62
    mixtral = load_preset("mixtral-8x7b")
    data = {**mixtral.model_dump(), "vocab_size": 2**62}
    assert validate_model(data, "m").vocab_size == 2**62
    for field in ("vocab_size", "hidden_size", "num_experts", "ffn_size", "max_position_embeddings"):
        with pytest.raises(BtacalcError, match=rf"^m: field {field}: {2**62 + 1} is beyond 2\^62$"):
            validate_model({**mixtral.model_dump(), field: 2**62 + 1}, "m")
    mla = load_preset("deepseek-v3").model_dump()
    mla["mla"]["kv_lora_rank"] = 10**30
    with pytest.raises(BtacalcError, match=rf"field mla.kv_lora_rank: {10**30} is beyond 2\^62"):
        validate_model(mla, "m")
    for name in ("experts", "top_k", "expert_ffn"):
        with pytest.raises(BtacalcError) as exc:
            mixtral.with_overrides(**{name: 10**30})
        assert exc.value.render({name: f"--{name.replace('_', '-')}"}) == \
            f"--{name.replace('_', '-')} {10**30} is beyond 2^62"
