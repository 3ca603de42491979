"""freshuser17: btacalc's launches pasted into Megatron-LM and Megatron-Bridge, checked against their own code at the
pins btacalc cites (NVIDIA/Megatron-LM @ d98e8a64, NVIDIA-NeMo/Megatron-Bridge @ 067f987d) and read back
(docs/story.md "freshuser17"). Each test fails with its fix stashed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from btacalc.config.megatron_rules import violations


def _json(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    data = json.loads(out)
    return data["best"] if "best" in data else data


def _refused(cli, *args: str) -> str:
    code, out, err = cli("plan", *args)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


QWEN = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "8", "--global-batch", "128",
        "--micro-batch", "1")


@pytest.mark.parametrize("modules", ["moe_act", "layernorm", "layernorm,moe_act", "core_attn,moe_act"])
def test_delayed_fp8_refuses_the_moe_act_and_layernorm_recompute_modules(cli, modules):
    """Megatron-Core stops at start-up: "Delayed scaling does not support moe_act and layernorm recompute for fp8"
    (Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py L2000-2006, in __post_init__ for a
    selective module list with fp8_recipe 'delayed'). btacalc planned it and emitted the launch without a word."""
    err = _refused(cli, *QWEN, "--precision", "fp8", "--recompute", modules)
    assert "delayed scaling" in err and "L2000-2006" in err
    for flag in ("--emit", "megatron"), ("--emit", "bridge"):
        _refused(cli, *QWEN, "--precision", "fp8", "--recompute", modules, *flag)
    # the other FP8 recipes run them (TE >= 2.6, L2007-2012; btacalc's default TE release is newer)
    assert _json(cli, *QWEN, "--precision", "fp8-current", "--recompute", modules)["inputs"]["recompute"] == modules


def test_search_under_delayed_fp8_chooses_no_module_megatron_refuses(cli):
    """`plan --search --precision fp8` chose `layernorm,moe_act` (Megatron-Bridge's GPT-OSS choice, search.py
    MOE_RECOMPUTE_CHOICES) for Qwen3-30B-A3B on 16 H100s: the emitted launch stopped in TransformerConfig
    (transformer_config.py L2000-2006). Without the fix this test's search picks it."""
    best = _json(cli, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--search", "--global-batch",
                 "256", "--precision", "fp8")
    assert not {"moe_act", "layernorm"} & set(best["inputs"]["recompute"].split(","))
    # the exclusion is the recipe's: the other recipes keep the candidate
    from btacalc.config.resolution import recompute_refusal
    from btacalc.config.precision import recipe
    from btacalc.config.presets import resolve_model

    qwen = resolve_model("qwen3-30b-a3b")
    assert [p for p in ("bf16", "fp8", "fp8-current", "mxfp8", "nvfp4")
            if recompute_refusal("layernorm,moe_act", qwen, recipe(p)) is not None] == ["fp8"]


def test_mla_up_proj_needs_multi_latent_attention(cli):
    """Megatron-Core refuses the mla_up_proj recompute module without MLA (transformer_config.py L1969-1973 @
    d98e8a64); btacalc planned Llama 3 8B with it (nothing to recompute) and emitted the launch."""
    err = _refused(cli, "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--recompute", "mla_up_proj")
    assert "no MLA" in err and "L1969-1973" in err
    best = _json(cli, "--model", "deepseek-v3", "--hw", "b200", "--devices", "256", "--pp", "8", "--ep", "32",
                 "--recompute", "mla_up_proj", "--global-batch", "512", "--micro-batch", "1")
    assert best["inputs"]["recompute"] == "mla_up_proj"


@pytest.mark.parametrize("broken", [
    # a launch file's module list: the reader refuses what Megatron refuses (megatron_rules)
    {"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"]},
    {"recompute_granularity": "selective", "recompute_modules": ["layernorm"], "fp8": "hybrid", "fp8_recipe": "delayed"},
])
def test_the_reader_refuses_the_two_module_lists(broken):
    base = {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "world": 8, "seq_length": 4096,
            "max_position_embeddings": 4096, "micro_batch_size": 1, "global_batch_size": 8, "bf16": True}
    assert violations(base, {}) == []
    assert len(violations({**base, **broken}, {})) == 1
    assert violations({**base, **broken, "fp8_recipe": "tensorwise", "multi_latent_attention": True}, {}) == []


