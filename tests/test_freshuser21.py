"""freshuser21: btacalc used as a new MoE user would, from its README (docs/story.md "freshuser21").

Each test pins one defect found that way; the expected values are arithmetic from the input given, not btacalc's
own output.
"""

from __future__ import annotations

import json

# A launch written as Megatron-LM's multi-node examples write theirs: the node count is the scheduler's
# (`NNODES=${SLURM_NNODES:-1}`), unset in the file, so read as written it starts 8 processes; PP 4 x EP 8 = 32
# needs 4 nodes of 8. Megatron-LM's own examples/mixtral/train_mixtral_8x7b_distributed.sh @ d98e8a64 has this form
# (L9-12 NNODES=${SLURM_NNODES:-"1"}, L21-27 torchrun's --nnodes $NNODES, L86-88 PP 4, EP 8).
SCHEDULED = """#!/bin/bash
PER_NODE=8
NNODES=${SLURM_NNODES:-1}
LAUNCHER=(--nproc_per_node $PER_NODE --nnodes $NNODES)
torchrun ${LAUNCHER[@]} pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
    --group-query-attention --num-query-groups 8 --seq-length 4096 --max-position-embeddings 32768 \\
    --normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights \\
    --disable-bias-linear --vocab-size 32000 --attention-dropout 0.0 --hidden-dropout 0.0 \\
    --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall \\
    --micro-batch-size 1 --global-batch-size 256 --bf16 \\
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --expert-model-parallel-size 8 \\
    --use-distributed-optimizer
"""


def _launch(tmp_path, text=SCHEDULED):
    path = tmp_path / "launch.sh"
    path.write_text(text)
    return str(path)


def test_devices_set_a_node_count_the_launch_leaves_to_its_scheduler(cli, tmp_path):
    """The run's size is SLURM_NNODES x 8: `--devices 32` is the 4-node run the script is written for. Before, it was
    refused ("--devices 32 contradicts the launch's torchrun (8 processes)"), and without it the launch was refused
    as PP 4 x EP 8 not dividing 8: no way to plan the file as it runs."""
    code, out, err = cli("plan", "--hw", "b200", "--from-megatron", _launch(tmp_path), "--devices", "32", "--json")
    assert code in (0, 1), err
    doc = json.loads(out)
    par = doc["parallelism"]
    assert par["devices"] == 32 and par["pipeline_parallel"] == 4 and par["expert_parallel"] == 8
    assert par["data_parallel"] == 32 // 4  # DP = devices / (TP 1 x PP 4 x CP 1)
    assert any("SLURM_NNODES" in note for note in doc["imported"]["notes"])


def test_the_scheduler_default_is_named_when_it_does_not_divide(cli, tmp_path):
    """Without --devices the launch runs SLURM_NNODES's default, 1 node of 8: PP 4 x EP 8 = 32 does not divide 8,
    and the refusal says where the 8 came from and how to give the run's size."""
    code, _, err = cli("plan", "--hw", "b200", "--from-megatron", _launch(tmp_path))
    assert code == 2
    assert "SLURM_NNODES" in err and "--devices" in err and len(err.strip().splitlines()) == 1


def test_a_count_no_node_count_gives_is_refused(cli, tmp_path):
    """torchrun starts --nproc_per_node 8 processes on each node, fixed by the file: 12 devices is no number of
    8-process nodes (12 / 8 is not whole), so it is refused naming the 8."""
    code, _, err = cli("plan", "--hw", "b200", "--from-megatron", _launch(tmp_path), "--devices", "12")
    assert code == 2
    assert "--nproc_per_node 8" in err


def test_a_launch_that_sets_its_node_count_still_refuses_another(cli, tmp_path):
    """The same launch with NNODES=4 written in the file: torchrun starts 4 x 8 = 32 processes, and --devices 64
    contradicts the file, as before."""
    text = SCHEDULED.replace("NNODES=${SLURM_NNODES:-1}", "NNODES=4")
    code, _, err = cli("plan", "--hw", "b200", "--from-megatron", _launch(tmp_path, text), "--devices", "64")
    assert code == 2 and "contradicts" in err and "32 processes" in err


def _caption_words(out: str, title: str) -> str:
    """The words under the table titled `title`, up to the next table, as one line."""
    lines = out.split(title, 1)[1].splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith(("One decoder layer", "Memory per")))
    return " ".join(" ".join(lines[:end]).split())


