"""bridgeparse: `--emit bridge` run through Megatron-Bridge's own config code (tools/bridge_config_check.py, which
needs the Bridge and Megatron-LM trees; these tests do not). What it found, each derived from the cited Bridge line:

1. A recipe may hold no CommOverlapConfig: `_pretrain_common` sets comm_overlap=None (NVIDIA-NeMo/Megatron-Bridge
   @ 067f987d src/megatron/bridge/recipes/common.py L128) and the Qwen3-30B-A3B pretrain recipes keep it
   (recipes/qwen/h100/qwen3_moe.py L116, commented out). Bridge applies the overrides with OmegaConf in struct mode and
   Hydra's own override code (training/utils/omegaconf_utils.py L163-188 parse_hydra_overrides:
   OmegaConf.set_struct(cfg, True), OverridesParser, ConfigLoaderImpl._apply_overrides_to_config), which refuses
   `comm_overlap.tp_comm_overlap=False` below a None ("Could not override ... use +comm_overlap..."): every file
   `--emit bridge` wrote stopped there. The section is now written with `++` (add or override) and its class as
   `_target_`, which `_apply_overrides` instantiates from the dict (omegaconf_utils.py L478-486).
2. GPTModelProvider sizes a learned position table by seq_length (gpt_provider.py L298
   max_sequence_length=self.seq_length; the provider has no max_position_embeddings), so a model whose table is
   longer than the sequence (Megatron-LM's 7B CI GPT: 8,192 rows, 4,096 tokens) trains 4,096 x h fewer parameters
   under Bridge than the plan counts, without a word: the file now says so.
"""

from __future__ import annotations

import shlex

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

COMM_OVERLAP_CLASS = "megatron.bridge.training.comm_overlap.CommOverlapConfig"  # training/comm_overlap.py
QWEN = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16", "--global-batch", "256",
        "--overlap-grad-reduce")


def _words(text: str) -> list[str]:
    return [w for line in text.splitlines() if line and not line.startswith("#") for w in shlex.split(line)]


def _apply_as_bridge(base: dict, words: list[str]) -> dict:
    """parse_hydra_overrides (omegaconf_utils.py L163-188), step by step."""
    cfg = OmegaConf.create(base)
    OmegaConf.set_struct(cfg, True)
    ConfigLoaderImpl._apply_overrides_to_config(overrides=OverridesParser.create().parse_overrides(overrides=words),
                                                cfg=cfg)
    return OmegaConf.to_container(cfg)


@pytest.fixture
def qwen_words(cli) -> list[str]:
    code, out, err = cli(*QWEN, "--emit", "bridge")
    assert code == 0, err
    return [w for w in _words(out) if w.split("=")[0].lstrip("+").startswith("comm_overlap")]


@pytest.mark.parametrize("recipe", [None, {"tp_comm_overlap": True, "overlap_grad_reduce": False, "bucket_size": 7}],
                         ids=["no-section", "a-CommOverlapConfig"])
def test_comm_overlap_words_apply_over_a_recipe_with_or_without_the_section(qwen_words, recipe):
    """Over `_pretrain_common`'s comm_overlap=None and over a recipe's CommOverlapConfig (deepseek_v3.py L228 and the
    Llama 3 recipes build one) the words apply; the dict carries the class Bridge builds it from, and the plan's
    values (overlap_grad_reduce on, no TP overlap) replace the recipe's."""
    assert qwen_words[0] == f"++comm_overlap._target_={COMM_OVERLAP_CLASS}"
    assert all(w.startswith("++comm_overlap.") for w in qwen_words)
    section = _apply_as_bridge({"comm_overlap": recipe, "train": {"micro_batch_size": 1}}, qwen_words)["comm_overlap"]
    assert section["_target_"] == COMM_OVERLAP_CLASS
    assert section["tp_comm_overlap"] is False and section["overlap_grad_reduce"] is True
    if recipe is not None:
        assert section["bucket_size"] == 7  # a recipe field the file does not give is kept (merged, as Hydra does)


def test_plain_comm_overlap_words_are_what_hydra_refused():
    """The words as btacalc wrote them before: Hydra's struct mode refuses them below a None section."""
    with pytest.raises(Exception, match="Could not override 'comm_overlap.tp_comm_overlap'"):
        _apply_as_bridge({"comm_overlap": None}, ["comm_overlap.tp_comm_overlap=False"])


