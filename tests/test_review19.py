"""review19 (a second engineer's review of the nineteenth session's diff): a launch's
--num-layers-per-virtual-pipeline-stage as Megatron-LM reads it.

Megatron-LM @ d98e8a64 megatron/training/arguments.py L953-975: without --num-virtual-stages-per-pipeline-rank, the
virtual pipeline is ((L + 1 per account-for flag) / PP) / layers per virtual stage, asserting that PP divides the
layers (L968-969), that the layers per stage divide by the flag (L972-973) and that no uneven first or last stage
is given (L955-956); L928-938 allow one way of giving the virtual pipeline. btacalc planned a launch with 32 layers,
PP 2 and 5 layers per virtual stage as VP 3 (16 // 5), where Megatron stops, and left the account-for flags out of
the division."""

from __future__ import annotations

import json


def _launch(cli, tmp_path, *extra: str, drop: tuple[str, ...] = ()) -> str:
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--pp", "2",
                         "--global-batch", "64", "--emit", "megatron")
    assert code == 0, err
    lines = [line for line in out.splitlines() if not any(line.strip().startswith(d) for d in drop)]
    text = "\n".join(lines).replace("--pipeline-model-parallel-size 2", "--pipeline-model-parallel-size 2 " +
                                    " ".join(extra))
    path = tmp_path / "run.sh"
    path.write_text(text + "\n")
    return str(path)


def test_layers_per_virtual_stage_that_do_not_divide_the_stage_are_refused(cli, tmp_path):
    path = _launch(cli, tmp_path, "--num-layers-per-virtual-pipeline-stage", "5")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "must divide by --num-layers-per-virtual-pipeline-stage" in err and "arguments.py:972" in err


def test_layers_per_virtual_stage_give_the_virtual_pipeline(cli, tmp_path):
    """32 layers over PP 2: 16 per stage, 4 per virtual stage -> VP 4."""
    path = _launch(cli, tmp_path, "--num-layers-per-virtual-pipeline-stage", "4")
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", path, "--json")
    assert code in (0, 1), err
    assert json.loads(out)["parallelism"]["virtual_pipeline"] == 4


def test_the_account_for_flags_join_the_division():
    """31 layers + the embedding + the loss = 33 over PP 3: 11 per stage, 11 per virtual stage -> VP 1, and no rule
    broken; without the flags 31 would not divide over PP 3."""
    from btacalc.config.megatron_rows import Get
    from btacalc.config.megatron_codec import _dec_pipeline
    from btacalc.config.megatron_rules import violations

    args = {"num_layers": 31, "pipeline_model_parallel_size": 3, "num_layers_per_virtual_pipeline_stage": 11,
            "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    assert _dec_pipeline(Get(args))["layout.virtual_pipeline"] == 1
    base = {"hidden_size": 2048, "num_attention_heads": 32, "seq_length": 4096, "max_position_embeddings": 4096,
            "micro_batch_size": 1, "global_batch_size": 64, "world": 48, "tensor_model_parallel_size": 1,
            "context_parallel_size": 1, "bf16": True, "add_bias_linear": False}
    assert [r.name for r in violations({**base, **args}, {})] == []
    args_11 = {**args, "num_layers_per_virtual_pipeline_stage": 1}  # 11 per stage, 1 per virtual stage -> VP 11
    assert _dec_pipeline(Get(args_11))["layout.virtual_pipeline"] == 11


def test_a_file_name_holding_braces_is_printed_as_given(cli, tmp_path):
    """review19 #8: a refusal quoting a file named `{seq_len}.sh` rendered its braces as btacalc's --seq flag
    (`--seq.sh: ...`); the command line's own words are kept as they are (BtacalcError.render's `literals`)."""
    code, out, err = cli("plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--tp", "2", "--emit",
                         "megatron")
    path = tmp_path / "{seq_len}.sh"
    path.write_text(out.replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 16"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{path}: --tensor-model-parallel-size 16 does not divide" in err and "--seq.sh" not in err


def test_render_keeps_literals_and_renders_the_rest():
    from btacalc.errors import BtacalcError

    exc = BtacalcError("{seq_len}.sh: give {seq_len} 4096 ({tensor_parallel} 2)")
    names = {"seq_len": "--seq", "tensor_parallel": "--tp"}
    assert exc.render(names) == "--seq.sh: give --seq 4096 (--tp 2)"
    assert exc.render(names, ["{seq_len}.sh", "plan"]) == "{seq_len}.sh: give --seq 4096 (--tp 2)"
