"""hostile25: what the campaign found (input: before -> now).

- `--emit megatron` / `--emit bridge` dropped the plan's NVLink domain where the file cannot state it: `plan --hw gb200
  --devices 144 --gpus-per-node 36` (torchrun starts a tray's 4, read back as the NVL72 rack), 12 H100s (torchrun 3
  nodes of 4, read back as domains of 4) and any `--gpus-per-node` in Bridge overrides (no launcher; read back in the
  profile's domain): the read-back planned another step time. Now a `# btacalc option: --gpus-per-node N` line, read
  back (a value that is no whole number of devices from 1 to 2^20 refused).
- a launch of `pretrain_hybrid.py`, `pretrain_mamba.py` (a HybridModel of Mamba layers) or `pretrain_vlm.py` (LLaVA) was
  planned as pretrain_gpt.py's GPT without a word: refused naming the script and the model it builds.
- `--yaml-cfg FILE` (Megatron-LM replaces every argument with the YAML's) and `--heterogeneous-layers-config-path` /
  `-encoded-json` (each layer's own attention and MLP) were planned from the launch's flags, listed "not modelled by
  btacalc": refused with Megatron-LM's reason. `--use-checkpoint-args` (the checkpoint's architecture replaces the
  flags) was "not modelled": a note says what it does.
- `--num-layers` beside `--encoder-num-layers` (Megatron-LM asserts) was planned; `--encoder-num-layers N` alone (which
  Megatron-LM reads as the layers) and a launch with neither were "field num_layers: Input should be a valid integer".
- a Bridge key btacalc reads set to null (`model.hidden_dropout=null`, `model.rotary_base=null`, `model.moe_router_topk
  =null`: "field top_k: ...", `model.num_layers=null`: "field num_layers: ...") was planned at a default in silence or
  refused by a pydantic field name: refused naming the key, where Megatron-LM's option has a default other than None
  and Bridge's field is not Optional (the Optional ones, `model.num_query_groups=null` one group per head, read as
  given; the set is derived here from the mirrors' annotations).
- `--te-version ٢.٢` (Arabic-Indic digits) was taken as TE 2.2 (a TE version is ASCII).
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from btacalc.config.megatron_launch import flags_by_dest
from btacalc.config.bridge_run import NULL_IN_RECIPES, NULLABLE_WITH_DEFAULT, import_bridge
from btacalc.config.megatron_run import OTHER_MODEL_SCRIPTS, import_megatron
from btacalc.config.bridge_codec import bridge_key
from btacalc.errors import BtacalcError

MEGATRON = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
BRIDGE = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
LAUNCH = (Path(__file__).parent / "data" / "megatron" / "llama3-8b-h100-fp8.args").read_text()
HYDRA = ("model.pipeline_model_parallel_size=1 train.micro_batch_size=1 train.global_batch_size=64 "
         "mixed_precision=bf16_mixed\n")


def _show(repo: Path, commit: str, path: str) -> str:
    if not repo.exists():
        pytest.skip(f"{repo} is not on this machine")
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("hw, args, bridge_devices", [
    ("gb200", ["--devices", "144", "--ep", "16", "--gpus-per-node", "36"], "144"),
    ("h100", ["--model", "llama-3-8b", "--devices", "12"], "12"),
    ("b200", ["--devices", "16", "--ep", "16", "--gpus-per-node", "4"], "16"),
    ("gb200", ["--devices", "144", "--ep", "16", "--gpus-per-node", "4"], "144"),
])
def test_an_emitted_file_is_read_back_in_the_plans_nvlink_domain(cli, tmp_path, hw, args, bridge_devices):
    """The plan, its launch read back and its Bridge overrides read back: one NVLink domain, one step time. Each case
    read back in another domain before (the profile's 72 for 36 and for 4 on GB200, torchrun's 4 for 12 H100s, 8 for
    B200's 4 in Bridge's overrides)."""
    plan = _plan(cli, "--hw", hw, *args)
    for emit, reader, extra in (("megatron", "--from-megatron", []), ("bridge", "--from-bridge",
                                                                       ["--devices", bridge_devices])):
        code, out, err = cli("plan", "--hw", hw, *args, "--emit", emit)
        assert code in (0, 1), err
        emitted = tmp_path / f"{emit}.txt"
        emitted.write_text(out)
        back = _plan(cli, "--hw", hw, reader, str(emitted), *extra)
        assert back["parallelism"]["devices_per_node"] == plan["parallelism"]["devices_per_node"], emit
        assert back["throughput"]["step_time_s"] == pytest.approx(plan["throughput"]["step_time_s"], rel=1e-12), emit


def test_a_domain_both_readings_agree_on_is_not_written(cli):
    """No line where the read-back gives the plan's domain: 16 H100s (torchrun's 8), 8 GB200s (a tray of 4 read as the
    rack), the profile's domain in Bridge overrides."""
    for hw, devices, emit in (("h100", "16", "megatron"), ("gb200", "8", "megatron"), ("h100", "16", "bridge")):
        code, out, err = cli("plan", "--hw", hw, "--devices", devices, "--emit", emit)
        assert code in (0, 1) and "--gpus-per-node" not in out, (hw, emit, err)