def test_zero_0_says_it_shards_nothing(cli, monkeypatch):
    """Under --zero 0 every data-parallel rank holds its whole shard: each divisor is 1 (16 GPUs, EP 16: the
    non-expert optimizer state 1,541,093,376 params x 12 B, undivided, 18.49 GB). The caption read "divisor: ZeRO-0
    shards over DP·CP = 16 (non-expert) or EDP = 1 (expert) ranks", a division by 16 the table does not make."""
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16",
                         "--zero", "0")
    assert code in (0, 1), err
    caption = _caption_words(out, "Training state per device")
    assert "shards over" not in caption
    assert "ZeRO-0 shards nothing" in caption
    code, out, err = cli("plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--zero", "0")
    assert code in (0, 1), err
    assert "shards over" not in _caption_words(out, "Training state per device")


def test_zero_1_still_names_its_ranks(cli, monkeypatch):
    """ZeRO-1 on 16 GPUs at EP 16: the optimizer state of the non-expert parameters over DP·CP = 16 x 1 ranks,
    of the experts over EDP = 16 / (EP 16 x ETP 1) = 1."""
    monkeypatch.setenv("COLUMNS", "160")
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16")
    assert code in (0, 1), err
    caption = _caption_words(out, "Training state per device")
    assert "ZeRO-1 shards over DP·CP = 16 (non-expert) or EDP = 1 (expert) ranks" in caption