@pytest.mark.parametrize("emit", ["megatron", "bridge"])
def test_zero_3_without_fsdp_is_not_emitted_as_a_launch_it_does_not_plan(cli, emit):
    """`--zero 3` (one layer's weights gathered at a time) was emitted as Megatron-FSDP optim_grads_params, which
    --from-megatron / --from-bridge read back as --fsdp: Qwen3-30B-A3B on 8 H100s, EP 8, read back at 96.10 GB per
    device where the plan said 95.15 GB (gathered weights 0.19 -> 1.14 GB). Megatron-LM's only ZeRO-3 is
    Megatron-FSDP (arguments.py --data-parallel-sharding-strategy); `--fsdp` plans it, and round-trips."""
    plan = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "8", "--ep", "8", "--zero", "3",
            "--global-batch", "64", "--micro-batch", "1")
    err = _refused(cli, *plan, "--emit", emit)
    assert "Megatron-FSDP" in err and "--fsdp" in err
    code, out, err = cli("plan", *plan, "--fsdp", "--emit", emit)
    assert code in (0, 1) and "optim_grads_params" in out, err


def test_emitted_bridge_overrides_read_back_nvls(cli, tmp_path):
    """`--nccl-ub --nvls --emit bridge` writes `# environment: NCCL_NVLS_ENABLE=1` beside the overrides (a Bridge
    recipe sets no environment); --from-bridge did not read it and planned without NVLink SHARP, where
    --from-megatron reads the launch's export (megatron_run._nccl_settings). Both readers now agree."""
    plan = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16", "--nccl-ub", "--nvls",
            "--global-batch", "128", "--micro-batch", "1", "--overlap-grad-reduce")
    code, emitted, err = cli("plan", *plan, "--emit", "bridge")
    assert code in (0, 1) and "# environment: NCCL_NVLS_ENABLE=1" in emitted, err
    recipe = tmp_path / "overrides.txt"
    recipe.write_text(emitted)
    original = _json(cli, *plan)
    back = _json(cli, "--hw", "h100", "--devices", "16", "--from-bridge", str(recipe))
    assert original["parallelism"]["nvls"] is True
    assert back["parallelism"] == original["parallelism"]
    # without NVLink SHARP the file says NCCL_NVLS_ENABLE=0 and reads back so
    recipe.write_text(emitted.replace("NCCL_NVLS_ENABLE=1", "NCCL_NVLS_ENABLE=0"))
    assert _json(cli, "--hw", "h100", "--devices", "16", "--from-bridge", str(recipe))["parallelism"]["nvls"] is False


def _bridge(cli, *plan: str) -> dict[str, str]:
    code, emitted, err = cli("plan", *plan, "--emit", "bridge")
    assert code in (0, 1), err
    lines = [line for line in emitted.splitlines() if line and not line.startswith("#")]
    # bridgeparse: the comm_overlap section is written `++key=value`
    return {key.lstrip("+"): value for key, value in (line.split("=", 1) for line in lines)}


def test_emit_bridge_turns_the_distributed_optimizer_off_in_both_configs(cli, tmp_path):
    """`--zero 0 --emit bridge` wrote no ddp.use_distributed_optimizer at all, so the recipe's stood: Bridge's recipes
    set it in the DDP and the optimizer config (Megatron-Bridge @ 067f987d src/megatron/bridge/recipes/common.py L87,
    recipes/utils/optimizer_utils.py L150), and Bridge turns it on in both when either has it (training/config.py
    L2101-2123): the run sharded the optimizer state the plan kept whole. Both are now written, and read back as
    Bridge applies them (either one on is the distributed optimizer)."""
    plan = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--pp", "2", "--zero", "0",
            "--global-batch", "64", "--micro-batch", "1")
    keys = _bridge(cli, *plan)
    assert keys["ddp.use_distributed_optimizer"] == keys["optimizer.use_distributed_optimizer"] == "False"
    assert _bridge(cli, *plan[:-6], "--zero", "1", *plan[-4:])["optimizer.use_distributed_optimizer"] == "True"
    recipe = tmp_path / "o.txt"
    recipe.write_text("\n".join(f"{k}={v}" for k, v in keys.items()) + "\n")
    read = ("--hw", "h100", "--devices", "16", "--from-bridge", str(recipe))
    assert _json(cli, *read)["parallelism"]["zero_stage"] == 0 == _json(cli, *plan)["parallelism"]["zero_stage"]
    recipe.write_text(recipe.read_text().replace("optimizer.use_distributed_optimizer=False",
                                                 "optimizer.use_distributed_optimizer=True"))
    assert _json(cli, *read)["parallelism"]["zero_stage"] == 1  # Bridge syncs the two (config.py L2114-2123)


