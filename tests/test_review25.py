"""review25: the session's bridgeprov, earlyrel and hostile25 changes, reviewed against the mirrors.

- bridge_model_bridges.toml: AutoBridge dispatches on the config's architecture class (Megatron-Bridge @ 067f987df
  auto_bridge.py L2153-2215, decorators/dispatch.py L97-100), so each entry's bridge is the one registered for the
  architecture its model_type's config.json names (Kimi-K2: DeepseekV3ForCausalLM -> DeepSeekV3Bridge). Its values are
  read here from the bridges' own `provider.<field> = <value>` lines. The bridges of the MoE presets set the alltoall
  dispatcher (the EP overlap needs it: a Qwen3 Bridge file with the overlap and no dispatcher was refused), and
  DeepSeek-V3's turns the shared experts' overlap on, which Megatron-Core refuses beside the EP overlap
  (transformer_config.py L3039-3041 @ d98e8a64): `--emit bridge` of such a plan was refused by Megatron-Core.
- earlyrel: a merged layer pair can hold two kinds (model_chunk_schedule_plan.py L551-563 pairs the forward's layer i
  with the backward's layer n-1-i).
- hostile25: Bridge's own Qwen3 MoE performance recipes set model.moe_flex_dispatcher_backend = None.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from btacalc.config.bridge_codec import bridge_key
from btacalc.config.bridge_model_bridges import model_bridges
from btacalc.config.bridge_run import NULL_IN_RECIPES, import_bridge
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError
from btacalc.model.gpu.memory import GpuMemory

BRIDGE = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
PIN = "067f987df03b8355b03192d88d70f1709fedf51a"


def _show(path: str) -> str:
    if not BRIDGE.exists():
        pytest.skip(f"{BRIDGE} is not on this machine")
    return subprocess.run(["git", "-C", str(BRIDGE), "show", f"{PIN}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def _bridge_file(class_name: str) -> str:
    """The source of the bridge class `class_name` at the pin."""
    if not BRIDGE.exists():
        pytest.skip(f"{BRIDGE} is not on this machine")
    hits = subprocess.run(["git", "-C", str(BRIDGE), "grep", "-l", f"^class {class_name}(", PIN, "--",
                           "src/megatron/bridge/models"], check=True, capture_output=True, text=True).stdout.split()
    assert len(hits) == 1, hits
    return _show(hits[0].split(":", 1)[1])


def _sets(source: str) -> dict[str, object]:
    """What a bridge's provider_bridge sets (`provider.<field> = <literal>`) or its config kwargs update holds."""
    out: dict[str, object] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
                and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "provider":
            try:
                out[node.targets[0].attr] = ast.literal_eval(node.value)
            except ValueError:
                pass
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            for kw in node.keywords:
                try:
                    out[str(kw.arg)] = ast.literal_eval(kw.value)
                except ValueError:
                    pass
    return out


@pytest.mark.parametrize("model_type", sorted(model_bridges()))
def test_each_entry_is_what_the_bridge_for_its_architecture_sets(model_type):
    entry = model_bridges()[model_type]
    source = _bridge_file(entry.bridge)
    register = re.search(r"register_bridge\(\s*source=\"?(\w+)", source)
    assert register is not None and register.group(1) == entry.architecture  # the class AutoBridge dispatches on
    sets = _sets(source)
    for dest, value in entry.provider.items():
        field = str(bridge_key(dest)).removeprefix("model.")
        assert field in sets and sets[field] == value and type(sets[field]) is type(value), (model_type, dest)


def test_kimi_k2s_config_names_deepseek_v3s_architecture_not_the_kimi_bridges(data_dir):
    config = json.loads((data_dir / "kimi-k2.config.json").read_text())
    assert config["model_type"] == "kimi_k2" and config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert re.search(r'source="KimiK2ForCausalLM"', _show("src/megatron/bridge/models/kimi/kimi_bridge.py"))
    assert model_bridges()["kimi_k2"].bridge == "DeepSeekV3Bridge"


def test_every_moe_bridge_that_sets_the_dispatcher_is_listed_with_it():
    """qwen3_moe_bridge.py L67, olmoe_bridge.py L87, gpt_oss_bridge.py L69, deepseek_v3_bridge.py L67: alltoall, where
    TransformerConfig's default is allgather (transformer_config.py L891 @ d98e8a64)."""
    for model_type in ("qwen3_moe", "olmoe", "gpt_oss", "deepseek_v3", "kimi_k2"):
        assert model_bridges()[model_type].provider["moe_token_dispatcher_type"] == "alltoall"


OVERLAP = ("model.expert_model_parallel_size: 8\nmodel.overlap_moe_expert_parallel_comm: true\n"
           "train.micro_batch_size: 1\ntrain.global_batch_size: 64\nmixed_precision: bf16_mixed\n")


def test_a_qwen3_run_with_the_ep_overlap_and_no_dispatcher_is_read_as_its_bridge_runs_it():
    run = import_bridge(OVERLAP, "run.yaml", devices=8, base=load_preset("qwen3-30b-a3b"))
    assert run.request.overlap_all_to_all
    assert any("moe_token_dispatcher_type=alltoall" in n and "Qwen3MoEBridge" in n for n in run.notes)
    # no model bridge for a config without one: TransformerConfig's allgather, which Megatron-Core refuses
    with pytest.raises(BtacalcError, match="alltoall or flex dispatcher"):
        import_bridge(OVERLAP, "run.yaml", devices=8, base=load_preset("mixtral-8x7b"))


