"""hostile35: a hostile campaign on btacalc's command line and readers (twenty-eighth session). Each test is a
finding: the one-line refusal, the file left as it was, or the meaning a reader must give an input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from btacalc.config.hf import load_hf_config

DATA = Path(__file__).parent / "data"


def _spec(tmp_path: Path, folder: str, raw: dict) -> dict:
    """The model btacalc reads from `raw` written as FOLDER/config.json, less its name and source."""
    path = tmp_path / folder / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(raw))
    spec = load_hf_config(path).model_dump()
    for key in ("name", "source"):
        spec.pop(key)
    spec["numerics"] = {k: v for k, v in (spec.get("numerics") or {}).items() if k != "source"} or None
    return spec


# D1: a key the config leaves out takes the value of transformers' configuration class (v5.24.0
# src/transformers/models/<family>/configuration_<family>.py), as AutoConfig.from_pretrained builds the class from the
# file's keys. Each case: (shipped config, changes first, the key left out, the class's default: its line).
# DeepSeek-V3's, GPT-OSS's and GPT-J's class defaults are those models' released values, so a file without the key is
# the released file; the others are compared with the same file stating the class's value.
LEFT_OUT = [
    ("qwen3-8b.config.json", {"hidden_size": 2560}, "head_dim", 128),  # qwen3 L67 (2560 / 32 = 80 was read)
    ("qwen3-8b.config.json", {"num_attention_heads": 64}, "num_key_value_heads", 32),  # qwen3 L66 (64 was read)
    ("qwen2.5-7b.config.json", {"num_attention_heads": 64}, "num_key_value_heads", 32),  # qwen2 L65
    ("qwen3-30b-a3b.config.json", {}, "num_key_value_heads", 4),  # qwen3_moe L85 (32 = one per head was read)
    ("qwen1.5-moe-a2.7b.config.json", {"num_attention_heads": 32}, "num_key_value_heads", 16),  # qwen2_moe L83
    ("qwen1.5-moe-a2.7b.config.json", {}, "shared_expert_intermediate_size", 5632),  # qwen2_moe L97 (0: none, was read)
    ("qwen3-30b-a3b.config.json", {"mlp_only_layers": [0]}, "intermediate_size", 6144),  # qwen3_moe L82 (refused)
    ("qwen1.5-moe-a2.7b.config.json", {"decoder_sparse_step": 2}, "intermediate_size", 5632),  # qwen2_moe L80
    ("mixtral-8x7b.config.json", {"num_key_value_heads": 8}, "num_key_value_heads", 8),  # mixtral L71
    ("llama-3-8b.config.json", {"model_type": "mistral", "architectures": ["MistralForCausalLM"]}, "sliding_window",
     4096),  # mistral L79 (full attention was read)
    ("llama-3-8b.config.json", {"model_type": "mistral", "architectures": ["MistralForCausalLM"],
                                "num_attention_heads": 16}, "num_key_value_heads", 8),  # mistral L67
    ("gpt-oss-120b.config.json", {}, "head_dim", 64),  # gpt_oss L56 (2880 / 64 = 45 was read)
    ("gpt-oss-120b.config.json", {}, "num_key_value_heads", 8),  # gpt_oss L58
    ("gpt-oss-120b.config.json", {}, "rope_scaling", None),  # gpt_oss __post_init__ L89-97: YaRN, factor 32
    ("gpt-j-6b.config.json", {}, "rotary_dim", 64),  # gptj L72 (all of each head rotated was read)
    ("deepseek-v3.config.json", {}, "first_k_dense_replace", 3),  # deepseek_v3 L100 (0: every layer MoE, was read)
    ("deepseek-v3.config.json", {}, "n_shared_experts", 1),  # L88
    ("deepseek-v3.config.json", {}, "q_lora_rank", 1536),  # L93 (no query low-rank projection was read)
    ("deepseek-v3.config.json", {}, "n_group", 8),  # L97
    ("deepseek-v3.config.json", {}, "topk_group", 4),  # L98
    ("deepseek-v3.config.json", {}, "routed_scaling_factor", 2.5),  # L91
]


@pytest.mark.parametrize("source, changes, key, default", LEFT_OUT,
                         ids=[f"{s.split('.config')[0]}-{k}" for s, _, k, _ in LEFT_OUT])
def test_a_config_without_a_key_reads_the_transformers_class_default(tmp_path, source, changes, key, default):
    raw = {**json.loads((DATA / source).read_text()), **changes}
    stated = dict(raw)
    if default is not None:
        stated[key] = default
    else:  # GPT-OSS: the released file's rope_scaling is the class's default YaRN
        assert stated[key] == {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                               "truncate": False, "original_max_position_embeddings": 4096}
    left_out = {k: v for k, v in raw.items() if k != key}
    assert _spec(tmp_path, "left-out", left_out) == _spec(tmp_path, "stated", stated)


def test_a_key_given_as_null_keeps_the_classes_rule_for_none(tmp_path):
    # a guard on D1's fix (it passed before it): the defaults are for keys left out, not for keys given as null
    # the class's __post_init__ (qwen2 L84-85, mistral L83-85): num_key_value_heads None -> num_attention_heads,
    # head_dim None -> hidden / heads; a key given (null too) is never replaced by the class's default
    raw = {**json.loads((DATA / "llama-3-8b.config.json").read_text()), "model_type": "mistral",
           "architectures": ["MistralForCausalLM"], "num_key_value_heads": None, "head_dim": None,
           "sliding_window": None}
    spec = _spec(tmp_path, "nulls", raw)
    assert (spec["num_kv_heads"], spec["head_dim"]) == (32, 4096 // 32) and not spec["sliding_window"]


def _launch(cli, tmp_path: Path, name: str, *replace: tuple[str, str]) -> Path:
    """The Llama 3 8B TP 2 launch btacalc writes, with each (text, by) replaced."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2",
                         "--emit", "megatron")
    assert code == 0, err
    for text, by in replace:
        assert text in out
        out = out.replace(text, by)
    path = tmp_path / name
    path.write_text(out)
    return path


