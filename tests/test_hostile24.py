"""hostile24: an attention dropout of nan by the attention btacalc plans, and a Bridge key's refusal with its reason.

review22 left `--attention-dropout nan` (Bridge `model.attention_dropout: .nan`) planned as no dropout. What each
attention does with it (megatron_model_rows.NAN_ATTENTION_DROPOUT, file:line there): Megatron-Core's unfused
DotProductAttention and TransformerEngine's UnfusedDotProductAttention build torch.nn.Dropout(nan) and call it in
training, where torch raises; TE's FlashAttention hands it to flash-attn 2, whose set_params_fprop checks
`p_dropout < 1.f` (false for nan); TE's fused (cuDNN) attention checks nothing. torch is the oracle for the first.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.errors import BtacalcError

BASE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
        "--seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --bf16 "
        "--vocab-size 32000 --hidden-dropout 0 --attention-dropout nan")
BRIDGE = ("model.num_layers=2 model.hidden_size=256 model.num_attention_heads=4 model.seq_length=512 "
          "model.vocab_size=32000 train.micro_batch_size=1 train.global_batch_size=8 mixed_precision=bf16_mixed "
          "model.hidden_dropout=0.0 model.attention_dropout=nan")


def test_torch_builds_a_nan_dropout_and_raises_in_training():
    """The oracle for the unfused attention: nn.Dropout(nan) is built (it checks p < 0 or p > 1 only), and its call
    in training raises; so the refusal is at the first step, not at the build (review22's "nn.Dropout takes nan")."""
    torch = pytest.importorskip("torch")
    dropout = torch.nn.Dropout(float("nan"))
    dropout.train()
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1, but got nan"):
        dropout(torch.ones(4))


@pytest.mark.parametrize("flags,said", [
    ("--attention-backend unfused", "unfused attention's torch.nn.Dropout"),
    ("--attention-backend local", "unfused attention's torch.nn.Dropout"),
    ("--transformer-impl local", "unfused attention's torch.nn.Dropout"),
    ("--attention-backend flash", "flash_api.cpp L150 TORCH_CHECK(p_dropout < 1.f)"),
])
def test_a_nan_attention_dropout_is_refused_where_the_attention_stops(flags, said):
    with pytest.raises(BtacalcError, match="^l.sh: Megatron-LM's --attention-dropout \\(attention_dropout\\) takes a "
                                           "probability in \\[0, 1\\], got nan: ") as refused:
        import_megatron(f"{BASE} {flags}\n", "l.sh", devices=8)
    assert said in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("flags,auto", [("", True), ("--attention-backend auto", True),
                                        ("--attention-backend fused", False)])
def test_a_nan_attention_dropout_under_fused_attention_is_planned_with_what_it_does(flags, auto):
    """TE's fused attention runs cuDNN's dropout with probability nan (no check); auto is TE's choice, fused from sm90
    and flash-attn below, where the run stops: said in the plan, which models no attention dropout."""
    run = import_megatron(f"{BASE} {flags}\n", "l.sh", devices=8)
    notes = [n for n in run.notes if n.startswith("--attention-dropout nan")]
    assert len(notes) == 1 and "cuDNN's dropout with probability nan" in notes[0], run.notes
    assert ("auto is TE's choice: fused attention from sm90" in notes[0]) is auto
    assert run.model.dropout is False and run.request.attention == "flash"
    clean = import_megatron(f"{BASE.replace('nan', '0.0')} {flags}\n", "l.sh", devices=8)
    assert not [n for n in clean.notes if "attention-dropout" in n]


@pytest.mark.parametrize("extra,said", [
    ("model.attention_backend=flash", ": TransformerEngine's FlashAttention hands it to flash-attn"),
    ("model.attention_backend=unfused", ": unfused attention's torch.nn.Dropout"),
])
def test_a_bridge_keys_refusal_keeps_its_reason(extra, said):
    """The Bridge reader renamed the flag to its key and dropped the reason after "got nan" (`ArgumentValueError.why`):
    hidden_dropout's torch check and the attention's alike."""
    with pytest.raises(BtacalcError, match="^o.txt: model.attention_dropout takes a probability in \\[0, 1\\], got "
                                           "nan: ") as refused:
        import_bridge(f"{BRIDGE} {extra}\n", "o.txt", devices=8)
    assert said in str(refused.value)
    with pytest.raises(BtacalcError, match="got nan: torch's dropout raises on it"):
        import_bridge(BRIDGE.replace("hidden_dropout=0.0 model.attention_dropout=nan", "hidden_dropout=nan") + "\n",
                      "o.txt", devices=8)
    run = import_bridge(f"{BRIDGE} model.attention_backend=fused\n", "o.txt", devices=8)
    assert any(n.startswith("--attention-dropout nan") for n in run.notes)


# ---- --transformer-impl local with a low-precision recipe ----

MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
SMALL = BASE.replace(" --attention-dropout nan", "")


@pytest.mark.skipif(not MIRROR.exists(), reason="needs the Megatron-LM mirror")
def test_the_local_layers_have_no_low_precision_path():
    """LocalSpecProvider's linear layers are Megatron-Core's own (core/models/backends.py), whose module never names
    FP8 or FP4: TransformerEngine's recipe (fp8_autocast) reaches TE's modules only."""
    def show(path: str) -> str:
        return subprocess.run(["git", "-C", str(MIRROR), "show", f"d98e8a64:{path}"], capture_output=True, text=True,
                              check=True).stdout
    backends = show("megatron/core/models/backends.py")
    local = backends[backends.index("class LocalSpecProvider"):]
    assert "return ColumnParallelLinear" in local and "return RowParallelLinear" in local
    layers = show("megatron/core/tensor_parallel/layers.py").lower()
    assert "class columnparallellinear" in layers and "fp8" not in layers and "fp4" not in layers


@pytest.mark.parametrize("recipe,name", [("--fp8-format hybrid", "fp8"), ("--fp8-format e4m3 --fp8-recipe mxfp8",
                                                                          "mxfp8"), ("--fp4-format e2m1", "nvfp4")])
def test_a_local_launchs_low_precision_recipe_is_planned_as_the_bf16_it_runs(recipe, name):
    """hostile24: `--transformer-impl local --fp8-format hybrid` was planned at FP8 (the recipe's GEMM rates and
    bytes); the local layers multiply in bf16. Planned bf16 with a note; the same launch under TE keeps its recipe."""
    te = import_megatron(f"{SMALL} {recipe}\n", "l.sh", devices=8)
    assert te.request.precision == name
    local = import_megatron(f"{SMALL} {recipe} --transformer-impl local\n", "l.sh", devices=8)
    assert local.request.precision == "bf16" and local.request.attention == "eager"
    assert [n for n in local.notes if f"({name}) with --transformer-impl local" in n and "planned bf16" in n]
    gathered = import_megatron(f"{SMALL} {recipe} --transformer-impl local --use-distributed-optimizer "
                               f"--{'fp4' if name == 'nvfp4' else 'fp8'}-param-gather\n", "l.sh", devices=8)
    assert gathered.request.precision == "bf16" and not gathered.request.fp8_param_gather
    assert any(n.startswith("--fp8-param-gather / --fp4-param-gather with --transformer-impl local")
               for n in gathered.notes)


@pytest.mark.parametrize("given,same", [("٢", "2"), ("1_0", "10")])
def test_a_layer_frequency_megatron_reads_with_int_is_read(given, same):
    """hostile24: Megatron's moe_freq_type (arguments.py L342-350 @ d98e8a64) takes a value without '[' as int(x),
    which reads '٢' (an Arabic-Indic digit) and '1_0'; btacalc's reader sent it to its list-expression
    evaluator, which refused it ("not an integer or list expression"), though the type check had passed it."""
    moe = (" --num-layers 20 --swiglu --ffn-hidden-size 512 --num-experts 8 --moe-router-topk 2 "
           "--moe-ffn-hidden-size 512 --moe-layer-freq '{}'\n")
    launch = SMALL.replace(" --num-layers 2", "")
    ours = import_megatron(launch + moe.format(given), "l.sh", devices=8).model
    theirs = import_megatron(launch + moe.format(same), "l.sh", devices=8).model
    assert ours == theirs.model_copy(update={"name": ours.name, "source": ours.source})