@pytest.mark.parametrize("plan", [
    # without the data-parallel overlaps: Bridge's CommOverlapConfig turns both on with DP > 1 and the distributed
    # optimizer (comm_overlap.py L576-585) unless its own section says otherwise
    ("--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--global-batch", "64", "--micro-batch", "1"),
    # a bucket: Bridge's is 128 Mi parameters (L578) over ddp.bucket_size
    ("--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--global-batch", "64", "--micro-batch", "1",
     "--overlap-grad-reduce", "--ddp-bucket-size", "50000000"),
    # the interleaved schedule without p2p overlap: Bridge sets overlap_p2p_comm with VP (L453-458)
    ("--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--pp", "4", "--vp", "2", "--no-overlap-p2p",
     "--global-batch", "64", "--micro-batch", "1"),
])
def test_emit_bridge_states_the_overlaps_in_the_comm_overlap_section(cli, tmp_path, plan):
    """CommOverlapConfig.setup (Megatron-Bridge @ 067f987d training/config.py L2027-2029) writes its own data-parallel
    overlaps, gradient bucket and p2p overlap over ddp.* and model.* unless comm_overlap.* gives them
    (training/comm_overlap.py _override_user_cfgs L594-602), so `ddp.overlap_grad_reduce=False` alone ran with the
    overlap. The comm_overlap keys now say the plan's values, and --from-bridge reads them back (the same plan)."""
    keys = _bridge(cli, *plan)
    args = _json(cli, *plan)["parallelism"]
    assert keys["comm_overlap.overlap_grad_reduce"] == str(args["overlaps"]["grad_reduce"])
    assert keys["comm_overlap.overlap_param_gather"] == str(args["overlaps"]["param_gather"])
    if args["ddp_bucket_params"] is not None:
        assert keys["comm_overlap.bucket_size"] == str(args["ddp_bucket_params"])
    if args["virtual_pipeline"] > 1 and not args["overlaps"]["p2p"]:
        assert keys["comm_overlap.overlap_p2p_comm"] == "False"
    recipe = tmp_path / "o.txt"
    recipe.write_text("\n".join(f"{k}={v}" for k, v in keys.items()) + "\n")
    back = _json(cli, "--hw", "h100", "--devices", "16", "--from-bridge", str(recipe))
    assert back["parallelism"] == args
    # the comm_overlap value is the one Bridge runs: given against the ddp one, it wins
    recipe.write_text(recipe.read_text().replace("comm_overlap.overlap_grad_reduce=False",
                                                 "comm_overlap.overlap_grad_reduce=True"))
    if "comm_overlap.overlap_grad_reduce=False" in "\n".join(f"{k}={v}" for k, v in keys.items()):
        back = _json(cli, "--hw", "h100", "--devices", "16", "--from-bridge", str(recipe))
        assert back["parallelism"]["overlaps"]["grad_reduce"] is True