def test_the_command_lines_gpus_per_node_wins_over_the_files(cli, tmp_path):
    code, out, err = cli("plan", "--hw", "gb200", "--devices", "144", "--ep", "16", "--gpus-per-node", "36",
                         "--emit", "megatron")
    launch = tmp_path / "l.sh"
    launch.write_text(out)
    assert _plan(cli, "--hw", "gb200", "--from-megatron", str(launch))["parallelism"]["devices_per_node"] == 36
    assert _plan(cli, "--hw", "gb200", "--from-megatron", str(launch), "--gpus-per-node", "18"
                 )["parallelism"]["devices_per_node"] == 18


def test_the_scripts_refused_build_another_model_at_the_pin():
    """The table's claims, against the scripts at d98e8a64: pretrain_mamba.py runs pretrain_hybrid.py, which builds a
    HybridModel; pretrain_vlm.py a LLaVAModel; pretrain_gpt.py a GPTModel (read)."""
    assert 'runpy.run_path(os.path.join(_this_dir, "pretrain_hybrid.py")' in _show(MEGATRON, "d98e8a64",
                                                                                  "pretrain_mamba.py")
    assert "import HybridModel" in _show(MEGATRON, "d98e8a64", "pretrain_hybrid.py")
    assert "LLaVAModel(" in _show(MEGATRON, "d98e8a64", "pretrain_vlm.py")
    assert "GPTModel" in _show(MEGATRON, "d98e8a64", "pretrain_gpt.py")
    assert set(OTHER_MODEL_SCRIPTS) == {"pretrain_hybrid.py", "pretrain_mamba.py", "pretrain_vlm.py"}


@pytest.mark.parametrize("script", ["pretrain_hybrid.py", "pretrain_mamba.py", "/x/pretrain_vlm.py"])
def test_a_launch_of_another_models_script_is_refused(script):
    with pytest.raises(BtacalcError, match=f"^l.sh: {script} builds a "):
        import_megatron(LAUNCH.replace("pretrain_gpt.py", script), "l.sh")
    assert import_megatron(LAUNCH, "l.sh").model.num_layers == 32  # pretrain_gpt.py itself is read


def test_arguments_from_elsewhere_are_refused_or_noted():
    for extra, said in (("--yaml-cfg r.yaml", "replaces every argument with that YAML file's"),
                        ("--heterogeneous-layers-config-path n.json", "each layer's attention and MLP")):
        with pytest.raises(BtacalcError, match=f"^l.sh: {extra}: Megatron-LM ") as refused:
            import_megatron(LAUNCH.replace("--num-layers 32", f"--num-layers 32 {extra}"), "l.sh")
        assert said in str(refused.value)
    run = import_megatron(LAUNCH.replace("--num-layers 32", "--num-layers 32 --use-checkpoint-args"), "l.sh")
    assert [n for n in run.notes if n.startswith("--use-checkpoint-args: Megatron-LM takes the model's layers")]
    plain = import_megatron(LAUNCH, "l.sh")
    assert not [n for n in plain.notes if "checkpoint" in n]


