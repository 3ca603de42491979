"""argtypes24: a launch value Megatron-LM's argparse cannot convert to its option's type stops the launch, whether
btacalc reads the option or not (`--hidden-dropout abc` and `--lr-warmup-iters x1` were planned, listed as ignored).
The oracle is Python's own int() / float(), as argparse calls them (argparse._get_value: a ValueError is "invalid
<type> value"); the types are btacalc/data/megatron_types.tsv, written by tools/megatron_choices.py at d98e8a64.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from btacalc.config.megatron_launch import argparse_types, megatron_flags, read_launch
from btacalc.config.bridge_run import import_bridge
from btacalc.config.megatron_run import import_megatron
from btacalc.config.presets import load_preset
from btacalc.errors import BtacalcError

ROOT = Path(__file__).resolve().parent.parent
MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
BASE = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 "
        "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000")
# strings on both sides of int() and float(): signs, blanks, underscores, other scripts' digits, hex, exponents, nan
WORDS = ["3", "+3", "-3", " 3", "3 ", "\t7\t", "0010", "1_000", "1__0", "_1", "\u0663", "\uff13", "0x10", "0b1", "0o7",
         "1e3", "1E-3", "1.", ".5", "1.5", "-0", "nan", "NaN", "-nan", "inf", "-Infinity", "infinity", "1e", "e3",
         "abc", "x1", "", " ", "1 2", "3.0", "1e308", "1e999", "9" * 5000, "+-3", "--", "0.1e-2", "1_0.5", "\u0663.\u0665"]


def _accepts(convert: type, word: str) -> bool:
    try:
        convert(word)
    except ValueError:
        return False
    return True


def _reads(text: str) -> bool:
    try:
        read_launch(text, "l.args")
    except BtacalcError:
        return False
    return True


@pytest.mark.parametrize("flag,convert", [("--lr-warmup-iters", int), ("--seed", int), ("--hidden-dropout", float),
                                          ("--lr", float), ("--adam-beta1", float), ("--save-interval", int)])
def test_a_flags_value_is_taken_as_pythons_own_conversion_takes_it(flag, convert):
    """Each word is read iff Python's int() / float() takes it, as `--flag word` and as `--flag=word`. The flags are
    ones btacalc does not read (or reads only as a note), so before this branch every word was taken."""
    assert argparse_types()[flag][0] == convert.__name__
    for word in WORDS:
        if word.startswith("-") and not word.lstrip("-").strip():
            continue  # "--" is a flag's start to argparse, not a value
        expected = _accepts(convert, word)
        assert _reads(f"{BASE} {flag}={shlex.quote(word)}\n") is expected, (flag, word)
        if not word.startswith("-"):
            assert _reads(f"{BASE} {flag} {shlex.quote(word)}\n") is expected, (flag, word)


def test_the_briefs_launch_is_refused_naming_flag_value_type_and_line():
    with pytest.raises(BtacalcError) as err:
        read_launch(f"{BASE} --hidden-dropout abc --lr-warmup-iters x1\n", "l.args")
    message = str(err.value)
    assert "\n" not in message
    assert "--hidden-dropout (hidden_dropout) takes a number, got 'abc'" in message
    assert "type=float, Megatron-LM@d98e8a64 megatron/core/transformer/transformer_config.py:" in message
    with pytest.raises(BtacalcError, match=r"--lr-warmup-iters \(lr_warmup_iters\) takes an integer, got 'x1': its "
                                           r"argparse \(type=int, Megatron-LM@d98e8a64 megatron/training/config/"):
        read_launch(f"{BASE} --lr-warmup-iters x1\n", "l.args")


def test_every_flag_has_its_type_and_switches_take_none():
    types, flags = argparse_types(), megatron_flags()
    assert set(types) == set(flags)
    for name, flag in flags.items():
        assert (types[name][0] == "switch") is (flag.arity == "0"), name
    checks = {check for check, _, _ in types.values()}
    assert checks <= {"int", "float", "text", "switch", "names", "freq", "int_tuple", "unchecked"}
    # the one type btacalc does not check is said, with its name
    assert {n: t[:2] for n, t in types.items() if t[0] == "unchecked"} == {"--exit-signal": ("unchecked",
                                                                                             ("signal.Signals",))}


@pytest.mark.skipif(not MIRROR.exists(), reason="needs the Megatron-LM mirror")
def test_the_data_files_are_what_the_tool_reads_at_the_pin(tmp_path):
    """tools/megatron_choices.py regenerates both files unchanged from the pinned sources."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import megatron_choices as tool
    finally:
        sys.path.remove(str(ROOT / "tools"))
    rows = {flag: (check, tuple(names.split(",")) if names else (), where)
            for flag, (_dest, check, names, where) in tool.types(str(MIRROR)).items()}
    assert rows == argparse_types()
    from btacalc.config.megatron_launch import argparse_choices
    assert {d: (tuple(v), w) for d, (v, w) in tool.choices(str(MIRROR)).items()} == argparse_choices()