def test_deepseek_v3s_shared_expert_overlap_is_refused_beside_the_ep_overlap_as_megatron_core_refuses_it():
    text = OVERLAP.replace("size: 8", "size: 64").replace("batch_size: 64", "batch_size: 1024")
    with pytest.raises(BtacalcError, match=r"moe_shared_expert_overlap=false.*transformer_config.py:3039"):
        import_bridge(text, "run.yaml", devices=1024, base=load_preset("deepseek-v3"))
    run = import_bridge(text + "model.moe_shared_expert_overlap: false\n", "run.yaml", devices=1024,
                        base=load_preset("deepseek-v3"))
    assert run.request.overlap_all_to_all


def test_deepseek_v3s_shared_expert_overlap_is_refused_with_shared_experts_recomputation():
    text = ("model.expert_model_parallel_size: 64\nmodel.recompute_granularity: selective\n"
            "model.recompute_modules: [shared_experts]\ntrain.micro_batch_size: 1\ntrain.global_batch_size: 1024\n"
            "mixed_precision: bf16_mixed\n")
    with pytest.raises(BtacalcError, match=r"shared_experts recompute module.*transformer_config.py:1991"):
        import_bridge(text, "run.yaml", devices=1024, base=load_preset("deepseek-v3"))
    import_bridge(text, "run.yaml", devices=64, base=load_preset("qwen3-30b-a3b"))  # no shared experts: no check


def test_emitted_overrides_of_an_ep_overlap_plan_turn_the_shared_experts_overlap_off_and_read_back(cli, tmp_path):
    layout = ("-m", "deepseek-v3", "--hw", "h100", "--devices", "1024", "--tp", "1", "--pp", "16", "--vp", "2",
              "--ep", "64", "--recompute", "selective", "--overlap-a2a")
    code, out, err = cli("plan", *layout, "--emit", "bridge")
    assert code in (0, 1), err
    assert "model.moe_shared_expert_overlap=False" in out.splitlines()
    path = tmp_path / "o.txt"
    path.write_text(out)
    code, planned, err = cli("plan", *layout, "--json")
    code_back, back, err = cli("plan", "-m", "deepseek-v3", "--from-bridge", str(path), "--hw", "h100",
                               "--devices", "1024", "--json")
    assert code_back == code, err
    a, b = json.loads(planned), json.loads(back)
    assert (a["throughput"], a["memory_stages"]) == (b["throughput"], b["memory_stages"])


def test_a_run_that_gives_the_architecture_and_no_dropout_trains_the_bridges_and_the_configs(cli, tmp_path):
    """Qwen3MoEBridge sets hidden_dropout 0.0 (qwen3_moe_bridge.py L59) and AutoBridge takes attention_dropout from the
    config (model_bridge.py L469, 0.0 in Qwen3-30B-A3B's): no dropout, where Megatron-LM's defaults (0.1 each) were
    planned."""
    code, out, err = cli("plan", "-m", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--ep", "8", "--emit", "bridge")
    assert code in (0, 1), err
    lines = [ln for ln in out.splitlines() if "dropout" not in ln]
    assert len(lines) == len(out.splitlines()) - 2 and any(ln.startswith("model.num_layers=") for ln in lines)
    text = "\n".join(lines) + "\n"
    assert not import_bridge(text, "o.txt", devices=8, base=load_preset("qwen3-30b-a3b")).model.dropout
    assert import_bridge(text, "o.txt", devices=8).model.dropout  # no --model: TransformerConfig's 0.1


def test_a_recipes_null_flex_backend_is_read():
    """Bridge's Qwen3 MoE performance recipes set it to None beside alltoall (perf_recipes/qwen/h100/qwen3_moe.py
    L158-159 at the pin); hostile25 refused the key."""
    recipe = _show("src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py")
    assert "cfg.model.moe_flex_dispatcher_backend = None" in recipe
    assert "moe_flex_dispatcher_backend" in NULL_IN_RECIPES
    text = (Path(__file__).parent / "data" / "megatron" / "qwen3-30b-a3b-8gpu-h100-bridge.yaml").read_text()
    text = text.replace("  moe_token_dispatcher_type: alltoall\n",
                        "  moe_token_dispatcher_type: alltoall\n  moe_flex_dispatcher_backend: null\n")
    assert "moe_flex_dispatcher_backend: null" in text
    run = import_bridge(text, "recipe.yaml", devices=8, base=load_preset("qwen3-30b-a3b"))
    assert not run.request.deepep


def _merged(counts, merged, stored, early=True):
    layout = SimpleNamespace(micro_batches=4, virtual_pipeline=1, overlap=SimpleNamespace(early_attn_release=early))
    return GpuMemory._merged_layer(SimpleNamespace(problem=SimpleNamespace(layout=layout)), counts, merged, stored)


def test_the_early_release_pairs_a_backward_layer_with_a_forward_layer_of_another_kind():
    """Two kinds a stage holds, (P, D, S) each: a dense layer (1, 0, 2) with a small MLP and an MoE layer (5, 1, 9)
    whose experts and combine store 3. The merged pair's moments beyond the forward layer whole (S_f):
    P_b + P_f + D_f - S_f for each pairing: dense forward beside an MoE backward 5 + 1 + 0 - 2 = 4, MoE beside MoE
    5 + 5 + 1 - 9 = 2, dense beside dense 1 + 1 - 2 = 0, MoE beside dense 1 + 5 + 1 - 9 = -2: 4 at most, where the
    per-kind reading took 2."""
    assert _merged([3, 58], [(1, 0), (5, 1)], [2, 9]) == 4
    assert _merged([0, 58], [(1, 0), (5, 1)], [2, 9]) == 2  # MoE layers alone: 2P + D - S
    assert _merged([3, 0], [(1, 0), (5, 1)], [2, 9]) == 0  # dense alone: max(0, 2 - 2)
    assert _merged([3, 58], [(1, 0), (5, 1)], [2, 9], early=False) == 5  # without the flag: the largest P