def test_encoder_num_layers_is_read_as_megatron_reads_it():
    """arguments.py L1304-1311 @ d98e8a64: with --num-layers too it asserts; alone, num_layers = encoder_num_layers."""
    with pytest.raises(BtacalcError, match="'cannot have both num-layers and encoder-num-layers specified'"):
        import_megatron(LAUNCH.replace("--num-layers 32", "--num-layers 32 --encoder-num-layers 32"), "l.sh")
    alone = import_megatron(LAUNCH.replace("--num-layers 32", "--encoder-num-layers 32"), "l.sh")
    assert alone.model == import_megatron(LAUNCH, "l.sh").model
    assert "--encoder-num-layers" not in [flag for flag, _ in alone.ignored]
    with pytest.raises(BtacalcError, match="^l.sh: the launch gives no --num-layers"):
        import_megatron(LAUNCH.replace("--num-layers 32 ", ""), "l.sh")


@pytest.mark.parametrize("key", ["model.hidden_dropout", "model.rotary_base", "model.moe_router_topk",
                                 "model.tensor_model_parallel_size", "model.layernorm_epsilon"])
def test_a_bridge_null_btacalc_cannot_plan_is_refused_naming_the_key(key):
    with pytest.raises(BtacalcError, match=f"^o.txt: {key}=null: Megatron-Bridge sets the field to None as given"):
        import_bridge(HYDRA + f"{key}=null\n", "o.txt", devices=8, base=_qwen())


def test_a_bridge_null_that_is_a_setting_is_read_as_given():
    """num_query_groups None is one key/value group per head (TransformerConfig), attention_backend None no switch (a
    Bridge recipe writes it); a field whose default is None stays None."""
    base = _qwen()
    mha = import_bridge(HYDRA + "model.num_layers=4 model.hidden_size=1024 model.num_attention_heads=16 "
                        "model.num_query_groups=null model.seq_length=4096 model.vocab_size=32000\n", "o.txt", devices=8, base=base)
    assert mha.model.num_kv_heads == mha.model.num_heads == 16
    for extra in ("model.attention_backend=null", "model.virtual_pipeline_model_parallel_size=null"):
        import_bridge(HYDRA + extra + "\n", "o.txt", devices=8, base=base)


def _qwen():
    from btacalc.config.presets import load_preset

    return load_preset("qwen3-30b-a3b")


def _annotations(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    out.setdefault(statement.target.id, ast.unparse(statement.annotation))
    return out


def test_the_nullable_options_are_the_mirrors_optional_fields():
    """NULLABLE_WITH_DEFAULT is every Megatron-LM option with a value and a default other than None whose field in
    Bridge's provider or configs, or Megatron-Core's configs, admits None (Optional[...] or `| None`)."""
    annotations: dict[str, str] = {}
    for path in ("src/megatron/bridge/models/gpt_provider.py", "src/megatron/bridge/training/config.py"):
        annotations.update({k: v for k, v in _annotations(_show(BRIDGE, "067f987d", path)).items()
                            if k not in annotations})
    for path in ("megatron/core/transformer/transformer_config.py", "megatron/core/model_parallel_config.py",
                 "megatron/core/distributed/distributed_data_parallel_config.py",
                 "megatron/core/optimizer/optimizer_config.py", "megatron/training/config/training_config.py"):
        annotations.update({k: v for k, v in _annotations(_show(MEGATRON, "d98e8a64", path)).items()
                            if k not in annotations})
    derived = set()
    for dest, flags in flags_by_dest().items():
        if flags[0].arity == "0" or flags[0].default == "None":
            continue
        field = (bridge_key(dest) or f"model.{dest}").rsplit(".", 1)[-1]
        if "Optional" in annotations.get(field, "") or "None" in annotations.get(field, ""):
            derived.add(dest)
    assert NULLABLE_WITH_DEFAULT == derived
    # review25: and the flex backend, Literal[...] without None, which Bridge's Qwen3 MoE performance recipes set to
    # None (tests/test_review25.py reads the recipe)
    assert annotations["attention_backend"] == "AttnBackend" and "None" not in annotations["moe_flex_dispatcher_backend"]
    assert NULL_IN_RECIPES == {"attention_backend", "moe_flex_dispatcher_backend"}
    assert "hidden_dropout" not in derived and "rotary_base" not in derived and "moe_router_topk" not in derived