def test_the_ep_default_is_what_plan_takes(cli, monkeypatch):
    """16 GPUs, PP 4, Qwen3-30B-A3B's 128 experts, TP 1: EP = gcd(16 / (ETP 1 x PP 4), 128) = gcd(4, 128) = 4, as
    plan takes it; the help said gcd(devices, E) = gcd(16, 128) = 16, which does not even fit beside PP 4
    (16 x 4 = 64 > 16 GPUs)."""
    import math

    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--pp", "4", "--json")
    assert code in (0, 1), err
    assert json.loads(out)["parallelism"]["expert_parallel"] == math.gcd(16 // (1 * 4), 128) == 4
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("plan", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "[default: gcd(devices / (ETP·PP), E)" in text and "gcd(devices, E)" not in text


# One valid value for each run option a launch leaves to the command line (README "Launches in and out": the
# device count, the NVLink domain, the accounting, causal or full scores, the loss btacalc writes as a comment, the
# routing imbalance and the caps).
BESIDE_A_LAUNCH = {"--hw": "b200", "--devices": "32", "--gpus-per-node": "8", "--accounting": "pytorch",
                   "--causal": None, "--loss": "stored", "--routing-imbalance": "1.2", "--max-global-batch": "256",
                   "--max-tile-batch": "4", "--fp8-attention": None}


def test_the_refusal_of_a_run_option_beside_a_launch_names_every_option_it_takes(cli, tmp_path):
    """`--seq` beside a launch is refused ("the file gives the run"), and the refusal lists what may be added. It
    named --hw, --devices and --fp8-attention only, though --routing-imbalance, --gpus-per-node, --accounting,
    --causal, --loss and the two caps are taken too (plan.IMPORT_KEEPS): each option it names is taken here."""
    path = _launch(tmp_path)
    code, _, err = cli("plan", "--hw", "b200", "--from-megatron", path, "--devices", "32", "--seq", "2048")
    assert code == 2
    listed = err.split("only ", 1)[1].split(" and how to solve", 1)[0].split(", ")
    assert sorted(listed) == sorted(BESIDE_A_LAUNCH)
    for flag, value in BESIDE_A_LAUNCH.items():
        extra = [flag] + ([value] if value else [])
        if flag in ("--hw", "--fp8-attention"):  # given in every run; FP8 attention needs an FP8 launch (below)
            continue
        if flag != "--devices":
            extra = ["--devices", "32"] + extra
        code, _, err = cli("plan", "--hw", "b200", "--from-megatron", path, *extra)
        assert code in (0, 1), (flag, err)
    fp8 = tmp_path / "fp8.sh"
    fp8.write_text(SCHEDULED.replace("--bf16", "--bf16 --fp8-format hybrid --fp8-recipe tensorwise"))
    code, _, err = cli("plan", "--hw", "b200", "--from-megatron", str(fp8), "--devices", "32", "--fp8-attention")
    assert code in (0, 1), err


# Qwen3-30B-A3B on 16 GPUs at EP 8 without recomputation: the state alone is 3.08 + 7.25 GB of 16-bit weights,
# 6.16 + 14.50 GB of fp32 gradients and 1.16 + 21.74 GB of optimizer state (1,541,093,376 non-expert parameters,
# 16 x 48 x 3 x 2048 x 768 = 3,623,878,656 expert ones; x 2, x 4, and x 12 over DP 16 or EDP 2) = 53.9 GB, and the
# activations of 48 layers of one 4,096-token sequence take the rest past an H100's usable 79.17 GB.
QWEN3_EP8 = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\
    --num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144 --num-attention-heads 32 --kv-channels 128 \\
    --group-query-attention --num-query-groups 4 --qk-layernorm --seq-length 4096 --max-position-embeddings 40960 \\
    --normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights \\
    --disable-bias-linear --vocab-size 151936 --attention-dropout 0.0 --hidden-dropout 0.0 \\
    --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768 --moe-grouped-gemm \\
    --moe-token-dispatcher-type alltoall --micro-batch-size 1 --global-batch-size 512 --bf16 \\
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 8 \\
    --use-distributed-optimizer
"""


def test_what_would_fit_a_launch_names_the_launchs_flags_and_they_fit(cli, tmp_path):
    """The launch does not fit (exit 1), and "What would fit" said `--recompute full` and `--seq N`, btacalc's options,
    which plan refuses beside the file. Each suggestion now names the launch's flags, and the launch with them
    fits (exit 0); the third sends a search to the model, not the file."""
    path = _launch(tmp_path, QWEN3_EP8)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", path, "--json")
    assert code == 1, err
    tips = json.loads(out)["suggestions"]
    assert not any(t.startswith(("--recompute ", "--seq ", "--search ")) for t in tips), tips
    changes = [t.split(" fits ")[0].split(" (")[0] for t in tips if t.startswith("--")]
    assert changes[0] == "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    assert changes[1].startswith("--seq-length ")
    assert any(t.startswith("plan --search, given the model") for t in tips)
    for change in changes:
        fixed = tmp_path / "fixed.sh"
        text = QWEN3_EP8.replace("--seq-length 4096 ", "") if change.startswith("--seq-length") else QWEN3_EP8
        fixed.write_text(text.replace("--bf16", "--bf16 " + change))
        code, _, err = cli("plan", "--hw", "h100", "--from-megatron", str(fixed))
        assert code == 0, (change, err)


def test_what_would_fit_a_bridge_file_names_its_keys(cli, tmp_path):
    """The same run as Megatron-Bridge overrides (written by --emit bridge): the suggestions name Bridge's keys."""
    path = _launch(tmp_path, QWEN3_EP8)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", path, "--emit", "bridge")
    assert code == 1, err
    bridge = tmp_path / "overrides.txt"
    bridge.write_text(out)
    code, out, err = cli("plan", "--hw", "h100", "--model", "qwen3-30b-a3b", "--from-bridge", str(bridge), "--json")
    assert code == 1, err
    tips = json.loads(out)["suggestions"]
    assert tips[0].startswith("model.recompute_granularity=full model.recompute_method=uniform "
                              "model.recompute_num_layers=1 fits"), tips
    assert tips[1].startswith("model.seq_length="), tips


def test_the_schema_says_what_plan_tokens_per_step_counts(cli):
    """Qwen3-30B-A3B on 16 H100s at EP 16: one sequence of 4,096 tokens per micro-batch, M = 64 micro-batches on each
    of 16 data-parallel ranks, 16 x 64 x 4,096 = 4,194,304 tokens per step. `plan.tokens_per_step` is the 4,096, which
    its schema called "G*b*s, per device": a device's step runs 64 of them."""
    code, out, err = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16", "--json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert plan["tokens_per_step"] == 1 * 4096 and plan["micro_batches"] == 64
    assert plan["cluster_tokens_per_step"] == 16 * 64 * 4096 == 4_194_304
    code, out, _ = cli("plan", "--schema")
    schema = json.loads(out)
    described = schema["$defs"]["PlanInfo"]["properties"]["tokens_per_step"]["description"]
    assert "per device" not in described and "one micro-batch of one data-parallel rank" in described


# Megatron-LM runs a micro-batch's sequences through attention at once: it has no attention tiles (BTA). Qwen3-30B-A3B
# on 16 H100s at EP 16 under full recomputation, 8 sequences per micro-batch, 1,024 per step.
UNTILED = QWEN3_EP8.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 16").replace(
    "--micro-batch-size 1 --global-batch-size 512", "--micro-batch-size 8 --global-batch-size 1024").replace(
    "--use-distributed-optimizer",
    "--use-distributed-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1")


def test_a_launch_is_planned_untiled(cli, tmp_path):
    """--micro-batch-size 8 is G x b = 1 x 8: before, the plan tiled it (G = 2, b = 4), a run Megatron cannot make, and
    said it fits; planned as it runs, its verdict is the plan's of --tiles 1 --micro-batch 8 for the same run."""
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", _launch(tmp_path, UNTILED), "--json")
    assert code in (0, 1), err
    plan = json.loads(out)["plan"]
    assert (plan["tiles"], plan["tile_batch"]) == (1, 8)
    assert plan["step_batch"] == 16 * plan["micro_batches"] * 8 == 1024  # DP 16 x M 8 x 8
    code2, out2, err2 = cli("plan", "--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16",
                            "--recompute", "full", "--micro-batch", "8", "--global-batch", "1024", "--tiles", "1",
                            "--json")
    assert code2 == code and json.loads(out2)["plan"]["fits"] == plan["fits"], err2


def test_emit_megatron_writes_a_micro_batch_that_fits_untiled(cli, tmp_path):
    """The fastest plan tiled attention (G x b = 2 x 4 of qwen3-30b-a3b here) and the launch wrote --micro-batch-size 8,
    which Megatron runs untiled. The launch is now the plan at G = 1 with the same step batch, 4,194,304 / 4,096 =
    1,024 sequences, and read back it plans the same micro-batch, untiled, and fits."""
    given = ["--model", "qwen3-30b-a3b", "--hw", "h100", "--devices", "16", "--ep", "16", "--recompute", "full"]
    code, out, err = cli("plan", *given, "--json")
    assert code == 0, err
    assert json.loads(out)["plan"]["tiles"] > 1  # the case: the fastest plan tiles
    code, launch, err = cli("plan", *given, "--emit", "megatron")
    assert code == 0, err
    words = launch.split()
    micro = int(words[words.index("--micro-batch-size") + 1])
    assert int(words[words.index("--global-batch-size") + 1]) == 4_194_304 // 4096
    path = tmp_path / "launch.sh"
    path.write_text(launch)
    code, out, err = cli("plan", "--hw", "h100", "--from-megatron", str(path), "--json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert (plan["tiles"], plan["tile_batch"]) == (1, micro) and plan["fits"]


def test_a_launch_emitted_again_names_the_flags_it_does_not_carry(cli, tmp_path):
    """Megatron-LM's Qwen3-30B-A3B settings (examples/post_training/modelopt/conf/Qwen/Qwen3-30B-A3B.sh @ d98e8a64:
    --moe-aux-loss-coeff 1e-3, --moe-router-dtype fp32) read with --from-megatron and emitted again: btacalc models
    neither, so the launch it writes leaves them out. It said so nowhere, and said the aux loss "stays at Megatron-LM's
    default (--moe-aux-loss-coeff 0)" as if the launch had none; now one comment names both (and not --lr, which the
    launch writes)."""
    text = QWEN3_EP8.replace("--bf16", "--bf16 --moe-aux-loss-coeff 1e-3 --moe-router-dtype fp32 --lr 3e-4 "
                                       "--train-iters 1000 --recompute-granularity full --recompute-method uniform "
                                       "--recompute-num-layers 1")
    code, launch, err = cli("plan", "--hw", "h100", "--from-megatron", _launch(tmp_path, text), "--emit", "megatron")
    assert code == 0, err
    comments = [line for line in launch.splitlines() if line.startswith("#")]
    carried = [line for line in comments if "does not carry them" in line]
    # fu22: the coefficient is the model's now (read back and written again); the router's dtype is still not carried
    assert len(carried) == 1 and "--moe-aux-loss-coeff" not in carried[0] and "--moe-router-dtype" in carried[0]
    assert "--moe-aux-loss-coeff 0.001" in [line.strip().rstrip("\\").strip() for line in launch.splitlines()]
    assert "--lr" not in carried[0].split() and "--lr" in launch.split()
    assert not any("--moe-aux-loss-coeff 0" in line for line in comments)
    # review29: the coefficient is the model's since freshuser22 (ModelSpec.aux_loss_coeff, which --emit writes), so a
    # launch read back carries the one it gave (argparse's float of 1e-3 is 0.001) and no comment lists it
    assert "--moe-aux-loss-coeff" not in carried[0] and "--moe-aux-loss-coeff 0.001" in launch
    # freshuser22: the qwen3-30b-a3b preset now states its config.json's router_aux_loss_coef (the launch carries
    # it); a preset whose source gives none still says the launch trains Megatron-LM's 0
    code, launch, err = cli("plan", "--model", "moe-toy-megatron-ci", "--hw", "h100", "--devices", "8", "--ep", "4",
                            "--emit", "megatron")
    assert code == 0 and "does not carry" not in launch, err  # a plan of options: nothing was read
    assert "(--moe-aux-loss-coeff 0)" in launch