def test_emit_bridge_writes_the_megatron_values_a_recipe_would_keep(cli, tmp_path):
    """Overrides are applied over a recipe: a field the emitted launch leaves at Megatron-LM's value was left out, so
    the recipe's stood (Megatron-Bridge @ 067f987d recipes/llama/h100/llama3.py L343 sequence_parallel = True, L99
    cross_entropy_fusion_impl = "te"; tests/data/megatron/llama3-70b-32gpu-h100-bridge.yaml, that recipe's VP 5).
    A TP 2 plan without sequence parallelism, interleaving, recomputation or TE's fused loss now says so, and reads
    back as the same plan."""
    plan = ("--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--tp", "2", "--no-sequence-parallel",
            "--global-batch", "64", "--micro-batch", "1")
    keys = _bridge(cli, *plan)
    assert keys["model.sequence_parallel"] == "False"
    assert keys["model.virtual_pipeline_model_parallel_size"] == keys["model.recompute_granularity"] == "null"
    assert keys["model.cross_entropy_fusion_impl"] == "native" and keys["model.cuda_graph_impl"] == "none"
    assert keys["model.cpu_offloading_num_layers"] == "0" and keys["ddp.use_megatron_fsdp"] == "False"
    recipe = tmp_path / "o.txt"
    recipe.write_text("\n".join(f"{k}={v}" for k, v in keys.items()) + "\n")
    code, out, err = cli("plan", "--hw", "h100", "--devices", "16", "--from-bridge", str(recipe))
    assert code in (0, 1) and "ignored" not in out.lower(), out  # every written key is read
    original, back = _json(cli, *plan), _json(cli, "--hw", "h100", "--devices", "16", "--from-bridge", str(recipe))
    assert back["parallelism"] == original["parallelism"] and back["memory_bytes"] == original["memory_bytes"]
    # a pipeline layout sets VP itself (arguments.py L941-950): no VP is written beside it
    keys = _bridge(cli, "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--pp", "2", "--vp", "2",
                   "--pipeline-layout", "Et*8|t*8|t*8|t*8L", "--global-batch", "64", "--micro-batch", "1")
    assert "model.virtual_pipeline_model_parallel_size" not in keys


def test_moe_act_needs_moe_layers(cli):
    """A dense model with `--recompute moe_act` was planned (nothing to recompute) and emitted with a "MEGATRON WOULD
    REFUSE THIS" line: Megatron-Core stops, "moe_act in recompute_modules is only supported with moe_grouped_gemm"
    (transformer_config.py L1964-1967 @ d98e8a64), an MoE option. Refused in the plan, as mla_up_proj without MLA."""
    err = _refused(cli, "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--recompute", "moe_act")
    assert "no MoE layers" in err and "L1964-1967" in err
    assert _json(cli, *QWEN, "--recompute", "moe_act")["inputs"]["recompute"] == "moe_act"


def test_emit_megatron_says_which_numerics_stay_at_megatrons_defaults(cli):
    """The launch carried no --rotary-base, --norm-epsilon or --init-method-std, so Qwen3-30B-A3B (rope_theta 1e6)
    trained at Megatron-LM's 10000 without a word (megatron_flags.tsv, arguments.py @ d98e8a64); freshuser17 made the
    launch say so. semantics22: the launch states the model's values (tests/test_semantics22.py), and the comment names
    only the fields the model's source does not give: Llama-3-8B's stored config.json has no rope_theta, so its launch
    still says 10000; Qwen3's names only the router's loss. A Bridge recipe takes unknown ones from the Hugging Face
    config: its overrides carry no such comment."""
    code, text, err = cli("plan", *QWEN, "--emit", "megatron")
    assert code in (0, 1), err
    assert "--rotary-base 1000000 " in text and "--rotary-base 10000 " not in text and "--moe-aux-loss-coeff" in text
    # numerics23 gave the llama-3-8b preset Meta's rope_theta: the trimmed stored copy still has none
    trimmed = str(Path(__file__).parent / "data" / "llama-3-8b.config.json")
    code, text, err = cli("plan", "--model", trimmed, "--hw", "h100", "--devices", "8", "--emit", "megatron")
    note = next(line for line in text.splitlines() if "--rotary-base" in line)
    assert note.startswith("# ") and "--rotary-base 10000" in note and "rope_theta" in note
    assert "--moe-aux-loss-coeff" not in text
    code, text, err = cli("plan", *QWEN, "--emit", "bridge")
    assert "--rotary-base" not in text