def test_the_file_reads_back_and_another_target_is_refused(cli, tmp_path):
    code, out, err = cli(*QWEN, "--emit", "bridge")
    assert code == 0, err
    path = tmp_path / "q.txt"
    path.write_text(out)
    code, back, err = cli("plan", "--hw", "h100", "--from-bridge", str(path))
    assert code == 0, err
    assert "comm_overlap._target_" not in back  # the section's class, read: not listed as ignored
    other = tmp_path / "other.txt"
    other.write_text(out.replace(COMM_OVERLAP_CLASS, "megatron.bridge.training.config.DistributedDataParallelConfig"))
    code, _, err = cli("plan", "--hw", "h100", "--from-bridge", str(other))
    assert code == 2 and "CommOverlapConfig" in err and len(err.strip().splitlines()) == 1


def test_a_learned_position_table_longer_than_the_sequence_is_noted(cli):
    """gpt-7b-megatron-ci: 8,192 learned positions, seq 4096, h 4096: Bridge's table has 4,096 rows
    (gpt_provider.py L298), 4,096 x 4,096 = 16,777,216 parameters fewer than the plan counts."""
    code, out, err = cli("plan", "--model", "gpt-7b-megatron-ci", "--hw", "h100", "--devices", "8", "--global-batch",
                         "64", "--emit", "bridge")
    assert code == 0, err
    note = next(line for line in out.splitlines() if "learned position table" in line)
    assert "4,096 rows" in note and "8,192" in note and f"{(8192 - 4096) * 4096:,} fewer parameters" in note
    code, out, err = cli("plan", "--model", "gpt-7b-megatron-ci", "--hw", "h100", "--devices", "8", "--global-batch",
                         "64", "--seq", "8192", "--emit", "bridge")
    assert code in (0, 1), err
    assert "learned position table" not in out  # the table is the sequence: nothing differs


def test_the_dataset_sequence_is_the_models(cli, tmp_path):
    """ConfigContainer.validate() asserts model.seq_length == dataset.seq_length (training/config.py L1628-1644), and
    a recipe's dataset holds its own (recipes/common.py L95: 4096; run_recipe.py L98-99: --seq_length, else 8192): a
    plan at 8192 tokens stopped there. The file states the dataset's length too; read back, a mismatch is refused
    (the reader's check, hostile35)."""
    plan = ("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "32", "--cp", "2", "--ep", "8", "--seq",
            "8192", "--global-batch", "64", "--micro-batch", "1")
    code, out, err = cli(*plan, "--emit", "bridge")
    assert code in (0, 1), err
    words = dict(w.split("=", 1) for w in _words(out))
    assert words["dataset.seq_length"] == words["model.seq_length"] == "8192"
    path = tmp_path / "r.txt"
    path.write_text(out)
    code, back, err = cli("plan", "--hw", "h100", "--from-bridge", str(path))
    assert code in (0, 1), err
    assert "dataset.seq_length" not in back  # read, not listed as ignored
    path.write_text(out.replace("dataset.seq_length=8192", "dataset.seq_length=4096"))
    code, _, err = cli("plan", "--hw", "h100", "--from-bridge", str(path))
    assert code == 2 and "model.seq_length=8192 and dataset.seq_length=4096 differ" in err  # hostile35's refusal


def test_a_bucket_count_is_refused_where_bridge_sets_a_bucket_size(cli):
    """CommOverlapConfig.setup gives the DDP config a bucket size under the distributed optimizer with DP > 1
    (comm_overlap.py L569-583, L636-643: 128 Mi parameters unless comm_overlap.bucket_size), and Megatron-Core asserts
    num_buckets has none (distributed_data_parallel_config.py L275-276 @ d98e8a64): 16 GPUs at TP 1 are DP 16."""
    plan = ("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "16", "--overlap-grad-reduce",
            "--ddp-num-buckets", "4", "--global-batch", "128")
    code, _, err = cli(*plan, "--emit", "bridge")
    assert code == 2 and "give --ddp-bucket-size" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli(*plan, "--emit", "megatron")  # Megatron-LM's launch has no CommOverlapConfig
    assert code in (0, 1) and "--ddp-num-buckets 4" in out, err
    code, _, err = cli(*plan, "--zero", "0", "--emit", "bridge")  # no distributed optimizer: no bucket size is set
    assert code in (0, 1), err
