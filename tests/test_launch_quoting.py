"""A launch's words as bash passes them: variables and arithmetic expand outside single quotes and stay as
written inside them (bash manual, "Single Quotes" and "Double Quotes"). The expected words come from bash itself
(`printf '%s\\n' WORD` after the same assignments), not from btacalc."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from btacalc.config.megatron_launch import read_launch
from btacalc.config.megatron_run import import_megatron
from btacalc.errors import BtacalcError

SET = ("L=32\nD=/data\nB=( '$L' )\n"
       # hostile22: several assignments on one line, declaring builtins, an empty value
       "export X=7 Y=8\nP=1; Q=2\nreadonly R=6\ndeclare -i I=5\nE=\n"
       # hostile23: an array of two, a scalar appended to, an array given a scalar (its first element)
       "C=( 4 8 )\nC+=( 16 )\nK=3\nK+=2\nZ=( 1 2 )\nZ=9\n")
WORDS = ["'$L'", '"$L"', "$L", "a\"$L\"'$L'b$L", "'${L:-4}'", "\"'$L'\"", "'$((L*2))'", "$((L*2))",
         "\"a'b\"$D", "'\"$D\"'", "\\'$L",
         # review19: a default's quotes ("${U:-'4'}" was left unexpanded), escaped dollars, ANSI-C quoting, an array
         # element's own `$L` (expanded a second time), a default's variables (not expanded)
         "${U:-'4'}", "${L:-'4'}", "${U:-'$L'}", "${U:-a'$L'b}", "${U:-$L}", "\"${U:-$D}\"", "\\$L", "\"\\$L\"",
         "\"\\\\\"$L", "\\\\'$L'", "$'\\x41'", "$'a\\'b$L'", "$'\\101\\t'", "\"$'x'\"", "\"${B[@]}\"", "${B[@]}",
         # hostile22: a `#` inside a word is no comment (shlex's was: the rest of the line was dropped); the other
         # parameter expansions (`+`, `?`, `=`, and `-` without the colon; `:-` of an empty value); several
         # assignments on a line; `readonly` and `declare`
         "a#b", "x'#'y", "a\\ #b", "$L#", "${L:+y}", "x${U:+y}", "x${E+y}", "${L:?m}", "${U=9}", "${E:=9}", "${E:-d}",
         "x${E-d}", "${U-$L}", "$X$Y", "$P$Q", "$R$I",
         # hostile22: bash arithmetic's `**` and `%` (refused "BinOp is not integer arithmetic", kept as written)
         "$((2**10))", "$((L%5))", "$((L**2))", "$((-7%3))",
         # hostile22: a positional parameter is unset in a script run without arguments (kept as written)
         "${1:-32}", "x${2-y}", "${1:-$L}",
         # hostile23: each was kept as written, every element (an array's $NAME), joined with a blank (`+=`) or read
         # by Python's precedence (-2**2 was -4, 010 refused, 7//2 read as 3 and refused now: test_bad_input)
         "${#L}", "${#C[@]}", "${#C}", "$C", "${C}", "${C[1]}", "${C[2]}", "x${C[5]}y", "${C[5]-d}", "${C[@]}",
         "\"${C[@]}\"", "${C[*]}", "$K", "\"${Z[@]}\"", "$((-2**2))", "$((-L**2))", "$((-(2**2)))", "$((2*-3**2))",
         "$((010))", "$((+3))", "$((- -2**2))", "$((2**3**2))", "$[L*2]", "$[2+3]", '$"abc"', "x$#", "$#"]


def _bash(word: str) -> str:
    out = subprocess.run(["bash", "-c", SET.replace("\n", "; ") + f"printf '%s\\n' {word}"],
                         capture_output=True, text=True, check=True)
    return " ".join(out.stdout.rstrip("\n").split("\n"))  # the words bash passes (an array's are several)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is the oracle")
def test_arguments_are_none_as_the_script_reads_when_run_without_them():
    """hostile23: "$@" (a launch passing its arguments on) was refused as a word without its flag; a script run
    without arguments passes nothing, as `bash train.sh` does, and the note says so."""
    text = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
            "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --bf16 "
            '--vocab-size 1000 "$@"\n')
    run = import_megatron(text, "l.sh")
    assert run.model.num_layers == 2
    assert any("passes its arguments on ($@)" in note for note in run.notes)


@pytest.mark.parametrize("word", WORDS)
def test_a_launch_word_reads_as_bash_passes_it(word):
    launch = read_launch(SET + f"torchrun pretrain_gpt.py --data-path {word} --num-layers 2\n")
    assert " ".join(launch.args["data_path"]) == _bash(word)


def test_a_single_quoted_variable_is_refused_as_megatron_would_refuse_it():
    # was planned as 32 layers: bash passes the four characters $L and Megatron's argparse refuses them
    text = SET + ("torchrun pretrain_gpt.py --num-layers '$L' --hidden-size 256 --num-attention-heads 4 "
                  "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 1000\n")
    with pytest.raises(BtacalcError, match=r"--num-layers \(num_layers\) takes an integer, got '\$L'.*single quotes"):
        import_megatron(text, "l.sh", devices=8)
    assert import_megatron(text.replace("'$L'", '"$L"'), "l.sh", devices=8).model.num_layers == 32