def _plan(cli, *args: str) -> dict:
    code, out, err = cli("plan", "--hw", "h100", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)


def test_a_launch_giving_the_encoder_seq_length_trains_that_length(cli, tmp_path):
    # D2: Megatron-LM @ d98e8a64 megatron/training/arguments.py L1349-1351: without --seq-length, `args.seq_length =
    # args.encoder_seq_length`. The launch was refused "the launch gives no --seq-length". Expected: the plan of the
    # same launch with --seq-length 2048
    encoder = _launch(cli, tmp_path, "encoder.sh", ("--seq-length 4096", "--encoder-seq-length 2048"))
    seq = _launch(cli, tmp_path, "seq.sh", ("--seq-length 4096", "--seq-length 2048"))
    got, want = _plan(cli, "--from-megatron", str(encoder)), _plan(cli, "--from-megatron", str(seq))
    assert got["inputs"]["seq_len"] == 2048
    assert got["throughput"]["step_time_s"] == want["throughput"]["step_time_s"]
    assert got["device_memory"]["allocated_bytes"] == want["device_memory"]["allocated_bytes"]
    assert "--encoder-seq-length" not in [row["flag"] for row in got["imported"]["ignored"]]


def test_a_launch_giving_both_sequence_lengths_is_refused_as_megatron_asserts(cli, tmp_path):
    # D2: arguments.py L1346-1348: with --seq-length given, `assert args.encoder_seq_length is None`. The launch was
    # planned at --seq-length, --encoder-seq-length listed "not modelled"
    both = _launch(cli, tmp_path, "both.sh", ("--seq-length 4096", "--seq-length 4096 --encoder-seq-length 4096"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(both))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--seq-length and --encoder-seq-length together" in err and "L1346-1348" in err


def test_a_launch_padding_the_vocabulary_to_another_width_is_planned_at_that_width(cli, tmp_path):
    # D3: Megatron-LM pads the vocabulary to a multiple of --make-vocab-size-divisible-by x TP (vocab_utils.py L58-59
    # @ d98e8a64). At TP 2 a multiple of 256 pads 128,256 to 512 x 251 = 128,512 (128,256 / 512 = 250.5), not
    # 256 x 501 = 128,256. The launch was planned at 128,256 with the flag listed "ignored"; hostile35 refused it;
    # session 31 plans it (Layout.vocab_multiple): 256 more rows in the embedding and in the untied output layer,
    # each split over TP 2, of h = 4,096 bf16 weights: 256 x 4,096 x 2 / 2 x 2 bytes more weights per rank
    assert 128256 == 256 * 501 and -(-128256 // 512) * 512 == 128512
    path = _launch(cli, tmp_path, "v256.sh", ("--vocab-size 128256",
                                                 "--vocab-size 128256 --make-vocab-size-divisible-by 256"))
    plain = _launch(cli, tmp_path, "plain.sh")
    got, want = _plan(cli, "--from-megatron", str(path)), _plan(cli, "--from-megatron", str(plain))
    assert got["memory_bytes"]["weights"] - want["memory_bytes"]["weights"] == 256 * 4096 * 2 // 2 * 2
    assert got["parallelism"]["vocab_multiple"] == 256
    assert "--make-vocab-size-divisible-by" not in [row["flag"] for row in got["imported"]["ignored"]]


def test_a_launch_padding_the_vocabulary_alike_plans_as_without_the_flag(cli, tmp_path):
    # D3 (a guard on the refusal): a multiple of 64 x TP 2 = 128 pads 128,256 = 128 x 1,002 to itself, as 256 x 501
    path = _launch(cli, tmp_path, "v64.sh", ("--vocab-size 128256",
                                                 "--vocab-size 128256 --make-vocab-size-divisible-by 64"))
    plain = _launch(cli, tmp_path, "plain.sh")
    got, want = _plan(cli, "--from-megatron", str(path)), _plan(cli, "--from-megatron", str(plain))
    assert got["throughput"]["step_time_s"] == want["throughput"]["step_time_s"]
    assert got["device_memory"]["allocated_bytes"] == want["device_memory"]["allocated_bytes"]


def test_a_launch_with_a_vocabulary_multiple_of_0_is_refused_as_megatron_raises(cli, tmp_path):
    # D3: vocab_utils.py L53-54: "make_vocab_size_divisible_by must be positive"
    path = _launch(cli, tmp_path, "v0.sh", ("--vocab-size 128256",
                                                 "--vocab-size 128256 --make-vocab-size-divisible-by 0"))
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "must be positive" in err, err


@pytest.mark.parametrize("seq", [2048, 4096])
def test_a_sweep_with_grad_accum_plans_each_point_as_plan_does(cli, seq):
    # D4: README, sweep: "every point solved as plan solves it". `sweep --grad-accum 4` on GPUs put the option in the
    # request's M but took the points' limits from the request's batch limits without it: every point took the
    # default global batch (4,194,304 tokens: M 64 at seq 2048 on 16 ranks), where `plan --grad-accum 4` fixes M = 4
    # (a fixed size: no default global batch, README's defaults table)
    moe16 = ("--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16")
    code, out, err = cli("sweep", *moe16, "--vary", "seq=2048,4096", "--grad-accum", "4", "--json")
    assert code == 0, err
    point = next(p for p in json.loads(out)["points"] if p["params"]["seq"] == seq)
    code, out, err = cli("plan", *moe16, "--seq", str(seq), "--grad-accum", "4", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert point["plan"]["micro_batches"] == plan["plan"]["micro_batches"] == 4
    for key in ("tiles", "tile_batch", "step_batch"):
        assert point["plan"][key] == plan["plan"][key]
    assert point["throughput"]["tokens_per_s"] == plan["throughput"]["tokens_per_s"]


def _overrides(cli, tmp_path: Path, name: str, drop: str = "", add: str = "") -> Path:
    """The Llama 3 8B TP 2 overrides btacalc writes (`--emit bridge`), less the line `drop`, plus the line `add`."""
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--tp", "2",
                         "--emit", "bridge")
    assert code == 0, err
    lines = out.splitlines()
    assert not drop or drop in lines
    # bridgeparse: the file states the dataset's length beside the model's: dropping the one drops the other
    drops = {drop, drop.replace("model.seq_length", "dataset.seq_length")} if drop else set()
    path = tmp_path / name
    path.write_text("\n".join([line for line in lines if line not in drops] + ([add] if add else [])) + "\n")
    return path


def test_bridge_overrides_whose_dataset_length_differs_from_the_models_are_refused(cli, tmp_path):
    # D5: Megatron-Bridge @ 067f987df src/megatron/bridge/training/config.py L1630-1648: ConfigContainer.validate
    # asserts model.seq_length == dataset.seq_length for GPTDatasetConfig (the pretraining recipes' dataset,
    # recipes/common.py L90-95). The file was planned at 4096, dataset.seq_length listed "ignored: outside the step"
    path = _overrides(cli, tmp_path, "mismatch.txt", add="dataset.seq_length=2048")
    assert "model.seq_length=4096" in path.read_text()
    code, out, err = cli("plan", "--hw", "h100", "--from-bridge", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "model.seq_length=4096 and dataset.seq_length=2048 differ" in err


def test_bridge_overrides_giving_the_dataset_length_alone_train_that_length(cli, tmp_path):
    # D5: a run Bridge accepts has model.seq_length equal to the dataset's (the assertion above), so overrides giving
    # dataset.sequence_length alone train it: the plan of the same overrides with model.seq_length=2048. They were
    # refused "the launch gives no --seq-length"
    alone = _overrides(cli, tmp_path, "alone.txt", drop="model.seq_length=4096", add="dataset.sequence_length=2048")
    model = _overrides(cli, tmp_path, "model.txt", drop="model.seq_length=4096", add="model.seq_length=2048")
    got, want = _plan(cli, "--from-bridge", str(alone)), _plan(cli, "--from-bridge", str(model))
    assert got["inputs"]["seq_len"] == 2048
    assert got["throughput"]["step_time_s"] == want["throughput"]["step_time_s"]
    assert got["device_memory"]["allocated_bytes"] == want["device_memory"]["allocated_bytes"]
    assert "dataset.sequence_length" not in [row["flag"] for row in got["imported"]["ignored"]]


def test_bridge_overrides_without_a_sequence_length_are_refused_by_bridge_key(cli, tmp_path):
    # D5: the refusal named a Megatron-LM flag the file does not use ("the launch gives no --seq-length")
    path = _overrides(cli, tmp_path, "none.txt", drop="model.seq_length=4096")
    code, out, err = cli("plan", "--hw", "h100", "--from-bridge", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "model.seq_length" in err and "--seq-length" not in err


def test_a_cache_key_an_interrupted_first_run_left_empty_is_replaced(tmp_path, monkeypatch):
    # D6: README, "The compiled-formula cache": "the cache never stops a command"; "an interrupted command leaves
    # nothing behind". The key was created at its path (O_EXCL) and then written: a stop in between left it empty,
    # and every later command found a key "not 32 bytes", used no cache and compiled the formulas again (3.3 s a plan
    # instead of 1.6 s here), for good. Expected: the entry written is read back, the key is 32 private bytes, no
    # temporary file is left beside it
    import stat

    from btacalc.catalogue import cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = tmp_path / "btacalc"
    root.mkdir(mode=0o700)
    key = root / "key"
    key.touch(mode=0o600)  # created, its bytes never written
    cache._key.cache_clear()
    try:
        cache.write_entry("probe", b"payload")
        assert cache.read_entry("probe") == b"payload"
        assert len(key.read_bytes()) == 32 and stat.S_IMODE(key.stat().st_mode) == 0o600
        assert sorted(p.name for p in root.iterdir()) == ["compiled", "key"]
    finally:
        cache._key.cache_clear()


@pytest.mark.parametrize("command", ["plan", "compare"])
def test_a_search_with_grad_accum_is_refused_not_dropped(cli, command):
    # D7: README: every option parsed is used; the defaults table: a GPU plan that fixes a batch size (--grad-accum
    # among them) takes no default global batch. `--search --grad-accum 4` ranked every layout at the default batch,
    # each at its own M (the winner TP1 PP2 EP8 at M 64 on 16 H100s), the option dropped in silence: the search ranks
    # one global batch, which a fixed M cannot give every layout (N = DP x M x micro-batch differs with DP)
    code, out, err = cli(command, "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--search",
                         "--grad-accum", "4", "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--grad-accum with --search" in err


def test_a_launch_whose_positions_fall_short_of_its_decoder_length_is_refused(cli, tmp_path):
    # D8: Megatron-LM @ d98e8a64 megatron/training/arguments.py L1357-1358: `assert args.max_position_embeddings >=
    # args.decoder_seq_length` when it is given. The launch (--max-position-embeddings 8192, --decoder-seq-length
    # 100000) was planned, the flag listed "not modelled by btacalc"
    path = _launch(cli, tmp_path, "decoder.sh", ("--seq-length 4096", "--seq-length 4096 --decoder-seq-length 100000"))
    assert "--max-position-embeddings 8192" in path.read_text()
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--decoder-seq-length" in err and "arguments.py:1357" in err
    within = _launch(cli, tmp_path, "within.sh", ("--seq-length 4096", "--seq-length 4096 --decoder-seq-length 2048"))
    plain = _launch(cli, tmp_path, "plain.sh")
    got, want = _plan(cli, "--from-megatron", str(within)), _plan(cli, "--from-megatron", str(plain))
    assert got["throughput"]["step_time_s"] == want["throughput"]["step_time_s"]
