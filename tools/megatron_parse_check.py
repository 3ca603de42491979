"""Feed btacalc's `--emit megatron` launches to Megatron-LM's REAL argument parser (a developer check outside the
test suite: it needs a Megatron-LM source tree, which btacalc does not depend on; nothing imports this file).

    git --git-dir=MIRROR archive d98e8a64 | tar -x -C /tmp/megatron-lm     # or a checkout at that commit
    python tools/megatron_parse_check.py /tmp/megatron-lm [--no-validate] [--again] [--configs] [--only TEXT]

For each launch of `launches()` (btacalc plan options, run as `python -m btacalc plan ... --emit megatron` from
this checkout) it sets sys.argv to the flags after pretrain_gpt.py and the environment to the launch's exports
plus WORLD_SIZE (torchrun's nproc_per_node x nnodes, checked against the plan's --devices) and RANK=0, calls
megatron.training.arguments.parse_args(ignore_unknown_args=False), checks that each flag parsed to the argparse
dest btacalc's flag table names and to the value written, then calls validate_args(args, pretrain_gpt.py's
args_defaults) and checks that it left every emitted flag's value as parsed. One line per launch: `ok`,
`parse: <argparse's error>`, `value: ...`, `validate: <Megatron's error>`, `changed by validate_args: ...`,
`config: ...` or `skip` (btacalc refuses the plan, exit 2); exit 1 when any launch fails. --again also reads
each passing launch back (--from-megatron) and checks the launch emitted from it; --configs also builds
pretrain_gpt.py's GPTModelConfig and config container (TransformerConfig.__post_init__ and the DDP / optimizer
configs).

What is not Megatron's code (nothing of Megatron's logic is replaced):
- typing.override is backported from typing_extensions (Megatron needs Python >= 3.12, pyproject.toml L26;
  btacalc's venv is 3.11 and the machine's torch wheel is cp311);
- `triton` (a GPU compiler with no small pure-Python build) is an import-only stand-in: megatron/core/__init__
  imports moe/ops/paged_stash.py, which defines @triton.jit kernels at import time; no kernel is ever run, and
  torch's own triton probes run first, so torch still sees no triton;
- validate_args asks the GPU (arguments.py L1379 torch.cuda.get_device_capability under --moe-grouped-gemm;
  L1454, L1484 and L1524 get_device_arch_version, training/utils/common_utils.py L529
  torch.cuda.get_device_properties), which CPU torch cannot answer ("Torch not compiled with CUDA enabled"):
  those two torch.cuda queries report the plan's GPU (A100 8.0, H100 9.0, B200/GB200 10.0);
- without Transformer Engine Megatron reads TE's version as 0.0.0 (core/utils.py L296-324) and TE-gated asserts
  fire (arguments.py L1108, L1613, L1622, L1907-1938): Megatron's cached version is set to TE_VERSION, the TE
  btacalc's precision model follows (btacalc/data/te_releases.toml);
- with --configs, the rope fusion is read as off (see _configs).
--no-validate runs the parser alone, which needs only the first two.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.abc
import importlib.machinery
import io
import json
import logging
import math
import os
import shlex
import subprocess
import sys
import tempfile
import types
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TE_VERSION = "2.20.0.dev0"
ARCH = {"a100": (8, 0), "a100-80gb": (8, 0), "h100": (9, 0), "h200": (9, 0), "b200": (10, 0), "gb200": (10, 0)}
ARGS_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}  # pretrain_gpt.py L527


# ---------------------------------------------------------------------------------------------------- the launches

def _preset_launches() -> list[tuple[str, str]]:
    """Every shipped preset that --emit megatron takes, on 8 H100s (EP = gcd(E, 8) for an MoE model)."""
    sys.path.insert(0, str(ROOT))
    from btacalc.config.presets import load_preset

    out = []
    for path in sorted((ROOT / "btacalc" / "data" / "presets").glob("*.toml")):
        spec = load_preset(path.stem)
        ep = f" --ep {math.gcd(spec.num_experts, 8)}" if spec.num_experts > 1 else ""
        out.append((f"preset-{path.stem}", f"--model {path.stem} --hw h100 --devices 8{ep} --global-batch 64"))
    return out


Q = "--model qwen3-30b-a3b"
L8 = "--model llama-3-8b"
DS = "--model deepseek-v3"
MX = "--model mixtral-8x7b"
OSS = "--model gpt-oss-20b"
PRECISIONS = ("bf16", "fp8", "fp8-current", "fp8-blockwise", "mxfp8", "nvfp4")
GPUS = ("a100-80gb", "h100", "b200", "gb200")

SWEEP = [
    # layouts: TP / SP / PP / VP / CP / EP / ETP
    ("q-tp2-pp4-vp4-ep8-a2a", f"{Q} --hw h100 --devices 64 --tp 2 --pp 4 --vp 4 --ep 8 --global-batch 1024 "
                              "--overlap-a2a"),
    ("l8-tp2-nosp", f"{L8} --hw h100 --devices 16 --tp 2 --no-sequence-parallel --global-batch 128"),
    ("q-tp2-etp2", f"{Q} --hw h100 --devices 32 --tp 2 --ep 8 --etp 2 --global-batch 256 --micro-batch 1"),
    ("q-cp2-ep8", f"{Q} --hw h100 --devices 32 --cp 2 --ep 8 --seq 8192 --global-batch 64 --micro-batch 1"),
    ("q-cp4-tp2", f"{Q} --hw b200 --devices 64 --cp 4 --tp 2 --ep 8 --seq 32768 --global-batch 64 --micro-batch 1"),
    ("q-pp2-first-last", f"{Q} --hw h100 --devices 32 --pp 4 --ep 8 --first-stage-layers 10 --last-stage-layers 10 "
                         "--global-batch 256 --micro-batch 1"),
    ("q-pp4-first-only", f"{Q} --hw h100 --devices 32 --pp 4 --ep 8 --first-stage-layers 9 --global-batch 256"),
    ("q-pp4-last-only", f"{Q} --hw h100 --devices 32 --pp 4 --ep 8 --last-stage-layers 9 --global-batch 256"),
    ("q-pp2-vp5-emb-loss", f"{Q} --hw h100 --devices 32 --pp 2 --vp 5 --ep 8 --account-for-embedding-in-pipeline-split "
                           "--account-for-loss-in-pipeline-split --global-batch 256 --micro-batch 1"),
    ("l8-layout-vp2", f"{L8} --hw h100 --devices 16 --pp 2 --vp 2 --pipeline-layout Et*8|t*8|t*8|t*8L "
                      "--global-batch 256 --micro-batch 1"),
    ("l8-layout-pp4", f"{L8} --hw h100 --devices 32 --pp 4 --tp 2 --pipeline-layout Et*7|t*9|t*9|t*7L "
                      "--global-batch 256 --micro-batch 1"),
    ("ds-layout-mtp", f"{DS} --hw b200 --devices 256 --pp 4 --ep 64 --mtp --recompute full "
                      "--pipeline-layout Et*15|t*16|t*16|t*14mL --global-batch 512 --micro-batch 1"),
    ("l8-tp2-pp2-vp2-nop2p", f"{L8} --hw h100 --devices 16 --tp 2 --pp 2 --vp 2 --no-overlap-p2p --global-batch 256"),
    ("l70-tp8-pp4", "--model llama-3-70b --hw h100 --devices 64 --tp 8 --pp 4 --global-batch 512 --micro-batch 1 "
                    "--recompute full --grad-bytes 2"),
    ("gpt3-tp4-pp8-vp6", "--model gpt3-175b --hw h100 --devices 128 --tp 4 --pp 8 --vp 6 --seq 2048 --global-batch 256 "
                         "--micro-batch 1 --recompute none --overlap-grad-reduce --overlap-param-gather"),
    ("dense-etp", f"{L8} --hw h100 --devices 16 --tp 2 --global-batch 128 --micro-batch 1"),
    # recompute
    ("q-recompute-selective", f"{Q} --hw h100 --devices 16 --ep 16 --recompute selective --global-batch 256"),
    ("q-recompute-full", f"{Q} --hw h100 --devices 16 --ep 16 --recompute full --global-batch 256"),
    ("q-recompute-full-layers", f"{Q} --hw h100 --devices 16 --ep 16 --recompute full --recompute-layers 12 "
                                "--global-batch 256 --micro-batch 1"),
    ("q-recompute-modules", f"{Q} --hw h100 --devices 16 --ep 16 --recompute core_attn,moe_act,layernorm "
                            "--global-batch 256"),
    ("ds-recompute-mla", f"{DS} --hw b200 --devices 256 --ep 64 --pp 4 --recompute mla_up_proj,moe,shared_experts "
                         "--global-batch 256 --micro-batch 1"),
    ("l8-recompute-mlp", f"{L8} --hw h100 --devices 8 --tp 2 --recompute mlp --global-batch 64"),
    # overlaps
    ("q-a2a-early", f"{Q} --hw h100 --devices 16 --ep 16 --overlap-a2a --early-attn-release --global-batch 256"),
    ("q-a2a-delay-wgrad", f"{Q} --hw h100 --devices 16 --ep 16 --overlap-a2a --delay-wgrad-compute --global-batch 256"),
    ("q-tp2-overlaps", f"{Q} --hw h100 --devices 64 --tp 2 --ep 8 --etp 1 --tp-comm-overlap --overlap-grad-reduce "
                       "--overlap-param-gather --global-batch 512 --micro-batch 2"),
    ("l8-tpov-b200", f"{L8} --hw b200 --devices 16 --tp 4 --tp-comm-overlap --global-batch 128 --micro-batch 1"),
    ("l8-tpov-nvls", f"{L8} --hw h100 --devices 16 --tp 8 --tp-comm-overlap --nccl-ub --nvls --global-batch 128"),
    ("l8-nccl-ub", f"{L8} --hw h100 --devices 16 --zero 1 --overlap-grad-reduce --nccl-ub --global-batch 128"),
    ("l8-buckets", f"{L8} --hw h100 --devices 16 --overlap-grad-reduce --ddp-bucket-size 40000000 --global-batch 128"),
    ("l8-ddp-num-buckets", f"{L8} --hw h100 --devices 16 --overlap-grad-reduce --ddp-num-buckets 4 --global-batch 128"),
    ("l8-mb-group", f"{L8} --hw h100 --devices 16 --pp 2 --vp 2 --microbatch-group-size 4 --global-batch 128 "
                    "--micro-batch 1"),
    # ZeRO / FSDP
    ("q-zero0", f"{Q} --hw h100 --devices 64 --ep 8 --zero 0 --global-batch 512"),
    ("q-zero2", f"{Q} --hw h100 --devices 64 --ep 8 --zero 2 --global-batch 512 --micro-batch 1"),
    ("q-zero3", f"{Q} --hw h100 --devices 64 --ep 8 --zero 3 --global-batch 512 --micro-batch 1"),
    ("q-fsdp", f"{Q} --hw h100 --devices 64 --ep 8 --fsdp --global-batch 512 --micro-batch 1"),
    ("l8-fsdp-cp2", f"{L8} --hw b200 --devices 16 --cp 2 --fsdp --seq 8192 --global-batch 64 --micro-batch 1"),
    ("l8-fsdp-tp2", f"{L8} --hw h100 --devices 16 --tp 2 --fsdp --global-batch 64 --micro-batch 1"),
    ("l8-fsdp-torch", f"{L8} --hw h100 --devices 16 --fsdp --fsdp-impl torch --global-batch 64 --micro-batch 1"),
    ("ds-fsdp-mtp", f"{DS} --hw b200 --devices 256 --ep 64 --fsdp --recompute full --mtp --global-batch 256 "
                    "--micro-batch 1"),
    ("q-precision-aware", f"{Q} --hw h100 --devices 16 --ep 16 --precision-aware-optimizer --global-batch 256"),
    ("q-optimizer-moments", f"{Q} --hw h100 --devices 16 --ep 16 --precision-aware-optimizer --optimizer-moments bf16 "
                            "--global-batch 256"),
    ("q-sgd", f"{Q} --hw h100 --devices 16 --ep 16 --optimizer sgd --global-batch 256"),
    ("q-grad-bytes2", f"{Q} --hw h100 --devices 16 --ep 16 --grad-bytes 2 --global-batch 256"),
    ("q-no-gaf", f"{Q} --hw h100 --devices 16 --ep 16 --no-gradient-accumulation-fusion --global-batch 256"),
    ("q-cpu-offload", f"{Q} --hw h100 --devices 16 --ep 16 --cpu-offloading-num-layers 4 --global-batch 256"),
    # vocabulary
    ("q-vocab-multiple-1", f"{Q} --hw h100 --devices 16 --ep 16 --vocab-multiple 1 --global-batch 256"),
    ("l8-vocab-multiple-64-tp2", f"{L8} --hw h100 --devices 16 --tp 2 --vocab-multiple 64 --global-batch 128"),
    # dispatchers
    ("q-alltoall", f"{Q} --hw h100 --devices 16 --ep 16 --global-batch 256"),
    ("q-allgather", f"{Q} --hw h100 --devices 16 --ep 16 --allgather-dispatcher --global-batch 256"),
    ("q-deepep", f"{Q} --hw h100 --devices 16 --ep 16 --deepep --global-batch 256"),
    ("q-deepep-sms", f"{Q} --hw h100 --devices 16 --ep 16 --overlap-a2a --deepep --dispatcher-sms 32 "
                     "--global-batch 1024 --micro-batch 1"),
    ("q-hybridep", f"{Q} --hw gb200 --devices 64 --ep 64 --deepep --hybridep --global-batch 256"),
    ("q-hybridep-b200", f"{Q} --hw b200 --devices 16 --ep 16 --deepep --hybridep --global-batch 256"),
    ("q-capacity", f"{Q} --hw h100 --devices 16 --ep 16 --capacity-factor 1.25 --global-batch 256"),
    ("q-capacity-pad", f"{Q} --hw h100 --devices 16 --ep 16 --capacity-factor 1.0 --pad-to-capacity "
                       "--global-batch 256"),
    # CUDA graphs and kernels
    ("q-cudagraph-attn", f"{Q} --hw h100 --devices 16 --ep 16 --cuda-graph-scope attn --global-batch 256"),
    ("q-cudagraph-router", f"{Q} --hw h100 --devices 16 --ep 16 --cuda-graph-scope attn,moe_router,moe_preprocess "
                           "--global-batch 256"),
    ("l8-cudagraph-mlp", f"{L8} --hw b200 --devices 8 --cuda-graph-scope attn,mlp --global-batch 64"),
    ("l8-attention-kernel", f"{L8} --hw h100 --devices 8 --attention-kernel cudnn-9-13 --global-batch 64"),
    ("l8-eager", f"{L8} --hw h100 --devices 8 --eager-kernels --global-batch 64"),
    ("l8-loss-native", f"{L8} --hw h100 --devices 8 --loss native_fused --global-batch 64"),
    ("q-mtp-ds", f"{DS} --hw b200 --devices 256 --ep 64 --pp 4 --mtp --global-batch 512 --micro-batch 1"),
    ("oss-sliding", f"{OSS} --hw h100 --devices 8 --ep 8 --global-batch 64"),
    ("oss-b200-mxfp8", f"{OSS} --hw b200 --devices 8 --ep 8 --precision mxfp8 --global-batch 64"),
    ("mx-tp2-ep8-zero0", f"{MX} --hw h100 --devices 64 --tp 2 --ep 8 --zero 0 --global-batch 512"),
    ("mx-pp4-ep8", f"{MX} --hw h100 --devices 32 --pp 4 --ep 8 --global-batch 256 --micro-batch 1"),
    ("q-search", f"{Q} --hw h100 --devices 16 --search --global-batch 256"),
    # FP8 parameter gather and FP8 attention
    ("q-fp8-param-gather", f"{Q} --hw h100 --devices 16 --ep 16 --precision fp8 --fp8-param-gather --global-batch 256"),
    ("q-fp8cur-param-gather", f"{Q} --hw h100 --devices 16 --ep 16 --precision fp8-current --fp8-param-gather "
                              "--global-batch 256"),
    ("q-mxfp8-param-gather", f"{Q} --hw b200 --devices 16 --ep 16 --precision mxfp8 --fp8-param-gather "
                             "--global-batch 256"),
    ("q-blockwise-param-gather", f"{Q} --hw h100 --devices 16 --ep 16 --precision fp8-blockwise --fp8-param-gather "
                                 "--global-batch 256"),
    ("q-nvfp4-param-gather", f"{Q} --hw b200 --devices 16 --ep 16 --precision nvfp4 --fp8-param-gather "
                             "--global-batch 256"),
    ("l8-fp8-attention", f"{L8} --hw h100 --devices 8 --precision fp8 --fp8-attention --global-batch 64"),
    ("l8-fp8-fsdp-pg", f"{L8} --hw h100 --devices 16 --precision fp8-current --fsdp --fp8-param-gather "
                       "--global-batch 64 --micro-batch 1"),
    ("l8-nvfp4-ends", f"{L8} --hw b200 --devices 8 --precision nvfp4 --bf16-layers-at-start 2 --bf16-layers-at-end 2 "
                      "--global-batch 64"),
    ("l8-nvfp4-rht", f"{L8} --hw b200 --devices 8 --precision nvfp4 --rht-cast-fusion --global-batch 64"),
    ("l8-fp8-te-version", f"{L8} --hw b200 --devices 8 --precision fp8-current --te-version 2.4 --global-batch 64"),
    ("l8-fp16", f"{L8} --hw a100-80gb --devices 8 --precision fp16 --global-batch 64"),
]


def _precision_grid() -> list[tuple[str, str]]:
    """Every precision on every GPU, for an MoE and a dense model and a TP x EP layout (refusals are skipped)."""
    out = []
    for gpu in GPUS:
        for precision in PRECISIONS:
            out.append((f"q-{gpu}-{precision}", f"{Q} --hw {gpu} --devices 16 --ep 16 --precision {precision} "
                                                 "--global-batch 256"))
            out.append((f"l8-{gpu}-{precision}", f"{L8} --hw {gpu} --devices 16 --tp 2 --precision {precision} "
                                                  "--global-batch 128"))
            out.append((f"ds-{gpu}-{precision}", f"{DS} --hw {gpu} --devices 256 --pp 8 --ep 32 --tp 2 --etp 1 "
                                                  f"--precision {precision} --global-batch 512 --micro-batch 1"))
    return out


def _file_launches() -> list[tuple[str, str]]:
    """The test suite's Hugging Face config.json models on 8 H100s, and its published launches and Bridge recipes
    read back (--from-megatron / --from-bridge) and emitted again."""
    from btacalc.config.presets import resolve_model

    data, out = ROOT / "tests" / "data", []
    for path in sorted(data.glob("*.config.json")) + sorted((data / "numerics23").glob("*.config.json")):
        experts = resolve_model(str(path)).num_experts
        ep = f" --ep {math.gcd(experts, 8)}" if experts > 1 else ""
        out.append((f"hf-{path.parent.name}-{path.name[:-12]}", f"--model {path} --hw h100 --devices 8{ep} "
                                                                 "--global-batch 64"))
    for path in sorted((data / "megatron").glob("*.args")):
        out.append((f"from-{path.stem}", f"--hw h100 --from-megatron {path}"))
    for path, model, devices in ((data / "megatron" / "llama3-70b-32gpu-h100-bridge.yaml", "llama-3-70b", 32),
                                 (data / "megatron" / "qwen3-30b-a3b-8gpu-h100-bridge.yaml", "qwen3-30b-a3b", 8)):
        out.append((f"from-{path.stem}", f"--model {model} --hw h100 --devices {devices} --from-bridge {path}"))
    return out


RANDOM_MODELS = ("qwen3-30b-a3b", "llama-3-8b", "deepseek-v3", "mixtral-8x7b", "gpt-oss-20b", "olmoe-1b-7b",
                 "llama4-scout", "kimi-k2", "qwen2.5-7b", "gpt3-175b")
RANDOM_OPTIONS = (("--overlap-a2a", "--early-attn-release", "--delay-wgrad-compute"), ("--tp-comm-overlap",),
                  ("--overlap-grad-reduce", "--overlap-param-gather"), ("--zero 0", "--zero 2", "--fsdp"),
                  ("--recompute full", "--recompute selective", "--recompute core_attn,mlp", "--recompute moe_act"),
                  ("--allgather-dispatcher", "--deepep", "--deepep --hybridep"),
                  ("--cuda-graph-scope attn", "--cuda-graph-scope attn,moe_router,moe_preprocess"),
                  ("--fp8-param-gather",), ("--vocab-multiple 64", "--vocab-multiple 1"), ("--grad-bytes 2",),
                  ("--precision-aware-optimizer",), ("--capacity-factor 1.5",), ("--mtp",), ("--no-overlap-p2p",))


def _random_launches(count: int, seed: int = 39) -> list[tuple[str, str]]:
    """`count` seeded random plans over models, GPUs, precisions, layouts and the options above (btacalc refuses
    many: those are skipped)."""
    import random

    pick = random.Random(seed)
    out = []
    for n in range(count):
        devices = pick.choice((8, 16, 32, 64, 128))
        tp, pp, cp = pick.choice((1, 1, 2, 4, 8)), pick.choice((1, 1, 2, 4)), pick.choice((1, 1, 2))
        layout = f"--tp {tp} --pp {pp} --cp {cp}" + (f" --vp {pick.choice((2, 3))}" if pp > 1 and pick.random() < .4
                                                     else "")
        ep = pick.choice((1, 2, 4, 8, 16))
        options = " ".join(pick.choice(group) for group in RANDOM_OPTIONS if pick.random() < 0.25)
        plan = (f"--model {pick.choice(RANDOM_MODELS)} --hw {pick.choice(GPUS)} --devices {devices} {layout} "
                f"--ep {ep} --precision {pick.choice(PRECISIONS)} --global-batch 512 --micro-batch 1 {options}")
        out.append((f"random-{n}", " ".join(plan.split())))
    return out


def launches(count: int = 0) -> list[tuple[str, str]]:
    return _preset_launches() + _file_launches() + SWEEP + _precision_grid() + _random_launches(count)


# --------------------------------------------------------------------------------------------- Megatron's parser

class _Kernel:
    """triton stand-in: any attribute is another stand-in; used as a bare decorator it returns the function.
    bridge_config_check.py's `_StandIn` is this with `_used` refusing any use after import."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _used(self) -> None:
        """Each use of the stand-in passes here (a hook: nothing for triton)."""

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        self._used()
        return type(self)(f"{self._name}.{item}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._used()
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else type(self)(self._name + "()")

    def __getitem__(self, item: Any) -> Any:
        self._used()
        return self

    def __mro_entries__(self, bases: Any) -> tuple[type, ...]:
        return (object,)


class _TritonModule(types.ModuleType):
    STAND_IN: type = _Kernel  # what its attributes are

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        return self.STAND_IN(f"{self.__name__}.{item}")


class _TritonFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "triton" or name.startswith("triton."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = _TritonModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module: Any) -> None:
        pass


def load_megatron(root: Path) -> Any:
    """megatron.training.arguments from the tree at `root`, imported as pretrain_gpt.py imports it."""
    import typing

    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override  # type: ignore[attr-defined]
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # Megatron's INFO / WARNING lines (e.g. the parsed pipeline layout) on stdout
    import torch
    import torch._dynamo.repro.after_dynamo  # noqa: F401  torch probes for triton before the stand-in exists
    import torch._inductor.compile_fx  # noqa: F401
    import torch.utils._triton as torch_triton

    assert not torch_triton.has_triton_package()
    sys.meta_path.insert(0, _TritonFinder())
    sys.path.insert(0, str(root))
    import megatron.training.arguments as arguments

    return arguments


@contextlib.contextmanager
def _gpu(arch: tuple[int, int]) -> Any:
    """torch.cuda's two device queries validate_args makes answer as the plan's GPU (CPU torch cannot)."""
    import torch

    saved = torch.cuda.get_device_capability, torch.cuda.get_device_properties
    props = types.SimpleNamespace(major=arch[0], minor=arch[1], name="emulated", multi_processor_count=132)
    torch.cuda.get_device_capability = lambda *a, **k: arch  # type: ignore[assignment]
    torch.cuda.get_device_properties = lambda *a, **k: props  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.get_device_properties = saved


@contextlib.contextmanager
def _environment(env: dict[str, str], argv: list[str]) -> Any:
    saved_env, saved_argv = dict(os.environ), sys.argv
    for key in [k for k in os.environ if k.startswith(("NVTE_", "NCCL_", "CUDA_"))]:
        del os.environ[key]
    os.environ.update(env)
    sys.argv = argv
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


def read_launch(text: str) -> tuple[dict[str, str], int, list[str]]:
    """The launch's exported environment, torchrun's world size and the flags after pretrain_gpt.py."""
    env: dict[str, str] = {}
    lines = text.replace("\\\n", " ").splitlines()
    for line in lines:
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    words = shlex.split(next(x for x in lines if "pretrain_gpt.py" in x))
    nproc = int(words[words.index("--nproc_per_node") + 1]) if "--nproc_per_node" in words else 1
    nnodes = int(words[words.index("--nnodes") + 1]) if "--nnodes" in words else 1
    return env, nproc * nnodes, words[words.index("pretrain_gpt.py") + 1:]


def _table() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in (ROOT / "btacalc" / "data" / "megatron_flags.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            flag, dest, arity, _default = line.split("\t")
            rows[flag] = (dest, arity)
    return rows


def _values(parser: argparse.ArgumentParser, flags: list[str], args: Any) -> list[str]:
    """Flags that parsed to another dest than btacalc's table says, or whose value is not the one written."""
    table, actions, problems = _table(), parser._option_string_actions, []
    i = 0
    while i < len(flags):
        flag, action = flags[i], parser._option_string_actions.get(flags[i])
        given = []
        while i + 1 < len(flags) and not (flags[i + 1].startswith("--") and flags[i + 1] in actions):
            i += 1
            given.append(flags[i])
        i += 1
        if action is None:
            continue
        if flag in table and table[flag][0] != action.dest:
            problems.append(f"{flag} -> {action.dest}, table says {table[flag][0]}")
        got = getattr(args, action.dest)
        if action.nargs == 0:
            if isinstance(action, argparse.BooleanOptionalAction):
                want: Any = not flag.startswith("--no-")
            elif action.const is True or action.const is False:
                want = action.const
            else:
                continue  # a store_const of another value
        else:
            typed = [action.type(g) if callable(action.type) else g for g in given]
            want = typed if action.nargs in ("+", "*") or isinstance(action.nargs, int) else typed[0]
        if got != want and str(getattr(got, "name", got)) != str(want):
            problems.append(f"{flag} {' '.join(given)} parsed to {action.dest}={got!r}")
    return problems


def _configs(args: Any) -> None:
    """pretrain_gpt.py's next two steps (L531-535): the model's GPTModelConfig (TransformerConfig.__post_init__)
    and the run's config container (DDP, optimizer, scheduler, ... configs). TransformerConfig refuses
    apply_rope_fusion unless Transformer Engine's fused RoPE kernel imports (transformer_config.py L2512-2520),
    which it cannot here: the rope fusion is read as off (a kernel choice; every other field as parsed)."""
    from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args

    args = copy.copy(args)
    args.apply_rope_fusion = False
    pretrain_cfg_container_from_args(args, gpt_config_from_args(args))


PLAN_LAYOUT = {"tensor_parallel": "TP", "pipeline_parallel": "PP", "virtual_pipeline": "VP", "context_parallel": "CP",
               "expert_parallel": "EP", "expert_tensor_parallel": "ETP", "data_parallel": "DP", "micro_batches": "M"}


def _megatron_layout(args: Any) -> dict[str, int]:
    """The layout as validate_args derived it (DP L448, VP L941-983, ETP L588)."""
    return {"TP": args.tensor_model_parallel_size, "PP": args.pipeline_model_parallel_size,
            "VP": args.virtual_pipeline_model_parallel_size or 1, "CP": args.context_parallel_size,
            "EP": args.expert_model_parallel_size, "ETP": args.expert_tensor_parallel_size,
            "DP": args.data_parallel_size,
            "M": args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)}


def plan_layout(plan: str) -> dict[str, int]:
    """The plan's own layout (`plan --json`'s parallelism), in _megatron_layout's names ({} when refused)."""
    run = subprocess.run([sys.executable, "-m", "btacalc", "plan", *plan.split(), "--json"], cwd="/",
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if run.returncode not in (0, 1):
        return {}
    report = json.loads(run.stdout)
    if "parallelism" not in report:  # --search: the search's report, not a plan
        return {}
    layout = {short: report["parallelism"][key] or 1 for key, short in PLAN_LAYOUT.items()}
    if report["plan"]["tiles"] > 1:  # the launch is the plan re-solved at G = 1 (cli/plan.py _untiled): other M
        del layout["M"]
    return layout


def check(arguments: Any, text: str, gpu: str, validate: bool, configs: bool = False,
          expect: dict[str, int] | None = None) -> str:
    """'ok' or the first error of Megatron's parser / validation for one emitted launch; `expect`: the plan's
    layout, which validate_args must derive too."""
    expect = expect or {}
    env, world, flags = read_launch(text)
    env.update(WORLD_SIZE=str(world), RANK="0")
    stderr = io.StringIO()
    with _environment(env, ["pretrain_gpt.py", *flags]), contextlib.redirect_stdout(io.StringIO()):
        try:
            with contextlib.redirect_stderr(stderr):
                args = arguments.parse_args(None, ignore_unknown_args=False)
        except SystemExit:
            return "parse: " + (stderr.getvalue().strip().splitlines() or ["exit"])[-1]
        parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
        problems = _values(parser, flags, args)
        if problems:
            return "value: " + "; ".join(problems)
        if not validate:
            return "ok (parser)"
        import torch

        given = {parser._option_string_actions[f].dest: f for f in flags if f in parser._option_string_actions}
        before = {dest: copy.deepcopy(getattr(args, dest)) for dest in given}
        try:
            with _gpu(ARCH[gpu]):
                arguments.validate_args(args, dict(ARGS_DEFAULTS))
        except BaseException as exc:  # Megatron asserts, raises or exits
            return f"validate: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        if configs:
            try:
                with _gpu(ARCH[gpu]):
                    _configs(args)
            except BaseException as exc:
                return f"config: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    dense = args.num_experts is None  # ETP is TP there (L588), and no layer uses it
    derived = [f"{key} {want} in the plan, {_megatron_layout(args)[key]} in Megatron" for key, want in expect.items()
               if _megatron_layout(args)[key] != want and not (dense and key == "ETP")]
    if derived:
        return "layout: " + "; ".join(derived)
    changed = [f"{given[d]}: {before[d]!r} -> {getattr(args, d)!r}" for d in given
               if getattr(args, d) != before[d] and [getattr(args, d)] != before[d]  # nargs='+' of one: its item
               and not isinstance(getattr(args, d), torch.dtype)]  # map_dtype (arguments.py L1082-1093)
    return "ok" if not changed else "changed by validate_args: " + "; ".join(changed)


def emit(plan: str) -> tuple[int, str]:
    run = subprocess.run([sys.executable, "-m", "btacalc", "plan", *plan.split(), "--emit", "megatron"], cwd="/",
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return run.returncode, run.stdout if run.returncode in (0, 1) else run.stderr.strip()


def _again(text: str, gpu: str) -> str:
    """The launch read back by --from-megatron and emitted again ('' when btacalc refuses its own launch)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as handle:
        handle.write(text)
    try:
        code, again = emit(f"--hw {gpu} --from-megatron {handle.name}")
    finally:
        os.unlink(handle.name)
    return again if code in (0, 1) else ""


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("megatron", type=Path, help="a Megatron-LM source tree (d98e8a64)")
    cli.add_argument("--no-validate", action="store_true", help="run the parser alone")
    cli.add_argument("--configs", action="store_true",
                     help="also build pretrain_gpt.py's configs (L531-535), the rope fusion read as off")
    cli.add_argument("--again", action="store_true",
                     help="also read each passing launch back (--from-megatron) and check the launch emitted again")
    cli.add_argument("--random", type=int, default=0, help="also this many seeded random plans")
    cli.add_argument("--start", default="", help="skip the launches before the one of this name")
    cli.add_argument("--only", default="", help="only launches whose name contains this")
    cli.add_argument("--list", action="store_true", help="list the launches and exit")
    opts = cli.parse_args(argv)
    todo = [(n, p) for n, p in launches(opts.random) if opts.only in n]
    names = [n for n, _ in todo]
    todo = todo[names.index(opts.start):] if opts.start in names else todo
    if opts.list:
        for name, plan in todo:
            print(f"{name}\t{plan}")
        return 0
    arguments = load_megatron(opts.megatron.resolve())
    from packaging.version import Version

    import megatron.core.utils as core_utils

    core_utils._te_version = Version(TE_VERSION)  # Megatron's cache of TE's version (core/utils.py L318-324)
    failed = skipped = 0
    for name, plan in todo:
        code, text = emit(plan)
        if code == 2:
            skipped += 1
            print(f"{name}: skip (btacalc refuses: {text.splitlines()[-1] if text else '?'})", flush=True)
            continue
        gpu = plan.split("--hw ")[1].split()[0]
        world = read_launch(text)[1]
        if "--devices " in plan and world != int(plan.split("--devices ")[1].split()[0]):
            failed += 1
            print(f"{name}: world: torchrun starts {world} processes, the plan has {plan}", flush=True)
            continue
        expect = plan_layout(plan) if "--from-" not in plan and not opts.no_validate else {}
        result = check(arguments, text, gpu, not opts.no_validate, opts.configs, expect)
        failed += not result.startswith("ok")
        print(f"{name}: {result}", flush=True)
        if opts.again and result.startswith("ok"):
            again = _again(text, gpu)
            result = check(arguments, again, gpu, not opts.no_validate, opts.configs) if again else "btacalc refuses"
            failed += not result.startswith("ok")
            print(f"{name}/again: {result}", flush=True)
    print(f"{len(todo) - skipped} launches checked, {failed} failed, {skipped} refused by btacalc")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