@pytest.mark.skipif(not MIRROR.exists(), reason="needs the Megatron-LM mirror")
def test_the_callables_are_read_from_their_lines():
    """The custom type callables' rows point at arguments.py lines that pass them as type=."""
    text = subprocess.run(["git", "--git-dir", str(MIRROR), "show", "d98e8a64:megatron/training/arguments.py"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    for flag, callable_name in (("--moe-layer-freq", "moe_freq_type"), ("--window-size", "tuple_type"),
                                ("--no-rope-freq", "no_rope_freq_type"), ("--linear-attention-freq", "la_freq_type"),
                                ("--cuda-graph-modules", "_parse_cuda_graph_modules_arg")):
        line = int(argparse_types()[flag][2].rsplit(":", 1)[1])
        assert f"'{flag}'" in text[line - 1] and f"type={callable_name}" in text[line - 1], flag


@pytest.mark.parametrize("given,fragment", [
    # an integer option's choices (Literal[0, 1, 2], choices=[1, 2]): int() first, then the choice, as argparse does
    ("--empty-unused-memory-level 3", "--empty-unused-memory-level (empty_unused_memory_level) takes one of 0, 1, 2, "
                                      "got '3'"),
    ("--flash-attention-version 1", "takes one of 2, 3, 4, got '1'"),
    ("--megatron-fsdp-version x", "takes one of 1, 2, got 'x'"),
    # the layer-pattern callables: int(), or with '[' only the characters _eval_pattern allows
    ("--moe-layer-freq x", "--moe-layer-freq (moe_layer_freq) takes an integer or a Python list expression"),
    ("--moe-layer-freq 1.5", "got '1.5': its argparse (its layer-pattern type"),
    ("--no-rope-freq [1]*2+x", "--no-rope-freq (no_rope_freq) takes an integer or a Python list expression"),
    ("--linear-attention-freq [1]*-2", "got '[1]*-2'"),
    ("--window-attn-skip-freq [1,1", "--window-attn-skip-freq (window_attn_skip_freq) takes an integer or a Python list"),
    ("--no-rope-freq " + "(" * 300 + "[1]" + ")" * 300, "takes an integer or a Python list expression"),
    # tuple_type: int() of each comma-separated item
    ("--window-size 128,x", "--window-size (window_size) takes integers separated by commas, got '128,x'"),
    # a list option: each item (nargs 3 and '+')
    ("--rampup-batch-size 16 16 x", "--rampup-batch-size (rampup_batch_size) takes an integer, got 'x'"),
    ("--moe-aux-loss-coeff 0.01 abc", "--moe-aux-loss-coeff (moe_aux_loss_coeff) takes a number, got 'abc'"),
    # an enum's member names (config_type[cli_arg]; a KeyError stops Megatron) and argparse_meta's choices
    ("--cuda-graph-modules attn MLP", "--cuda-graph-modules 'MLP': Megatron-LM's argparse takes one of full, "
                                      "full_iteration, full_iteration_inference, attn, mlp"),
    ("--inference-cuda-graph-scope Block", "did you mean block?"),
    # the config classes review21's choice table left out (TokenizerConfig, DistributedInitConfig)
    ("--tokenizer-type gpt2bpetokenizer", "did you mean GPT2BPETokenizer?"),
    ("--distributed-backend NCCL", "did you mean nccl?"),
    # a repeated flag: argparse converts each occurrence, so the bad one stops it whichever comes last
    ("--hidden-dropout abc --hidden-dropout 0.1", "--hidden-dropout (hidden_dropout) takes a number, got 'abc'"),
    ("--hidden-dropout 0.1 --hidden-dropout abc", "got 'abc'"),
    ("--hidden-dropout=", "--hidden-dropout (hidden_dropout) takes a number, got ''"),
    # a list option's count (argparse: nargs 3 exactly, '+' at least one) and `--flag=value`, its one argument
    ("--rampup-batch-size 16 16", "--rampup-batch-size takes 3 values, got 2: Megatron-LM's argparse (nargs='3')"),
    ("--rampup-batch-size=16 16 100", "--rampup-batch-size takes 3 values, got 1"),
    ("--moe-aux-loss-coeff --lr 1", "--moe-aux-loss-coeff takes at least one value, got 0"),
    ("--data-path=a b", "'b' is not a Megatron-LM flag"),
])
def test_a_value_argparse_refuses_is_refused(given, fragment):
    with pytest.raises(BtacalcError) as err:
        read_launch(f"{BASE} {given}\n", "l.args")
    assert fragment in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("given", [
    "--empty-unused-memory-level +2", "--flash-attention-version 03", "--moe-layer-freq ([1]*2+[0]*2)",
    "--moe-layer-freq 2", "--window-size (128,0)", "--window-size 128", "--rampup-batch-size 16 16 1_000",
    "--hidden-dropout nan", "--hidden-dropout 1e3", "--cuda-graph-modules attn mlp", "--cuda-graph-modules full",
    "--onnx-safe anything", "--tokenizer-type GPT2BPETokenizer", "--lr-warmup-iters ' 7'", "--seed -5",
    # a variable the file does not set is the environment's: unknown here, not wrong (where btacalc reads the flag,
    # its reader refuses it naming why)
    "--seed $SEED", "--train-iters ${ITERS}", "--lr-warmup-iters $((WARMUP*2))",
    "--rampup-batch-size 16 16 100", "--data-path=a", "--data-path --lr 1", "--data-path",
])
def test_a_value_argparse_takes_is_read(given):
    read_launch(f"{BASE} {given}\n", "l.args")


# --- Megatron-Bridge: a Literal field's value is set as given (untyped OmegaConf), and Megatron-Core raises on it
BRIDGE = (ROOT / "tests" / "data" / "megatron" / "qwen3-30b-a3b-8gpu-h100-bridge.yaml").read_text()
DENSE_BRIDGE = ("model.num_layers=2\nmodel.hidden_size=256\nmodel.num_attention_heads=4\nmodel.seq_length=512\n"
                "model.vocab_size=32000\nmixed_precision=bf16_mixed\ntrain.global_batch_size=8\n"
                "train.micro_batch_size=1\n")


def _bridge(text: str):
    return import_bridge(text, "r.yaml", devices=8, base=load_preset("qwen3-30b-a3b"))


@pytest.mark.parametrize("value,ok", [("RMSNorm", True), ("LayerNorm", True), ("rmsnorm", False), ("RMSnorm", False),
                                      ("layernorm", False), ("L2Norm", False)])
def test_a_bridge_normalization_is_one_of_the_literals_exactly(value, ok):
    """transformer_config.py L249 @ 2a75ac12: Literal['LayerNorm', 'RMSNorm']; TENorm raises on anything else. btacalc
    read `rmsnorm` as RMSNorm (its decoder folds case)."""
    for text in (f"model.normalization: {value}\n" + BRIDGE, DENSE_BRIDGE + f"model.normalization={value}\n"):
        if ok:
            assert _bridge(text).model.norm == value.lower()
        else:
            with pytest.raises(BtacalcError, match=f"model.normalization: '{value}' is not one of LayerNorm, RMSNorm"):
                _bridge(text)


def test_a_bridge_dispatcher_is_checked_where_megatron_core_builds_one():
    """MoELayer raises on an unknown dispatcher (moe_layer.py L306-330 @ 2a75ac12); a dense model builds none."""
    with pytest.raises(BtacalcError, match="did you mean alltoall"):
        _bridge(BRIDGE.replace("  moe_token_dispatcher_type: alltoall", "  moe_token_dispatcher_type: AllToAll"))
    assert _bridge(BRIDGE.replace("dispatcher_type: alltoall", "dispatcher_type: allgather")).model.num_experts > 0
    assert _bridge(DENSE_BRIDGE + "model.moe_token_dispatcher_type=AllToAll\n").model.num_experts == 0


@pytest.mark.parametrize("override,fragment", [
    # Hydra's grammar types a bare value (8 is an int, 0.1 a float) and the untyped OmegaConf keeps the type; a
    # value quoted for Hydra (the shell's quotes around it) stays a string, which no step converts
    ("\"model.hidden_dropout='0.1'\"", "model.hidden_dropout: '0.1' is a string"),
    ("\"train.global_batch_size='8'\"", "train.global_batch_size: '8' is a string"),
])
def test_a_bridge_number_given_as_a_string_stays_refused(override, fragment):
    with pytest.raises(BtacalcError, match=fragment):
        _bridge(DENSE_BRIDGE + override + "\n")
    _bridge(DENSE_BRIDGE + override.replace("'", "").replace('"', "") + "\n")  # the shell's quotes alone: a number


@pytest.mark.parametrize("flag,value,refused", [
    ("--hidden-dropout", "1.5", True), ("--hidden-dropout", "-0.1", True), ("--hidden-dropout", "nan", True),
    ("--hidden-dropout", "inf", True), ("--hidden-dropout", "1", False), ("--hidden-dropout", "0", False),
    ("--attention-dropout", "1.5", True), ("--attention-dropout", "-1e-9", True), ("--attention-dropout", "1.0", False),
])
def test_a_dropout_torch_refuses_is_refused(flag, value, refused):
    """argparse takes any float; torch's dropout (the oracle, as Megatron calls it) raises outside [0, 1] and, in
    F.dropout (hidden_dropout), on nan. Before, 1.5 and inf planned dropout on, -0.1 and nan off."""
    torch = pytest.importorskip("torch")
    p = float(value)
    if flag == "--hidden-dropout":
        try:
            torch.nn.functional.dropout(torch.ones(2), p=p, training=True)
            torch_refuses = False
        except (ValueError, RuntimeError):
            torch_refuses = True
    else:
        try:
            torch.nn.Dropout(p)
            torch_refuses = False
        except ValueError:
            torch_refuses = True
    assert torch_refuses is refused
    text = f"{BASE} {flag} {value}\n"
    if refused:
        with pytest.raises(BtacalcError, match=f"{flag} \\({flag[2:].replace('-', '_')}\\) takes a probability in "
                                               r"\[0, 1\], got"):
            import_megatron(text, "l.args", devices=8)
    else:
        import_megatron(text, "l.args", devices=8)
