"""Bad input, every command: one line on stderr starting `btacalc: error:`, exit 2, no traceback,
nothing on stdout, nothing written (the temporary folder holds exactly the files the case put there,
unchanged).

Cases are grouped in classes (CLASSES counts them; the suite checks there are at least 200):
usage (flags the parser refuses), names (unknown models, profiles, phases, ...), values (inputs
that contradict each other), profiles (hardware profile files with bad numbers, fields or
structure), outputs (paths that cannot be written), ranges (list and range options), bounds (work
that would not end or that torch would refuse), files (input paths that are not what they claim), ignored
(an option that would change nothing under the other options, the model or the device).

Paths are temporary: `{tmp}` is the case's folder; devices are FIFOs or symlinks, never /dev.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from btacalc.paths import data_dir, package_data

GPU_PROFILE = (data_dir("hardware_profiles") / "a100-80gb.toml").read_text()
WSE_PROFILE = (data_dir("hardware_profiles") / "wse3.toml").read_text()
# the GPU profile's fitted compute efficiency line (its value moves when `validate --calibrate` refits it)
EFFICIENCY = re.search(r"\[calibration\.compute_efficiency\]\nvalue = [^\n]*\n", GPU_PROFILE).group(0)
BIG = str(2**81)  # beyond the 2^62-sequence bound


# a per-tile cost a user's GPU profile may state (the shipped GPU profiles have none: the host issues each tile)
TILE_OVERHEAD = ('[calibration.tile_overhead_s]\nvalue = {}\nkind = "estimate"\nsource = "https://example.com"\n'
                 'note = "a user\'s per-tile cost"\n\n')


def _profile(base: str, old: str, new: str) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


# (name, profile text, fragment of the error): numbers out of range, wrong types, unknown or missing
# fields, inconsistent sections.
BAD_PROFILES = [
    ("capacity-zero", _profile(GPU_PROFILE, "value = 85899345920", "value = 0"), "memory.offchip_memory_bytes.value = 0"),
    ("capacity-negative", _profile(GPU_PROFILE, "value = 85899345920", "value = -8e10"), "offchip_memory_bytes.value"),
    ("capacity-inf", _profile(GPU_PROFILE, "value = 85899345920", "value = inf"), "= inf: must be a finite number"),
    ("capacity-nan", _profile(GPU_PROFILE, "value = 85899345920", "value = nan"), "= nan"),
    ("capacity-huge", _profile(GPU_PROFILE, "value = 85899345920", "value = 1e30"), "in [1, 1e+18] B"),
    ("capacity-string", _profile(GPU_PROFILE, "value = 85899345920", 'value = "80 GB"'), "'80 GB'"),
    ("capacity-bool", _profile(GPU_PROFILE, "value = 85899345920", "value = true"), "= True"),
    ("capacity-array", _profile(GPU_PROFILE, "value = 85899345920", "value = [8e10]"), "offchip_memory_bytes.value"),
    ("bandwidth-zero", _profile(GPU_PROFILE, "value = 2.039e12", "value = 0"), "offchip_bandwidth_bytes_per_s"),
    ("bandwidth-inf", _profile(GPU_PROFILE, "value = 2.039e12", "value = inf"), "B/s"),
    ("bandwidth-tiny", _profile(GPU_PROFILE, "value = 2.039e12", "value = 1e-300"), "offchip_bandwidth"),
    ("scaleup-zero", _profile(GPU_PROFILE, "value = 3e11", "value = 0"), "scaleup_bandwidth_bytes_per_s"),
    ("scaleout-negative", _profile(GPU_PROFILE, "value = 2.5e10", "value = -1"), "scaleout_bandwidth"),
    ("peak-zero", _profile(GPU_PROFILE, "value = 3.12e14", "value = 0"), "peak_flops_per_s"),
    ("peak-inf", _profile(GPU_PROFILE, "value = 3.12e14", "value = inf"), "peak_flops_per_s.value = inf"),
    ("peak-absurd", _profile(GPU_PROFILE, "value = 3.12e14", "value = 1e300"), "FLOP/s"),
    ("efficiency-1e9", _profile(GPU_PROFILE, EFFICIENCY, "[calibration.compute_efficiency]\nvalue = 1e9\n"), "compute_efficiency.value = 1e+09"),
    ("efficiency-zero", _profile(GPU_PROFILE, EFFICIENCY, "[calibration.compute_efficiency]\nvalue = 0\n"), "in [1e-06, 1]"),
    ("efficiency-negative", _profile(GPU_PROFILE, EFFICIENCY, "[calibration.compute_efficiency]\nvalue = -0.5\n"), "compute_efficiency"),
    ("efficiency-nan", _profile(GPU_PROFILE, EFFICIENCY, "[calibration.compute_efficiency]\nvalue = nan\n"), "compute_efficiency"),
    ("cores-almost-whole", _profile(GPU_PROFILE, "value = 108\n", "value = 108.0000001\n"), "= 108.0000001: must be a whole"),
    ("shared-memory-byte", re.sub(r"(\[chip\.shared_memory_bytes_per_core\]\nvalue = )[^\n]*", r"\g<1>1", GPU_PROFILE),
     "shared_memory_bytes_per_core.value = 1: must be a finite number in [1024"),
    ("usable-fraction-above-1", _profile(WSE_PROFILE, "value = 0.85\n", "value = 1.5\n"), "usable_memory_fraction"),
    ("usable-fraction-zero", _profile(WSE_PROFILE, "value = 0.85\n", "value = 0\n"), "usable_memory_fraction"),
    ("reference-scaleup-two-nodes", _profile(GPU_PROFILE, "ranks = 2\nnodes = 1\n", "ranks = 2\nnodes = 2\n"),
     "scaleup_reference.nodes = 2: a scale-up latency is measured in one node"),
    ("reference-scaleout-one-node", _profile(GPU_PROFILE, "ranks = 16\nnodes = 2\n", "ranks = 16\nnodes = 1\n"),
     "scaleout_reference.nodes = 1: a scale-out latency crosses two or more nodes"),
    ("reference-uneven-nodes", _profile(GPU_PROFILE, "ranks = 16\nnodes = 2\n", "ranks = 15\nnodes = 2\n"),
     "ranks = 15 do not fill nodes = 2 evenly"),
    ("reference-one-rank", _profile(GPU_PROFILE, "ranks = 2\nnodes = 1\n", "ranks = 1\nnodes = 1\n"),
     "scaleup_reference.ranks = 1"),
    # nccl2's references are evaluated with this system's NVLink steps: 500,000 ranks per node scaled the
    # scale-out latency from 46 us to 5 ns per call (review7)
    ("reference-scaleup-beyond-the-node", _profile(GPU_PROFILE, "ranks = 2\nnodes = 1\n", "ranks = 16\nnodes = 1\n"),
     "ranks = 16 over nodes = 1 is 16 per node, more than system.devices_per_node 8"),
    ("reference-scaleout-beyond-the-node", _profile(GPU_PROFILE, "ranks = 16\nnodes = 2\n", "ranks = 1000000\nnodes = 2\n"),
     "is 500000 per node, more than system.devices_per_node 8"),
    ("reference-unknown-collective", _profile(GPU_PROFILE, 'collective = "all_reduce"', 'collective = "broadcast"'),
     "collective = 'broadcast'"),
    ("fragmentation-above-1", _profile(GPU_PROFILE, "value = 0.05\n", "value = 1.5\n"), "allocator_fragmentation_fraction"),
    ("fragmentation-negative", _profile(GPU_PROFILE, "value = 0.05\n", "value = -0.1\n"), "allocator_fragmentation_fraction"),
    ("reserves-fill-the-device", _profile(GPU_PROFILE, "value = 1073741824\n", "value = 9e10\n"), "leave no memory"),
    ("gpu-usable-fraction", _profile(GPU_PROFILE, "[calibration.compute_efficiency]",
                                     "[calibration.usable_memory_fraction]\nvalue = 0.9\nkind = \"estimate\"\n"
                                     "source = \"https://example.com\"\nnote = \"ten percent off\"\n\n"
                                     "[calibration.compute_efficiency]"), "names its memory reserves"),
    ("devices-per-node-half", _profile(GPU_PROFILE, "value = 8\n", "value = 0.5\n"), "devices_per_node.value = 0.5"),
    ("devices-per-node-zero", _profile(GPU_PROFILE, "value = 8\n", "value = 0\n"), "a whole number"),
    ("devices-per-node-fraction", _profile(GPU_PROFILE, "value = 8\n", "value = 7.5\n"), "devices_per_node"),
    ("cores-zero", _profile(GPU_PROFILE, "value = 108\n", "value = 0\n"), "chip.cores"),
    ("cores-fraction", _profile(GPU_PROFILE, "value = 108\n", "value = 107.5\n"), "chip.cores.value = 107.5"),
    ("power-zero", _profile(GPU_PROFILE, "value = 400", "value = 0"), "chip.power_w"),
    ("power-inf", _profile(GPU_PROFILE, "value = 400", "value = inf"), "power_w"),
    ("system-power-zero", _profile(GPU_PROFILE, "value = 812.5", "value = 0"), "system_power_w"),
    ("system-power-below-chip", _profile(GPU_PROFILE, "value = 812.5", "value = 100"), "includes the device"),
    ("tile-overhead-negative", _profile(GPU_PROFILE, "[calibration.compute_efficiency]",
                                        TILE_OVERHEAD.format("-2e-05") + "[calibration.compute_efficiency]"),
     "tile_overhead_s"),
    ("tile-overhead-huge", _profile(GPU_PROFILE, "[calibration.compute_efficiency]",
                                    TILE_OVERHEAD.format("1e6") + "[calibration.compute_efficiency]"), "tile_overhead_s"),
    ("per-core-sram-too-large", _profile(GPU_PROFILE, "value = 196608", "value = 1966080"), "per-core SRAM"),
    ("sram-zero", _profile(GPU_PROFILE, "value = 63176704", "value = 0"), "sram_bytes"),
    ("unknown-field", _profile(GPU_PROFILE, 'family = "gpu"', 'family = "gpu"\ncolour = "green"'),
     "unknown field colour"),
    ("unknown-number-field", _profile(GPU_PROFILE, "[chip.power_w]", "[chip.power_watts]"),
     "unknown field chip.power_watts"),
    ("typo-in-number", _profile(GPU_PROFILE, "value = 108\n", "valeu = 108\n"), "unknown field chip.cores.valeu"),
    ("missing-family", _profile(GPU_PROFILE, 'family = "gpu"\n', ""), "missing field family"),
    ("unknown-family", _profile(GPU_PROFILE, 'family = "gpu"', 'family = "tpu"'), "family"),
    ("source-not-url", _profile(GPU_PROFILE, 'source = "https://glennklockwood.com/garden/processors/A100"\nnote = "SXM TDP"',
                                'source = "my notes"\nnote = "SXM TDP"'), "source must be a URL"),
    ("wse-weight-buffers-zero", _profile(WSE_PROFILE, "value = 2\n", "value = 0\n"), "weight_buffer_units"),
    ("wse-weight-buffers-half", _profile(WSE_PROFILE, "value = 2\n", "value = 0.5\n"), "weight_buffer_units"),
    ("wse-sram-inconsistent", _profile(WSE_PROFILE, "value = 48888", "value = 30000"), "a wafer's SRAM"),
    ("wse-resident-default", _profile(WSE_PROFILE, 'memory_model = "weight_streaming"', 'memory_model = "resident"'),
     "wse profiles"),
    ("not-toml", "name = ", "not valid TOML"),
    ("empty", "", "missing field"),
]


class Case:
    def __init__(self, cls: str, args: list[str], fragment: str = "", files: dict[str, Any] | None = None,
                 outputs: bool = True):
        self.cls, self.args, self.fragment, self.files, self.outputs = cls, args, fragment, files or {}, outputs

    @property
    def id(self) -> str:
        return f"{self.cls}:{' '.join(self.args)[:70]}"


CASES: list[Case] = []


def case(cls: str, *args: str, fragment: str = "", files: dict[str, Any] | None = None, outputs: bool = True) -> None:
    CASES.append(Case(cls, list(args), fragment, files, outputs))


COMMANDS = [["plan"], ["sweep", "--vary", "experts=16,32"], ["compare", "--hw", "wse3"],
            ["crossover", "--hw", "wse3", "--hidden", "256"], ["validate"], ["formulas"], ["hw", "list"],
            ["hw", "show", "wse3"], ["hw", "check", "wse3"], ["models", "list"], ["models", "show", "gpt3-175b"],
            ["measure", "--seq", "16"]]

# --- usage: what the parser refuses, on every command -------------------------------------------
for cmd in COMMANDS:
    case("usage", *cmd, "--no-such-flag", fragment="No such option")
    case("usage", *cmd, "extra-argument", fragment="unexpected extra argument")
for cmd in (["hw", "show"], ["hw", "check"], ["models", "show"]):
    case("usage", *cmd, fragment="Missing argument")
for cmd in (["plan"], ["sweep", "--vary", "experts=16"], ["compare"], ["crossover"], ["measure"]):
    case("usage", *cmd, "--seq", "0", fragment="--seq")
    case("usage", *cmd, "--seq", "-4096", fragment="--seq")
    case("usage", *cmd, "--seq", "4k", fragment="--seq")
    case("usage", *cmd, "--seq", "4096.5", fragment="--seq")
    case("usage", *cmd, "--seq", fragment="--seq")
for flag in ("--global-batch", "--tiles", "--tile-batch", "--max-global-batch", "--max-tile-batch", "--experts",
             "--top-k", "--expert-ffn", "--devices", "--ep", "--gpus-per-node", "--grad-accum", "--ddp-bucket-size"):
    case("usage", "plan", flag, "0", fragment=flag)
    case("usage", "plan", flag, "two", fragment=flag)
for flag, bad in (("--recompute", "sometimes"), ("--attention", "sparse"), ("--loss", "none"),
                  ("--accounting", "exact"), ("--memory-model", "cloud"), ("--zero", "4"), ("--zero", "-1")):
    case("usage", "plan", flag, bad, fragment=flag)
for flag, bad in (("--recompute", "x"), ("--attention", "x"), ("--memory-model", "x"), ("--zero", "9"),
                  ("--ep", "0"), ("--grad-accum", "0")):
    case("usage", "compare", flag, bad, fragment=flag)
for args in (["--batch", "0"], ["--tiles", "0"], ["--attention", "linear"], ["--real-limit-gb", "0"],
             ["--real-limit-gb", "lots"]):
    case("usage", "measure", *args, fragment=args[0])
for args in (["--recompute", "x"], ["--attention", "x"], ["--loss", "x"], ["--accounting", "x"]):
    case("usage", "formulas", *args, fragment=args[0])
case("usage", "sweep", fragment="--vary")
case("usage", "no-such-command", fragment="No such command")
case("usage", "hw", "nope", fragment="No such command")
case("usage", "models", "nope", fragment="No such command")

# --- names: unknown models, profiles, phases, quantities, families ------------------------------
for cmd in (["plan"], ["sweep", "--vary", "experts=16"], ["compare"], ["measure"]):
    case("names", *cmd, "--model", "no-such-model", fragment="unknown model")
    case("names", *cmd, "--model", "missing/config.json", fragment="not found")
for cmd in (["plan"], ["sweep", "--vary", "experts=16"], ["compare"], ["crossover"]):
    case("names", *cmd, "--hw", "tpu-v9", fragment="unknown hardware")
    case("names", *cmd, "--hw", "missing/profile.toml", fragment="not found")
case("names", "compare", "--hw", "wse3,nope", fragment="unknown hardware")
case("names", "compare", "--hw", ",", fragment="comma-separated")
case("names", "crossover", "--hw", " ", fragment="comma-separated")
case("names", "crossover", "--family", "llama", fragment="unknown model family")
case("names", "hw", "show", "tpu-v9", fragment="unknown hardware")
case("names", "hw", "check", "tpu-v9", fragment="unknown hardware")
case("names", "hw", "check", "missing.toml", fragment="not found")
case("names", "models", "show", "no-such-model", fragment="unknown model")
case("names", "formulas", "--phase", "nope", fragment="unknown phase")
case("names", "formulas", "--quantity", "nope", fragment="unknown quantity")
case("names", "formulas", "--model", "nope", fragment="unknown model")
case("names", "formulas", "--model", "gpt3-175b", "--phase", "experts", fragment="does not apply to gpt3-175b")
# a model's formulas are summed only under a recompute policy `plan` would run for it (the same refusal, one line)
case("values", "formulas", "--model", "qwen3-30b-a3b", "--recompute", "op", "--attention", "flash",
     fragment="not the Llama block")
case("values", "formulas", "--model", "llama-3-8b", "--recompute", "op", fragment="needs --attention flash")
case("values", "formulas", "--model", "llama-3-8b", "--recompute", "moe_act", fragment="the model has no MoE layers")
case("values", "formulas", "--model", "gpt3-175b", "--recompute", "mla_up_proj", fragment="the model has no MLA")
# review34: sequence parallelism splits a TP layer; op and the torch losses are planned 1-D
case("values", "formulas", "--model", "llama-3-8b", "--recompute", "op", "--attention", "flash", "--sequence-parallel",
     fragment="1-D without tensor parallelism, or beside TP with --dtensor-tp")
case("values", "formulas", "--model", "llama-3-8b", "--loss", "torch_fp32", "--sequence-parallel",
     fragment="without tensor parallelism")
# review34: sweep, compare and whatif cannot lay out PyTorch's FSDP: they told the user to add --fsdp, which they
# do not take
for cmd in (["sweep", "--vary", "seq=1024,2048", "--hw", "h100", "--devices", "8"],
            ["compare", "--hw", "h100,b200"],
            ["whatif", "--hw", "h100", "--devices", "8", "--target", "tokens_per_s=1e6", "--solve-for",
             "chip.peak_flops_per_s"]):
    case("values", *cmd, "--model", "llama-3-8b", "--recompute", "op", fragment="which only `btacalc plan` lays out")
for cmd in (["sweep", "--vary", "seq=1024,2048", "--hw", "h100", "--devices", "8"],
            ["whatif", "--hw", "h100", "--devices", "8", "--target", "tokens_per_s=1e6", "--solve-for",
             "chip.peak_flops_per_s"]):
    case("values", *cmd, "--model", "llama-3-8b", "--loss", "torch_fp32_held", fragment="which only `btacalc plan`")
case("names", "sweep", "--vary", "colour=1,2", fragment="unknown parameter")

# --- values: inputs that contradict each other ---------------------------------------------------
for args, fragment in [
    (["--top-k", "200"], "larger than the number of experts"),
    (["--experts", "4"], "larger than the number of experts"),
    (["--hw", "a100-80gb", "--global-batch", "10", "--tiles", "3"], "not divisible"),
    (["--hw", "a100-80gb", "--global-batch", "10", "--tile-batch", "4"], "not divisible"),
    (["--hw", "a100-80gb", "--global-batch", "8", "--tiles", "3"], "is not divisible by --tiles 3"),
    (["--hw", "a100-80gb", "--global-batch", "8", "--tiles", "2", "--tile-batch", "2", "--grad-accum", "3"],
     "is not divisible by --grad-accum 3"),
    (["--hw", "a100-80gb", "--global-batch", "64", "--max-global-batch", "32"], "exceeds --max-global-batch"),
    (["--hw", "a100-80gb", "--tile-batch", "8", "--max-tile-batch", "4"], "exceeds --max-tile-batch"),
    (["--top-k", "5", "--fixed-active"], "not divisible by --top-k"),
    (["--fixed-active", "--expert-ffn", "512", "--top-k", "4"], "both set the expert width"),
    (["--model", "gpt3-175b", "--experts", "8"], "dense"),
    (["--model", "gpt3-175b", "--fixed-active"], "dense"),
    (["--hw", "a100-80gb", "--devices", "8", "--ep", "16"], "does not divide --devices"),
    (["--hw", "wse3", "--ep", "2"], "apply to GPU profiles"),
    (["--hw", "wse3", "--zero", "1"], "apply to GPU profiles"),
    (["--hw", "a100-80gb", "--devices", "8", "--ep", "3"], "does not divide --devices"),
    (["--hw", "a100-80gb", "--devices", "6", "--ep", "6"], "does not divide the 128 experts"),
    (["--hw", "a100-80gb", "--model", "gpt3-175b", "--devices", "8", "--ep", "2"], "--ep 2 needs an MoE model"),
    (["--hw", "a100-80gb", "--global-batch", BIG], "beyond 2^62"),
    (["--hw", "wse3", "--global-batch", "16", "--grad-accum", "1", "--tiles", "2", "--max-tile-batch", "4"],
     "leaves tiles of b = 8, more than --max-tile-batch 4"),
    (["--hw", "a100-80gb", "--tiles", BIG], "beyond 2^62"),
    (["--hw", "a100-80gb", "--max-global-batch", BIG], "beyond 2^62"),
    (["--hw", "a100-80gb", "--devices", "8", "--overlap-grad-reduce", "--ddp-bucket-size", BIG],
     "beyond 2^62 parameters"),
]:
    case("values", "plan", *args, fragment=fragment)
case("values", "sweep", "--vary", "experts=16", "--fixed-active", fragment="needs --vary top-k")
case("values", "plan", "--hw", "a100-80gb", "--routing-imbalance", "17", fragment="E/k = 16")  # 128/8 = 16 at most
for bad in ("inf", "1e400"):  # hostile15: refused as any number option's infinity, before the E/k range
    case("values", "plan", "--hw", "a100-80gb", "--routing-imbalance", bad, fragment="takes a finite number")
for bad in ("nan", "0.5"):
    case("values", "plan", "--hw", "a100-80gb", "--routing-imbalance", bad, fragment="--routing-imbalance")
for cmd in (["plan", "--hw", "h100"], ["compare", "--hw", "wse3,b200", "--systems"]):
    case("values", *cmd, *(["--devices"] if cmd[0] == "plan" else []), str(2**64), fragment="beyond 2^20")
case("values", "plan", "--hw", "h100", "--devices", str(2**20 + 1), fragment="beyond 2^20")
B200_PROFILE = (data_dir("hardware_profiles") / "b200.toml").read_text()
case("values", "whatif", "--hw", "{tmp}/no-overhead.toml", "--target", "tokens_per_s=1e9", "--solve-for",
     "tile_overhead_s", fragment="needs a positive one",
     files={"no-overhead.toml": B200_PROFILE.replace("[calibration.compute_efficiency]",
                                                     TILE_OVERHEAD.format("0") + "[calibration.compute_efficiency]", 1)})
case("values", "whatif", "-m", "mpt-7b", "--hw", "h100", "-n", "8", "--target", "tokens_per_s=1e5", "--solve-for",
     "chip.compute_capability", fragment="is a label, not a quantity")  # a version is not scaled like a rate
case("values", "compare", "--hw", "a100-80gb", "--memory-model", "weight_streaming", fragment="wafer-scale")
case("values", "compare", "--hw", "a100-80gb", "--devices", "8", "--ep", "3", fragment="does not divide")
case("values", "measure", "--batch", "3", "--tiles", "2", fragment="must divide --batch")
case("values", "measure", "--model", "{data}/olmoe-1b-7b.config.json", fragment="reference layers")  # q/k norm over the whole projection

# --- profiles: a bad profile file, on every command that takes one -------------------------------
PROFILE_COMMANDS = (["plan", "--hw"], ["hw", "check"], ["hw", "show"], ["compare", "--hw"],
                    ["sweep", "--vary", "seq=1024", "--hw"])
for i, (name, text, fragment) in enumerate(BAD_PROFILES):
    cmd = PROFILE_COMMANDS[i % len(PROFILE_COMMANDS)]
    case("profiles", *cmd, "{tmp}/" + name + ".toml", fragment=fragment, files={name + ".toml": text})
HEADLINE = ("capacity-zero", "capacity-inf", "peak-inf", "efficiency-1e9", "devices-per-node-half", "unknown-field",
            "wse-weight-buffers-zero")
for cmd in PROFILE_COMMANDS:  # the issue's headline cases on every command
    for name, text, fragment in BAD_PROFILES:
        if name in HEADLINE:
            case("profiles", *cmd, "{tmp}/headline.toml", fragment=fragment, files={"headline.toml": text})
case("profiles", "plan", "--hw", "{tmp}/latin1.toml", fragment="cannot read", files={"latin1.toml": b"name = \"\xe9\"\n"})
# review34: a profile defaulting to torchtitan's op policy passed hw check, then every plan was refused naming an
# --recompute op the user never gave
for cmd in (["hw", "check"], ["plan", "--hw"]):
    case("profiles", *cmd, "{tmp}/op.toml", fragment="not a device's default",
         files={"op.toml": GPU_PROFILE.replace('\nrecompute = "none"', '\nrecompute = "op"', 1)})
case("profiles", "plan", "--hw", "{tmp}/deep.toml", fragment="not valid TOML", files={"deep.toml": "a = " + "[" * 100000})
case("profiles", "hw", "check", "{tmp}/profiles", fragment="is a folder", files={"profiles/x": ""})

# --- outputs: paths that cannot be written ------------------------------------------------------
OUTPUT_COMMANDS = (["plan"], ["compare", "--hw", "wse3"], ["crossover", "--hw", "wse3", "--hidden", "256"],
                   ["sweep", "--vary", "experts=16,32"])
for cmd in OUTPUT_COMMANDS:
    flags = ["--output"] + (["--csv"] if cmd[0] != "plan" else [])
    for flag in flags:
        case("outputs", *cmd, flag, "{tmp}/folder", fragment="is a folder", files={"folder/keep": "x"}, outputs=False)
        case("outputs", *cmd, flag, "{tmp}/missing/x.json", fragment="does not exist", outputs=False)
        case("outputs", *cmd, flag, "{tmp}/file.txt/x.json", fragment="Not a directory", files={"file.txt": "x"},
             outputs=False)
        case("outputs", *cmd, flag, "/proc/btacalc-test-output", fragment="cannot create a file in /proc", outputs=False)
        case("outputs", *cmd, flag, "{tmp}/loop", fragment="symbolic links", files={"loop": ("symlink", "loop")},
             outputs=False)
        case("outputs", *cmd, flag, "{tmp}/dangling", fragment="does not exist",
             files={"dangling": ("symlink", "nowhere/x.json")}, outputs=False)
    case("outputs", *cmd, "--output", "-", "--json", fragment="both write to standard output", outputs=False)
# review7: --emit prints on standard output (and writes --output): the refusal named a --json nobody gave
for spelling in ("-", "{tmp}/out"):
    case("outputs", "plan", "--hw", "h100", "--devices", "8", "--emit", "bridge", "--output", spelling,
         fragment="--output and --emit both write to standard output", outputs=False,
         files={"out": ("symlink", "/dev/stdout")} if spelling != "-" else {})
for cmd in OUTPUT_COMMANDS[1:]:
    case("outputs", *cmd, "--csv", "{tmp}/same", "--output", "{tmp}/same", fragment="both write to", outputs=False)
    case("outputs", *cmd, "--csv", "{tmp}/link", "--output", "{tmp}/target", fragment="both write to",
         files={"link": ("symlink", "target"), "target": "old"}, outputs=False)
    case("outputs", *cmd, "--csv", "-", "--json", fragment="both write to standard output", outputs=False)
    case("outputs", *cmd, "--plot", "{tmp}/chart.pdf", fragment="use a .png or .svg", outputs=False)
    case("outputs", *cmd, "--plot", "-", fragment="use a .png or .svg", outputs=False)
    case("outputs", *cmd, "--plot", "{tmp}/folder.png", fragment="is a folder", files={"folder.png/keep": "x"},
         outputs=False)
    # a later output fails: the earlier one (an existing file and a FIFO's link) stays untouched
    case("outputs", *cmd, "--csv", "{tmp}/existing.csv", "--output", "{tmp}/missing/x.json",
         fragment="does not exist", files={"existing.csv": "old contents"}, outputs=False)
    case("outputs", *cmd, "--output", "{tmp}/existing.json", "--plot", "{tmp}/x.gif", fragment="use a .png",
         files={"existing.json": "old"}, outputs=False)

# --- ranges: list and range options --------------------------------------------------------------
for spec, fragment in [("experts=", "gives no values"), ("experts=a,b", "not an integer"), ("experts=0", "positive"),
                       ("experts=-8", "positive"), ("experts=16:8:2", "stop is below start"),
                       ("experts=1:2", "start:stop:step"), ("experts=1:8:x1", "at least 2"),
                       ("experts=1:8:0", "positive"), ("experts=1:8:xa", "not an integer"), ("experts", "NAME=VALUES"),
                       ("=16", "unknown parameter"), ("seq=1.5", "not an integer")]:
    case("ranges", "sweep", "--vary", spec, fragment=fragment)
case("ranges", "sweep", "--vary", "experts=16", "--vary", "experts=32", fragment="given twice")
for spec in (f"seq={2**63}", f"experts={2**64}", f"devices={2**64}", f"global-batch=4,{2**63}", f"experts=1:{10**40}:1"):
    case("ranges", "sweep", "--vary", spec, fragment="beyond 2^62")
case("ranges", "crossover", "--hw", "wse3", "--hidden", str(2**70), fragment="beyond 2^62")
case("ranges", "crossover", "--hw", "wse3", "--hidden", str(2**40), fragment="at most 65,536")
for spec, fragment in [("8,x", "not an integer"), ("0", "positive"), ("8:4:2", "stop is below start"), (",", "no values"),
                       ("1:1000000:1", "more than 64"), ("1:9999999999999999999999:1", "beyond 2^62"), ("1:100000:1", "more than 64")]:
    case("ranges", "compare", "--hw", "b200", "--devices", spec, fragment=fragment)
for spec, fragment in [("100", "multiple of 256"), ("256,300", "multiple of 256"), ("0", "positive"),
                       ("256:128:256", "stop is below start"), ("a", "not an integer"), ("256:1000000:256", "more than 1,024"),
                       ("256:10000000000000000000000:256", "beyond 2^62"), ("256:524288:256", "more than 1,024"), ("65792", "at most 65,536"), ("256:1024", "start:stop:step")]:
    case("ranges", "crossover", "--hw", "wse3", "--hidden", spec, fragment=fragment)

# --- bounds: work that would not end, shapes torch would refuse ----------------------------------
case("bounds", "plan", "--hw", "a100-80gb", "--global-batch", str(2**62 + 1), fragment="beyond 2^62")
case("bounds", "plan", "--hw", "a100-80gb", "--tile-batch", BIG, fragment="beyond 2^62")
case("bounds", "plan", "--hw", "a100-80gb", "--max-tile-batch", BIG, fragment="beyond 2^62")
case("bounds", "measure", "--seq", "10000000000", fragment="beyond what torch can size")
case("bounds", "measure", "--batch", "100000000000", fragment="beyond what torch can size")
case("bounds", "measure", "--seq", "512", "--batch", "64", "--real", fragment="more than --real-limit-gb 8")
case("bounds", "measure", "--model", "gpt3-175b", "--seq", "2048", "--real", fragment="would allocate about")
case("bounds", "measure", "--seq", "1024", "--real", "--real-limit-gb", "0.5", fragment="more than --real-limit-gb 0.5")
case("bounds", "crossover", "--hw", "wse3", "--hidden", "256:262400:256", fragment="1,025 values, more than 1,024")

# --- files: input paths that are not what they claim ---------------------------------------------
# hostile15: it read "model file '.../empty-folder' not found"
case("files", "plan", "--model", "{tmp}/empty-folder", fragment="empty-folder' is a folder without a config.json",
     files={"empty-folder/readme": "x"})
case("files", "models", "show", "{tmp}/nothing.json", fragment="not found")
case("files", "plan", "--hw", "{tmp}/folder.toml", fragment="is a folder", files={"folder.toml/x": "x"})
case("files", "hw", "show", "{tmp}/fifo.toml", fragment="not a regular file", files={"fifo.toml": ("fifo",)})
case("files", "plan", "--hw", "{tmp}/link.toml", fragment="not found", files={"link.toml": ("symlink", "gone.toml")})
case("files", "plan", "--hw", "", fragment="give a profile name")
case("files", "validate", "--measured", "{tmp}/runs.json", fragment="not a regular file", files={"runs.json": ("fifo",)})
case("files", "validate", "--measured", "{tmp}/missing.json", fragment="not found")

# --- ignored: an option that would change nothing under the other options, model or device (tidy2) ----
# Each used to be accepted and planned as without it; the fragment is the reason the refusal gives.
GPU8 = ("--hw", "b200", "--devices", "8", "--global-batch", "64")
for cmd in (["plan", "--hw", "b200"], ["sweep", "--hw", "b200", "--vary", "seq=2048,4096"], ["compare", "--hw", "b200"]):
    case("ignored", *cmd, "-m", "llama-3-8b", "--no-rht-cast-fusion", "--precision", "bf16",
         fragment="--no-rht-cast-fusion splits the Hadamard-transformed cast")
    case("ignored", *cmd, "-m", "llama-3-8b", "--overlap-a2a", fragment="the model is dense")
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--precision", "mxfp8", "--no-rht-cast-fusion", fragment="got mxfp8")
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--deepep", fragment="the model is dense (no dispatch)")
# hybridep: the flex dispatcher's hybridep backend is a backend of --deepep
case("ignored", "plan", "-m", "qwen3-30b-a3b", *GPU8, "--ep", "8", "--hybridep", fragment="it needs --deepep")
# remainders: the precision-aware optimizer is TransformerEngine's FusedAdam (Adam only, GPUs only)
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--precision-aware-optimizer", "--optimizer", "sgd",
     fragment="TransformerEngine's FusedAdam; the optimizer is sgd")
case("ignored", "plan", "-m", "llama-3-8b", "--hw", "wse3", "--precision-aware-optimizer",
     fragment="a wafer-scale run's optimizer state is MemoryX's")
SMALL_LAUNCH_28 = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                   "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --bf16 "
                   "--vocab-size 32000 --use-distributed-optimizer")
# review28: bf16 moments imply the precision-aware optimizer; an explicit --no-precision-aware-optimizer beside them
case("values", "plan", "-m", "llama-3-8b", *GPU8, "--no-precision-aware-optimizer", "--optimizer-moments", "bf16",
     fragment="--precision-aware-optimizer off with --optimizer-moments bf16")
# review28: the precision-aware optimizer's settings, as Megatron-LM asserts them (optimizer_config.py L466-479,
# arguments.py L1209-1211 @ d98e8a64) or btacalc does not model them (fp16 master weights)
for extra, fragment in (
        ("--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", "without --use-precision-aware-optimizer: Megatron-Core asserts"),
        ("--main-grads-dtype bf16", "--main-grads-dtype bf16 without --use-precision-aware-optimizer"),
        ("--use-precision-aware-optimizer --main-params-dtype fp16", "--main-params-dtype fp16: FusedAdam would keep"),
        ("--use-precision-aware-optimizer --main-grads-dtype bf16 --accumulate-allreduce-grads-in-fp32",
         "--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32"),
        ("--use-precision-aware-optimizer --optimizer-cpu-offload", "--optimizer-cpu-offload: Megatron-Core's "
         "HybridDeviceOptimizer keeps the optimizer state"),
        ("--optimizer-cpu-offload", "--optimizer-cpu-offload: Megatron-Core's HybridDeviceOptimizer")):
    case("files", "plan", "--hw", "h100", "--devices", "8", "--from-megatron", "{tmp}/l.sh", fragment=fragment,
         files={"l.sh": SMALL_LAUNCH_28 + " " + extra})
# review30: recomputation flags as Megatron refuses them (transformer_config.py L1908-1932, arguments.py L1424-1427)
for extra, fragment in (
        ("--recompute-granularity full", "--recompute-granularity full without --recompute-method and"),
        ("--recompute-granularity selective --recompute-num-layers 2", "with selective recomputation"),
        ("--recompute-activations --recompute-method block --recompute-num-layers 1",
         "selective recomputation takes no --recompute-method")):
    case("files", "plan", "--hw", "h100", "--devices", "8", "--from-megatron", "{tmp}/l.sh", fragment=fragment,
         files={"l.sh": SMALL_LAUNCH_28 + " " + extra})
# agdisp: Megatron's allgather dispatcher is an MoE dispatcher on GPUs, not beside DeepEP or the EP overlap
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--allgather-dispatcher", fragment="the model is dense (no dispatch)")
case("ignored", "plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--allgather-dispatcher",
     fragment="a wafer-scale run has no expert parallelism")
case("ignored", "plan", "-m", "qwen3-30b-a3b", *GPU8, "--ep", "8", "--allgather-dispatcher", "--deepep",
     fragment="two MoE token dispatchers")
case("ignored", "plan", "-m", "qwen3-30b-a3b", *GPU8, "--ep", "8", "--allgather-dispatcher", "--overlap-a2a",
     fragment="Megatron-Core refuses it with --allgather-dispatcher")
# ncclsm: NVLS picks nccl_ub's NCCL path (sm_share.nvls_ub_applies); nccl_ub registers NCCL buffers on GPUs only
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--nvls", fragment="it needs --nccl-ub")
case("ignored", "plan", "-m", "llama-3-8b", "--hw", "wse3", "--nccl-ub", fragment="wse3 is not a GPU")
# buckets: Megatron's gradient buckets are a GPU layout option (a wafer has no NVLink domain or NCCL buckets)
case("ignored", "plan", "-m", "llama-3-8b", "--hw", "wse3", "--ddp-bucket-size", "1000000",
     fragment="--ddp-bucket-size: GPU layout option")
# first/last layers in BF16 (bf16ends): only under a low-precision recipe Megatron runs them in, at most every layer
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--bf16-layers-at-start", "1",
     fragment="need a low --precision (fp8-current, fp8-blockwise, mxfp8, nvfp4), got bf16")
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--precision", "fp16", "--bf16-layers-at-end", "2",
     fragment="got fp16")
case("ignored", "plan", "-m", "llama-3-8b", "--hw", "wse3", "--bf16-layers-at-start", "1", fragment="got bf16")
case("values", "plan", "-m", "llama-3-8b", *GPU8, "--precision", "fp8", "--bf16-layers-at-start", "1",
     fragment="refuses first/last layers in BF16 with delayed scaling")
case("values", "plan", "-m", "llama-3-8b", *GPU8, "--precision", "fp8-current", "--bf16-layers-at-start", "20",
     "--bf16-layers-at-end", "13", fragment="= 33 layers in BF16, more than the model's 32")
case("values", "plan", "-m", "llama-3-8b", *GPU8, "--precision", "mxfp8", "--bf16-layers-at-start", "-1",
     fragment="--bf16-layers-at-start counts decoder layers: a whole number from 0, got -1")
case("values", "plan", "-m", "llama-3-8b", *GPU8, "--precision", "mxfp8", "--bf16-layers-at-end", "-3",
     "--bf16-layers-at-start", "1", fragment="--bf16-layers-at-end counts decoder layers")
case("usage", "plan", "-m", "llama-3-8b", *GPU8, "--precision", "mxfp8", "--bf16-layers-at-end", "one",
     fragment="--bf16-layers-at-end")
# PyTorch's checkpoint early stop (mpt3) needs a full recompute on a GPU and has no Megatron/Bridge flag; eager
# PyTorch's element-wise kernels (mpt4) mean nothing on a wafer or in a Megatron launch
MPT8 = ("-m", "mpt-7b", "--devices", "8", "--seq", "2048")
for recompute in ("none", "selective"):
    case("ignored", "plan", *MPT8, "--hw", "h100", "--recompute", recompute, "--checkpoint-early-stop",
         fragment="needs --recompute full")
case("ignored", "plan", *MPT8, "--hw", "h100", "--recompute", "full", "--checkpoint-early-stop", "--emit", "megatron",
     fragment="Megatron")
case("ignored", "plan", *MPT8, "--hw", "wse3", "--recompute", "full", "--checkpoint-early-stop", fragment="wafer-scale")
case("ignored", "plan", *MPT8, "--hw", "h100", "--eager-kernels", "--emit", "megatron", fragment="Megatron")
case("ignored", "plan", *MPT8, "--hw", "wse3", "--eager-kernels", fragment="wafer-scale")
# review4: sweep takes the bf16ends and mpt3 options as plan does, and refuses what plan refuses
SWEEP8 = ("sweep", "-m", "llama-3-8b", "--hw", "b200", "--devices", "8", "--vary", "global-batch=64")
case("values", *SWEEP8, "--precision", "mxfp8", "--bf16-layers-at-start", "-1",
     fragment="--bf16-layers-at-start counts decoder layers: a whole number from 0")
case("ignored", *SWEEP8, "--bf16-layers-at-end", "1", fragment="need a low --precision")
case("ignored", *SWEEP8, "--checkpoint-early-stop", fragment="it needs --recompute full, got none")
case("ignored", "plan", "-m", "qwen3-30b-a3b", "--hw", "b200", "--ep", "1", "--routing-imbalance", "2",
     fragment="with --ep 1 one rank holds every expert")
case("ignored", "plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--routing-imbalance", "2",
     fragment="--routing-imbalance loads the busiest expert-parallel rank")
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--no-overlap", fragment="a GPU plan keeps its weights resident")
case("ignored", "whatif", "-m", "llama-3-8b", "--hw", "b200", "--no-overlap", "--target", "mfu=0.5", "--solve-for",
     "chip.peak_flops_per_s", fragment="--no-overlap sets how wafer weight streaming")
case("ignored", "compare", "-m", "llama-3-8b", "--hw", "b200", "--no-overlap", fragment="keeps its weights resident")
# tidy6: whatif takes the recipe options plan, sweep and compare share, each checked as plan checks it
WHATIF_B200 = ("whatif", "-m", "llama-3-8b", "--hw", "b200", "--target", "mfu=0.5", "--solve-for", "chip.peak_flops_per_s")
case("ignored", *WHATIF_B200, "--recompute", "none", "--checkpoint-early-stop",
     fragment="it needs --recompute full, got none")
case("ignored", *WHATIF_B200, "--bf16-layers-at-start", "1", fragment="need a low --precision")
case("values", *WHATIF_B200, "--precision", "int4", fragment="--precision")
case("ignored", "plan", "-m", "llama-3-8b", "--hw", "wse3", "--attention-kernel", "triton-flash",
     fragment="a wafer-scale run has none")
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--tokens-per-step", "1000000",
     fragment="--tokens-per-step sets the global batch of a GPU plan that fixes no batch size: --global-batch")
case("ignored", "plan", "-m", "llama-3-8b", "--hw", "b200", "--devices", "8", "--grad-accum", "2",
     "--tokens-per-step", "1000000", fragment="--grad-accum fixes it here")
# the micro-batch alone fixes no global batch (the default is rounded to it): the refusal names what does
case("ignored", "plan", "-m", "llama-3-8b", "--hw", "b200", "--devices", "8", "--micro-batch", "2", "--grad-accum", "2",
     "--tokens-per-step", "1000000", fragment="--grad-accum fixes it here")
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--search", "--tokens-per-step", "1000000",
     fragment="--global-batch fixes it here")
case("ignored", "plan", "-m", "llama-3-8b", *GPU8, "--cuda-graph-scope", "moe_router",
     fragment="captures moe layers: model 'llama-3-8b' has none")
case("ignored", "plan", "-m", "mixtral-8x7b", *GPU8, "--cuda-graph-scope", "attn,mlp",
     fragment="captures dense layers: model 'mixtral-8x7b' has none")
case("ignored", "plan", "-m", "qwen3-30b-a3b", "--fixed-active", fragment="--fixed-active keeps k*f constant")
case("ignored", "whatif", "-m", "qwen3-30b-a3b", "--fixed-active", "--target", "mfu=0.5", "--solve-for",
     "chip.peak_flops_per_s", fragment="give --top-k")
for flag in (["--recompute", "full"], ["--attention", "flash"], ["--sequence-parallel"], ["--causal"],
             ["--loss", "stored"], ["--accounting", "pytorch"]):
    case("ignored", "formulas", *flag, fragment=f"{flag[0]} sets how the formulas of a model are summed")
case("ignored", "measure", "--seq", "16", "--real-limit-gb", "2", fragment="--real-limit-gb bounds the memory")
case("ignored", "validate", "--cross-validate", "--wafer-loo", fragment="two refits: give one")
case("ignored", "compare", "-m", "llama-3-8b", "--hw", "h100", "--systems", "4", fragment="has no wafer-scale profile")
case("ignored", "compare", "-m", "llama-3-8b", "--hw", "wse3", "--search", fragment="--hw has no GPU profile")
case("ignored", "compare", "-m", "llama-3-8b", "--hw", "wse3", "--precision", "bf16,fp8",
     fragment="a row per precision for each GPU profile")
case("ignored", "sweep", "-m", "llama-3-8b", "--hw", "h100", "--vary", "global-batch=64,128", "--tokens-per-step",
     "1000000", fragment="--vary global-batch fixes it at every point")
case("ignored", "crossover", "--hw", "wse3", "--hidden", "256", "--search", fragment="--hw has no GPU profile")

# --- review3: GPU layout options on a wafer-scale profile, lists with empty or repeated entries ------------------
# Each was accepted and planned as without it (the option changed only its own echo in the JSON), or made the
# same point / row twice, or read a value from an empty entry's neighbours.
WAFER_GPU_ONLY = ["--overlap-grad-reduce", "--no-overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap",
                  "--overlap-p2p", "--no-overlap-p2p", "--overlap-a2a"]
for flag_ in WAFER_GPU_ONLY:
    case("ignored", "plan", "--hw", "wse3", flag_, fragment="wse3 is a wafer-scale profile")
for cmd in (["plan", "--hw", "wse2"], ["sweep", "--hw", "wse3", "--vary", "seq=1024,2048"],
            ["whatif", "--hw", "wse3", "--target", "mfu=0.5", "--solve-for", "chip.peak_flops_per_s"]):
    case("ignored", *cmd, "--gpus-per-node", "4", fragment="--gpus-per-node: GPU layout option")
case("ignored", "sweep", "--hw", "wse3", "--vary", "seq=1024", "--overlap-a2a", fragment="--overlap-a2a: GPU layout")
case("ignored", "plan", "--hw", "wse3", "--devices", "4", "--gpus-per-node", "2", "--tp-comm-overlap",
     fragment="--gpus-per-node/--tp-comm-overlap: GPU layout options")
for args, fragment in ((["--devices", "8"], "--devices sets"), (["--ep", "2", "--zero", "1"], "--ep/--zero set"),
                       (["--gpus-per-node", "4"], "--gpus-per-node sets"), (["--overlap-a2a"], "--overlap-a2a sets")):
    case("ignored", "compare", "--hw", "wse3,wse2", *args, fragment=f"{fragment} the GPU rows' layout")
# review4: GPU kernel and recipe options on a wafer-only compare were planned without (exit 0)
for args, fragment in ((["--no-gradient-accumulation-fusion"], "--no-gradient-accumulation-fusion sets"),
                       (["--no-rht-cast-fusion"], "--no-rht-cast-fusion sets"),
                       (["--bf16-layers-at-start", "1"], "--bf16-layers-at-start sets"),
                       (["--recompute", "full", "--checkpoint-early-stop"], "--checkpoint-early-stop sets")):
    case("ignored", "compare", "--hw", "wse3", *args, fragment=f"{fragment} the GPU rows' layout or kernels")
case("ignored", "compare", "-m", "llama-3-8b", "--hw", "b200", "--devices", "8", "--precision", "bf16,fp16",
     "--bf16-layers-at-end", "1", fragment="no device can run it")
for spec, fragment in [("experts=16,,32", "has an empty entry"), ("experts=16,32,", "has an empty entry"),
                       ("experts=16,16", "gives 16 twice"), ("experts=16,016", "gives 16 twice"),
                       ("experts=\u0661\u0666", "is not an integer"), ("precision=bf16,bf16", "gives bf16 twice"),
                       ("precision=bf16,,fp8", "has an empty entry")]:
    case("ranges", "sweep", "--hw", "h100", "--devices", "8", "--vary", spec,
         fragment=fragment)
# hostile19: a refusal of an integer parameter's values did not name it ("--vary '' gives no values")
for spec, fragment in [("seq=", "--vary seq '' gives no values"),
                       ("seq=1024,,2048", "--vary seq '1024,,2048' has an empty entry"),
                       ("seq=4096:1024:1024", "--vary seq range '4096:1024:1024': stop is below start")]:
    case("ranges", "sweep", "--hw", "h100", "--devices", "8", "--vary", spec, fragment=fragment)
for args, fragment in [(["--hw", "b200", "--devices", "8,8"], "gives 8 twice"),
                       (["--hw", "b200", "--precision", "fp8,fp8"], "gives fp8 twice"),
                       (["--hw", "b200", "--precision", "bf16,,fp8"], "has an empty entry"),
                       (["--hw", "b200,,wse3"], "--hw 'b200,,wse3' has an empty entry")]:
    case("ranges", "compare", *args, fragment=fragment)
case("ranges", "crossover", "--hw", "wse3", "--hidden", "256,256", fragment="gives 256 twice")
for args, first in ((["--emit", "megatron", "--hw", "h100", "--devices", "8"], "--hw"), (["--hw", "nope"], "--hw"),
                    (["--profile"], "--profile"), (["--sensitivity", "10"], "--sensitivity"),
                    (["--config", "{tmp}/run.toml"], "--model")):
    case("ignored", "plan", "--schema", *args, fragment=f"the same for every plan: {first} would change nothing",
         files={"run.toml": 'model = "llama-3-8b"\n'})
# hostile19: a number the plan does not use (an FP8 peak under bf16, the power for tokens/s) printed 31 identical rows
# and "not reached ... (best 97,070 at 1,979,000,000,000, 0.001x today)", exit 1
for solve in ("chip.peak_fp8_flops_per_s", "chip.power_w"):
    case("ignored", "whatif", "-m", "mpt-7b", "--hw", "h100", "--devices", "8", "--target", "tokens_per_s=1e5",
         "--solve-for", solve, fragment=f"--solve-for {solve} would change nothing: tokens_per_s is ")
for solve in ("chip.peak_flops_per_s,chip.peak_flops_per_s", "peak_flops_per_s,chip.peak_flops_per_s"):
    case("ignored", "whatif", "--hw", "h100", "--devices", "8", "--target", "mfu=0.5", "--solve-for", solve,
         fragment="--solve-for names chip.peak_flops_per_s twice")
for cmd in (["plan", "--hw", "wse3"], ["compare", "--hw", "wse3"]):
    case("ignored", *cmd, "--memory-model", "resident", "--no-overlap", fragment="--memory-model resident streams no")
case("ranges", "crossover", "--hw", "wse3,,b200", "--hidden", "256", fragment="has an empty entry")

# --- measured-run files: malformed, too deep, not JSON numbers, loose types ---------------------------
SHIPPED_RUNS = json.loads(package_data("measured_runs.json").read_text())


def _runs_with(**change: Any) -> str:
    run = dict(SHIPPED_RUNS["runs"][0])
    run.update(change)
    return json.dumps({"runs": [run]})


for name, text, fragment in [
    ("deep", '{"runs": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
    ("long-int", '{"runs": [], "x": ' + "9" * 5000 + "}", "not valid JSON"),
    ("infinity", _runs_with(measured={"tokens_per_s_per_device": float("inf")}).replace("inf", "Infinity"),
     "Infinity is not a JSON number"),
    ("bool-devices", _runs_with(devices=True), "field devices"),
    ("string-devices", _runs_with(devices="8"), "field devices"),
    ("float-seq", _runs_with(seq=2048.0), "field seq"),
    ("tiny-measure", _runs_with(measured={"tokens_per_s_per_device": 0}), "tokens_per_s_per_device"),
    ("not-an-object", "[1, 2]", "must be a JSON object"),
    ("no-runs", '{"run": []}', "must be a JSON object"),
]:
    case("files", "validate", "--measured", "{tmp}/" + name + ".json", fragment=fragment,
         files={name + ".json": text}, outputs=False)
# review3: a config.json cut short read "Unterminated string starting at at line 1" (json's message ends in "at")
case("files", "plan", "--model", "{tmp}/cut.json", fragment="not valid JSON: Unterminated string starting (line 1, "
     "column 16)", files={"cut.json": '{"model_type": "lla'})
case("values", "validate", "--calibrate", "--json", fragment="--calibrate fits on the shipped measured runs")
case("values", "compare", "--hw", "wse3,wse3", fragment="given twice")
case("outputs", "sweep", "--vary", "experts=16", "--csv", "{tmp}/hl2", "--output", "{tmp}/hl1", fragment="both write to",
     files={"hl1": "old", "hl2": ("hardlink", "hl1")}, outputs=False)

# --- review5: options given twice; Megatron launches and Bridge recipes with values their parsers refuse;
# duplicate keys in JSON and YAML inputs; empty or repeated list entries; a compare that dropped --recompute.
# Each was exit 0 (the first value dropped, a value guessed) or exit 3 (a traceback's last line) on main.
for args, names in ((["plan", "--hw", "wse3", "--hw", "h100"], "--hw is given 2 times"),
                    (["plan", "--overlap", "--no-overlap"], "--overlap/--no-overlap is given 2 times"),
                    (["plan", "--json", "--json"], "--json/--no-json is given 2 times"),
                    (["plan", "-m", "llama-3-8b", "--model", "gpt3-175b"], "--model/-m is given 2 times"),
                    (["compare", "--hw", "wse3", "--hw", "wse2"], "--hw is given 2 times"),
                    (["formulas", "--phase", "experts", "--phase", "router"], "--phase/-p is given 2 times"),
                    (["validate", "--measured", "{tmp}/a.json", "--measured", "{tmp}/b.json"], "--measured is given 2"),
                    (["whatif", "--hw", "h100", "--target", "mfu=0.5", "--target", "mfu=0.6", "--solve-for",
                      "chip.peak_flops_per_s"], "--target is given 2 times")):
    case("usage", *args, fragment=names, outputs=False)
case("usage", "plan", "--output", "{tmp}/a.json", "--output", "{tmp}/b.json", fragment="--output/-o is given 2 times",
     outputs=False)
case("usage", "sweep", "--vary", "experts=16", "--csv", "{tmp}/a.csv", "--csv", "{tmp}/b.csv",
     fragment="--csv is given 2 times", outputs=False)
MEGATRON_DATA = Path(__file__).parent / "data" / "megatron"
LLAMA_LAUNCH = (MEGATRON_DATA / "llama3-8b-h100-fp8.args").read_text()
MIXTRAL_LAUNCH = (MEGATRON_DATA / "mixtral-8x7b.args").read_text()
for old, new, fragment in [
    ("--num-layers 32", "--num-layers nan", "--num-layers (num_layers) takes an integer, got 'nan'"),
    ("--num-layers 32", "--num-layers 1e308", "takes an integer, got '1e308'"),
    ("--seq-length 8192", "--seq-length 8192.0", "--seq-length (seq_length) takes an integer, got '8192.0'"),
    ("--micro-batch-size 1", "--micro-batch-size 1e3", "--micro-batch-size (micro_batch_size) takes an integer"),
    ("--num-layers 32", "--num-layers 32 --window-size abc", "--window-size (window_size) takes integers separated by commas"),
    ("--num-layers 32", "--num-layers 32 --window-size []", "takes integers separated by commas, got '[]'"),
    ("--num-layers 32", "--num-layers 32 --window-size (1.5,0)", "separated by commas, got '(1.5,0)': its argparse (its tuple_type"),
    ("--num-layers 32", "--num-layers 32 --window-size 128 --window-attn-skip-freq 0", "needs N >= 1"),
    ("--attention-dropout 0.0", "--attention-dropout abc", "--attention-dropout (attention_dropout) takes a number"),
    ("--num-layers 32", "--num-layers $((1/0))", "bash arithmetic $((1/0)): division by zero"),
    # 1,000 factors: the parser's recursion (exit 3) before; bash's 64-bit integers bound the product
    # hostile23: bash's own evaluation bounds each product (Python's parser met its recursion limit: "is not an
    # integer or list"); a thousand unary signs still meet it
    ("--num-layers 32", "--num-layers $((" + "*".join(["99999"] * 1000) + "))", "beyond bash's 64-bit integers"),
    ("--num-layers 32", "--num-layers $((" + "-" * 5000 + "1))", "nests too deeply"),
    ("--num-layers 32", "--num-layers $((99999999999*99999999999))", "beyond bash's 64-bit integers"),
    ("--nproc_per_node 8", "--nproc_per_node 0", "--nproc_per_node '0' is not a number of processes"),
    # review7: a size Megatron divides by, 0: a bare ZeroDivisionError naming no flag, or (a virtual stage) read as
    # not given and planned
    ("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 0",
     "--tensor-model-parallel-size 0: must be at least 1 (Megatron-LM divides by it)"),
    ("--context-parallel-size 1", "--context-parallel-size 0", "--context-parallel-size 0: must be at least 1"),
    ("--num-layers 32", "--num-layers 32 --num-layers-per-virtual-pipeline-stage 0",
     "--num-layers-per-virtual-pipeline-stage 0: must be at least 1"),
    # review13: a micro-batch of 0 sequences stopped the rules' check with a bare ZeroDivisionError (the global batch
    # over micro batch x DP); -2 or a global batch of -64 was refused naming --grad-accum, which the launch does not give
    ("--micro-batch-size 1", "--micro-batch-size 0", "--micro-batch-size 0: must be at least 1 (Megatron-LM divides"),
    ("--micro-batch-size 1", "--micro-batch-size -2", "--micro-batch-size -2: must be at least 1"),
    ("--global-batch-size 128", "--global-batch-size -64", "--global-batch-size -64: must be at least 1 (a count of"),
    ("--global-batch-size 128", "--global-batch-size 0", "--global-batch-size 0: must be at least 1"),
]:
    assert old in LLAMA_LAUNCH, old
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment=fragment,
         files={"launch.args": LLAMA_LAUNCH.replace(old, new, 1)})
# review8: launches Megatron-LM refuses that were planned (exit 0): --tp-comm-overlap at TP 1 beside --sequence-parallel
# (arguments.py L1433-1439 switch SP off at TP 1, L1441-1442 assert it); --deterministic-mode with the fused cross
# entropy (determinism.py L24, L141-148) or with NCCL_ALGO=Tree exported (L48, L88-94)
for old, new, fragment in [
    ("--num-layers 32", "--num-layers 32 --tp-comm-overlap", "--tp-comm-overlap needs --sequence-parallel, which "
     "Megatron switches off at TP 1"),
    ("--num-layers 32", "--num-layers 32 --deterministic-mode", "--deterministic-mode needs --tp-comm-overlap and "
     "--cross-entropy-loss-fusion off"),
]:
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment=fragment,
         files={"launch.args": LLAMA_LAUNCH.replace(old, new, 1)})
# review9: --ddp-num-buckets as Megatron-LM's argparse (type=int) and DistributedDataParallelConfig (L275-277) take it
for value, fragment in (("4.0", "--ddp-num-buckets (ddp_num_buckets) takes an integer, got '4.0'"),
                        ("1e3", "--ddp-num-buckets (ddp_num_buckets) takes an integer, got '1e3'"),
                        ("-1", "--ddp-num-buckets needs no --ddp-bucket-size and a count above 0"),
                        ("4 --ddp-num-buckets 8", "--ddp-num-buckets and --ddp-num-buckets set ddp_num_buckets to")):
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment=fragment,
         files={"launch.args": LLAMA_LAUNCH.replace("--num-layers 32", f"--num-layers 32 --ddp-num-buckets {value}", 1)})
SMALL_LAUNCH = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 "
                "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000")
# argtypes24: a value Megatron-LM's argparse cannot convert to its option's type (megatron_types.tsv) stops the
# launch whether btacalc reads the option or not; each was planned (the flag listed as ignored or passed over)
for value, fragment in (("--hidden-dropout abc", "--hidden-dropout (hidden_dropout) takes a number, got 'abc'"),
                        ("--lr-warmup-iters x1", "--lr-warmup-iters (lr_warmup_iters) takes an integer, got 'x1'"),
                        ("--lr-warmup-iters 1e3", "takes an integer, got '1e3': its argparse (type=int"),
                        ("--seed 0x10", "--seed (seed) takes an integer, got '0x10'"),
                        ("--adam-beta2=", "--adam-beta2 (adam_beta2) takes a number, got ''"),
                        ("--weight-decay 0,1", "--weight-decay (weight_decay) takes a number, got '0,1'"),
                        ("--rampup-batch-size 16 16 x", "--rampup-batch-size (rampup_batch_size) takes an integer"),
                        ("--empty-unused-memory-level 3", "takes one of 0, 1, 2, got '3'"),
                        ("--window-size 128,x", "--window-size (window_size) takes integers separated by commas"),
                        ("--no-rope-freq [1]*2+x", "--no-rope-freq (no_rope_freq) takes an integer or a Python list"),
                        ("--tokenizer-type gpt2bpetokenizer", "did you mean GPT2BPETokenizer?"),
                        ("--distributed-backend NCCL", "did you mean nccl?"),
                        ("--cuda-graph-modules attn MLP", "--cuda-graph-modules 'MLP': Megatron-LM's argparse takes"),
                        ("--inference-cuda-graph-scope Block", "did you mean block?"),
                        # a list option's count and `--flag=value` (its one argument, as argparse takes it)
                        ("--rampup-batch-size 16 16", "--rampup-batch-size takes 3 values, got 2"),
                        ("--data-path=a b", "'b' is not a Megatron-LM flag"),
                        # a layer pattern eval cannot parse (a SyntaxError stops Megatron's argparse with a traceback)
                        ("--window-attn-skip-freq [1,1", "(window_attn_skip_freq) takes an integer or a Python list"),
                        # a float argparse takes and torch's dropout refuses (planned: dropout on at 1.5, off at nan)
                        ("--hidden-dropout 1.5", "--hidden-dropout (hidden_dropout) takes a probability in [0, 1], got "
                                                 "1.5: torch's dropout raises on it"),
                        ("--hidden-dropout nan", "takes a probability in [0, 1], got nan"),
                        # hostile24: an attention dropout of nan (planned as no dropout) where the attention btacalc
                        # plans stops on it: unfused (torch's dropout), local, flash (flash-attn 2's check)
                        ("--attention-dropout nan --attention-backend unfused", "--attention-dropout "
                         "(attention_dropout) takes a probability in [0, 1], got nan: unfused attention's torch.nn."
                         "Dropout"),
                        ("--attention-dropout nan --transformer-impl local", "got nan: unfused attention's"),
                        ("--attention-dropout nan --attention-backend flash", "got nan: TransformerEngine's "
                         "FlashAttention hands it to flash-attn")):
    case("files", "plan", "--hw", "h100", "--devices", "8", "--from-megatron", "{tmp}/launch.args", fragment=fragment,
         files={"launch.args": SMALL_LAUNCH + f" {value}\n"})
for algo in ("Tree", "Ring,Tree", ","):
    case("files", "plan", "--hw", "gb200", "--from-megatron", "{tmp}/launch.args",
         fragment="--deterministic-mode takes NCCL_ALGO from CollnetChain, CollnetDirect, Ring, ^NVLS only",
         files={"launch.args": f"export NCCL_ALGO={algo}\n" + MIXTRAL_LAUNCH.replace(
             "--num-experts 8", "--num-experts 8 --deterministic-mode", 1)})
# --ddp-num-buckets sets the bucket size itself (Megatron-Core distributed_data_parallel_config.py L275-277)
case("values", "plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--ddp-num-buckets", "4",
     "--ddp-bucket-size", "40000000", "--overlap-grad-reduce", fragment="--ddp-num-buckets sets the bucket size from the rank's parameters")
# a layer pattern of 10^9 entries: 16 GB and 27 s of this machine before (its length is checked per operation now)
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args",
     fragment="a list of more than 10,000 entries (a model's layers)",
     files={"launch.args": MIXTRAL_LAUNCH.replace("--num-experts 8", "--num-experts 8 --moe-layer-freq ([0]*1000*1000*1000)")})
BRIDGE = (MEGATRON_DATA / "qwen3-30b-a3b-8gpu-h100-bridge.yaml").read_text()
for old, new, fragment in [
    ("  seq_length: 4096", "  seq_length: 2024-01-01", "model.seq_length: '2024-01-01' is a string, which Megatron-Bridge sets"),
    ("  global_batch_size: 32", "  global_batch_size: .nan", "r.yaml: train.global_batch_size takes an integer, got nan"),
    ("  global_batch_size: 32", "  global_batch_size: 1e308", "r.yaml: train.global_batch_size takes an integer, got 1e+308"),
    ("  global_batch_size: 32", "  global_batch_size: .inf", "r.yaml: train.global_batch_size takes an integer, got inf"),
    ("  tensor_model_parallel_size: 4", "  tensor_model_parallel_size: [4]",
     "r.yaml: model.tensor_model_parallel_size takes an integer, got [4]"),
    ("  micro_batch_size: 2", "  micro_batch_size: 2\n  micro_batch_size: 1", "key 'micro_batch_size' is given twice"),
    ("train:", "train.global_batch_size: 64\ntrain:", "train.global_batch_size is given twice"),
    ("mixed_precision: bf16_mixed", "mixed_precision: bf16_mixed\na: &a {b: *a}", "holds itself"),
    ("  tensor_model_parallel_size: 4", "  tensor_model_parallel_size: 0", "tensor_model_parallel_size 0: must be at"),
    ("train:", "ddp.num_buckets: -1\ntrain:", "ddp.num_buckets needs no ddp.bucket_size and a count above 0"),
    ("train:", "ddp.num_buckets: 1e-3\ntrain:", "r.yaml: ddp.num_buckets takes an integer, got 0.001"),
    ("train:", "ddp.num_buckets: .nan\ntrain:", "r.yaml: ddp.num_buckets takes an integer, got nan"),
    # review10: a number or a switch quoted in the YAML stays a string in Bridge (omegaconf_utils.py L515 sets it as
    # given): '4' fails Bridge's world-size division (config.py L1019-1024), 'false' is true; btacalc read 4 and false
    ("train:", "ddp.num_buckets: '4'\ntrain:", "ddp.num_buckets: '4' is a string, which Megatron-Bridge sets as"),
    ("  tensor_model_parallel_size: 4", '  tensor_model_parallel_size: "4"',
     "model.tensor_model_parallel_size: '4' is a string"),
    ("  overlap_grad_reduce: true", "  overlap_grad_reduce: 'false'", "ddp.overlap_grad_reduce: 'false' is a string, which "
     "Megatron-Bridge sets as given (no conversion) where Megatron takes true or false"),
    ("train:", "model.attention_dropout: '0.1'\ntrain:", "'0.1' is a string, which Megatron-Bridge sets as given "
     "(no conversion) where Megatron takes a number"),
    # a whole float stays a float in Bridge too (a float parallel size fails range() in parallel_state.py L359-367);
    # btacalc read 4.0 as 4
    ("  tensor_model_parallel_size: 4", "  tensor_model_parallel_size: 4.0",
     "model.tensor_model_parallel_size: 4.0 is a float, which Megatron-Bridge sets as given (no conversion) where "
     "Megatron takes an integer"),
    ("train:", "ddp.num_buckets: 4.0\ntrain:", "ddp.num_buckets: 4.0 is a float"),
    # YAML has no tuple: (128, 0) is a string in Bridge, where Megatron-Core takes a pair; btacalc parsed it
    ("train:", "model.window_size: (128, 0)\ntrain:", "model.window_size: '(128, 0)' is a string, which "
     "Megatron-Bridge sets as given (no conversion) where Megatron takes a pair of integers (a YAML list: [L, R])"),
    # a list's float too: Bridge sets [128.0, 0] as given, where TransformerConfig.window_size takes integers; btacalc
    # read 128
    ("train:", "model.window_size: [128.0, 0]\ntrain:", "model.window_size[0]: 128.0 is a float, which "
     "Megatron-Bridge sets as given"),
    # argtypes24: a Literal field's value Bridge sets as given and Megatron-Core raises on; btacalc read rmsnorm as
    # RMSNorm (case folded) and AllToAll as an all-to-all
    ("train:", "model.normalization: rmsnorm\ntrain:", "model.normalization: 'rmsnorm' is not one of LayerNorm, "
     "RMSNorm (case-sensitive): Megatron-Bridge sets it as given and Megatron-Core stops"),
    ("  moe_token_dispatcher_type: alltoall", "  moe_token_dispatcher_type: AllToAll",
     "model.moe_token_dispatcher_type: 'AllToAll' is not one of allgather, alltoall, flex"),
]:
    assert old in BRIDGE, old
    case("files", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
         fragment=fragment, files={"r.yaml": BRIDGE.replace(old, new, 1)})
LLAMA_CONFIG = (Path(__file__).parent / "data" / "llama-3-8b.config.json").read_text()
case("files", "plan", "--model", "{tmp}/config.json", fragment="key 'hidden_size' is given twice in one object",
     files={"config.json": LLAMA_CONFIG.rstrip().removesuffix("}") + ', "hidden_size": 8}'})
# hostile20: one of btacalc's inputs given where another is due was refused by the parser's first complaint ("not
# valid JSON: Expecting value (line 1, column 1)", "not valid TOML: Invalid statement", "unknown field source")
PRESET_TOML = (Path(__file__).parent / "data" / "gpt-22b.toml").read_text()
for args, files, fragment in (
        (["plan", "--model", "{tmp}/p.toml", "--hw", "h100"], {"p.toml": GPU_PROFILE},
         "p.toml: a hardware profile, not a model's config.json (a model is a preset name, a Hugging Face config.json "
         "or a folder holding one): give it to --hw"),
        (["models", "show", "{tmp}/m.toml"], {"m.toml": PRESET_TOML},
         "m.toml: a model in btacalc's preset form, which --model does not read"),
        (["plan", "--hw", "{tmp}/config.json"], {"config.json": LLAMA_CONFIG},
         "config.json: a Hugging Face config.json, not a hardware profile (a profile name or a profile .toml; btacalc "
         "hw list): give it to --model"),
        (["hw", "show", "{tmp}/m.toml"], {"m.toml": PRESET_TOML}, "m.toml: a model in btacalc's preset form, not a "
         "hardware profile")):
    case("files", *args, fragment=fragment, files=files, outputs=False)
case("files", "validate", "--measured", "{tmp}/runs.json", fragment="key 'devices' is given twice", outputs=False,
     files={"runs.json": _runs_with().replace('"devices": ', '"devices": 1, "devices": ', 1)})
for spec, fragment in (("core_attn,core_attn", "names core_attn twice"), ("core_attn,,mlp", "has an empty entry"),
                       ("mlp,", "has an empty entry")):
    case("ranges", "plan", "--hw", "h100", "--devices", "8", "--recompute", spec, fragment=fragment)
case("ranges", "plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--cuda-graph-scope", "",
     fragment="names no scope")
case("ranges", "plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--cuda-graph-scope", "attn,,mlp",
     fragment="has an empty entry")
case("ranges", "plan", "--hw", "h100", "--devices", "8", "--attention-kernel", "", fragment="got ''")
# a profile named "" (or only a control character, which the sanitiser removes) was planned and compared as a
# row with no device name; a run id of blanks was reported as "run :"
for field, value in (("name", '""'), ("name", '"\\u001b"'), ("display_name", '"  "')):
    case("profiles", "compare", "--hw", "{tmp}/p.toml,wse3", fragment=f"{field} = ", files={"p.toml": _profile(
        GPU_PROFILE, f'\n{field} = "' + ("a100-80gb" if field == "name" else "NVIDIA A100 SXM 80GB") + '"',
        f"\n{field} = {value}")})
case("files", "validate", "--measured", "{tmp}/runs.json", fragment="field id: must not be empty", outputs=False,
     files={"runs.json": _runs_with(id=" ")})
# --emit and --search print no single plan: --sensitivity's moves and --json's JSON were dropped (exit 0)
for args, fragment in ((["--hw", "h100", "--devices", "8", "--emit", "megatron", "--sensitivity", "10"], "--emit megatron "
                        "prints a configuration instead"),
                       (["--hw", "h100", "--devices", "8", "--search", "--sensitivity", "10"], "--search prints a ranking"),
                       (["--hw", "wse3", "--emit", "cerebras", "--sensitivity", "10"], "--emit cerebras prints a config"),
                       (["--hw", "h100", "--devices", "8", "--emit", "bridge", "--json"], "--json prints the plan as JSON; "
                        "--emit bridge prints a configuration")):
    case("ignored", "plan", *args, fragment=fragment, outputs=False)
# --calibrate ran and rewrote the profiles; --wafer-loo beside it was dropped (exit 0)
case("ignored", "validate", "--calibrate", "--wafer-loo", fragment="it takes no --wafer-loo", outputs=False)
# a run's other keys are carried through unread: one that is a near spelling of a field left the field unset
for typo, fragment in (("micro_bach", "did you mean 'micro_batch'?"), ("Devices", "did you mean 'devices'?")):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=fragment, outputs=False,
         files={"runs.json": _runs_with(**{typo: 4})})
# review35: plans Megatron cannot run, which --emit megatron printed (tests/test_review35.py has each derivation)
case("values", "plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "8", "--zero", "0", "--precision", "fp8",
     "--fp8-param-gather", "--emit", "megatron", fragment="arguments.py:1096", outputs=False)
case("values", "plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--cp", "2", "--attention", "eager",
     fragment="utils.py L1169-1173")
case("values", "plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "16", "--tp", "2", "--seq", "4095",
     fragment="mappings.py L71-74")
case("values", "plan", "--hw", "h100", "--model", "llama-3-8b", "--devices", "8", "--loss", "te_fused", "--emit",
     "megatron", fragment="--cross-entropy-fusion-impl te (TransformerEngine's fused cross-entropy) is refused",
     outputs=False)
for extra in (["--overlap-a2a"], ["--deepep"], ["--allgather-dispatcher"]):
    case("values", "plan", "--model", "qwen3-30b-a3b", "--hw", "h100-96gb", "--devices", "32", "--fsdp", "--fsdp-impl",
         "fsdp2", "--loss", "torch_fp32", "--recompute", "full", *extra, fragment=f"{extra[0]} is a Megatron-LM option")
# review34: Megatron-LM options under PyTorch's FSDP (torchtitan, llm-foundry have none) changed numbers or nothing
for extra in (["--nccl-ub"], ["--no-gradient-accumulation-fusion"], ["--cpu-offloading-num-layers", "4"],
              ["--cuda-graph-scope", "attn,mlp"], ["--ddp-bucket-size", "1"], ["--ddp-num-buckets", "4"],
              ["--microbatch-group-size", "2"], ["--overlap-grad-reduce"], ["--precision-aware-optimizer"]):
    case("values", "plan", "--model", "llama-3-8b", "--hw", "h100-96gb", "--devices", "8", "--fsdp", "--fsdp-impl",
         "fsdp2", "--loss", "torch_fp32", *extra, fragment=f"{extra[0]} is a Megatron-LM option")
# review24: at TP 1 the TP overlap of a PyTorch FSDP plan is torchtitan's async TP, which needs FSDP2 and TP > 1
case("values", "plan", "--model", "llama-3-8b", "--hw", "h100-96gb", "--devices", "8", "--fsdp", "--fsdp-impl",
     "fsdp2", "--loss", "torch_fp32", "--tp-comm-overlap", fragment="it needs --fsdp-impl fsdp2 and --tp > 1")
# review34: a recipe field one level up (beside the run's fields) was carried through unread, and the run planned
# without it (a torchtitan row's checkpoint_early_stop moved its error from +1.8% to -4.1%, exit 0)
for key, value in (("checkpoint_early_stop", True), ("torch_cross_entropy", True), ("eager_kernels", True)):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=f"key '{key}' is a recipe field", outputs=False,
         files={"runs.json": _runs_with(**{key: value})})
# a run's sizes beyond plan's bounds: a sequence of 2^70 was a bare OverflowError naming no run or field
for field, value in (("seq", 2**70), ("devices", 2**64), ("tp", 2**21)):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=f"field {field}: Input should be less than",
         outputs=False, files={"runs.json": _runs_with(**{field: value})})
# review7: a known gap of blanks exempted its run from the band with nothing to read ("memory known gap:    "); a
# peak allocated above the peak reserved (PyTorch allocates inside what it reserved) was checked as measured
for field in ("known_gap", "memory_known_gap"):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=f"{field} is blank", outputs=False,
         files={"runs.json": _runs_with(**{field: " \t "})})
case("files", "validate", "--measured", "{tmp}/runs.json", fragment="peak_alloc_gib 20 exceeds peak_reserved_gib 12",
     outputs=False, files={"runs.json": _runs_with(measured={"peak_alloc_gib": 20.0, "peak_reserved_gib": 12.0})})
# review8: an integer option read '8.0', '4096.0' and a run file's TOML float 1e3 as whole numbers, and '8_0' (a Python
# literal's digit grouping) as 80, each exit 0/1, where '1e3' and a launch's '8192.0' were refused
for args, fragment in ((["plan", "--hw", "h100", "--devices", "8.0"], "--devices/-n takes an integer, got '8.0'"),
                       (["plan", "--hw", "h100", "--devices", "8_0"], "--devices/-n takes an integer, got '8_0'"),
                       (["plan", "--hw", "h100", "--devices=1000.0"], "takes an integer, got '1000.0'"),
                       (["plan", "--hw", "h100", "--devices", "8", "--seq", "4096.0"], "--seq takes an integer"),
                       (["sweep", "--hw", "h100", "--devices", "8", "--grad-accum", "2.0", "--vary", "experts=16"],
                        "--grad-accum takes an integer, got '2.0'"),
                       (["compare", "--hw", "h100", "--ep", "8.0"], "--ep takes an integer, got '8.0'"),
                       (["crossover", "--hw", "h100", "--seq", "2048.0"], "--seq takes an integer"),
                       (["whatif", "--hw", "h100", "--devices", "8.0", "--target", "mfu=0.5", "--solve-for",
                         "chip.peak_flops_per_s"], "--devices/-n takes an integer")):
    case("usage", *args, fragment=fragment, outputs=False)
# review8: two run ids that differ only in Unicode composition print the same and were both kept
case("files", "validate", "--measured", "{tmp}/runs.json", fragment="run ids given twice: caf\u00e9", outputs=False,
     files={"runs.json": json.dumps({"runs": [dict(SHIPPED_RUNS["runs"][0], id="caf\u00e9"),
                                              dict(SHIPPED_RUNS["runs"][0], id="cafe\u0301")]})})
# hostile36's note: two run ids that differ only in the spaces around them print the same and were both kept
case("files", "validate", "--measured", "{tmp}/runs.json", fragment="run ids given twice: r7", outputs=False,
     files={"runs.json": json.dumps({"runs": [dict(SHIPPED_RUNS["runs"][0], id="r7"),
                                              dict(SHIPPED_RUNS["runs"][0], id=" r7 ")]})})
# review8: an empty --solve-for entry was looked up as a hardware number named ''
for spec, fragment in (("sram_bytes,", "has an empty entry"), (",", "names no number"), ("", "names no number")):
    case("ranges", "whatif", "--hw", "wse3", "--target", "mfu=0.5", "--solve-for", spec, fragment=f"--solve-for {spec!r} "
         + fragment, outputs=False)
for value in ("1e3", "8.0"):
    case("files", "plan", "--config", "{tmp}/run.toml", fragment=f"devices: --devices/-n takes an integer, got '{float(value)}'",
         files={"run.toml": f'hw = "h100"\ndevices = {value}\n'}, outputs=False)
# compare's smallest GPU count escalated a given --recompute to full, so a misspelt one was never read
case("values", "compare", "--hw", "h100", "--recompute", "bogus", fragment="recompute 'bogus': expected none")
# mlpv31: a run's own userbuffers table (recipe tp_overlap_cfg) naming a GEMM TransformerEngine does not overlap, a
# pipeline overlap without splits, or a field btacalc does not time (atomic_gemm) would plan TE's defaults instead
_V31 = next(r for r in SHIPPED_RUNS["runs"] if r["id"] == "gpt3-175b-h100-512-fp8-mlperf-v31")


def _v31_with_gemm(name: str, entry: dict[str, Any]) -> str:
    recipe = json.loads(json.dumps(_V31["recipe"]))
    recipe["tp_overlap_cfg"]["gemms"][name] = entry
    return json.dumps({"runs": [dict(_V31, recipe=recipe)]})


for gemm, entry, fragment in (("fc3_fprop", {"num_sm": 4}, "names fc3_fprop"),
                              ("fc2_fprop", {"method": "pipeline", "num_splits": 0}, "needs num_splits >= 1"),
                              ("proj_fprop", {"atomic_gemm": 1}, "atomic_gemm"),
                              ("qkv_dgrad", {"num_sm": "4"}, "num_sm")):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=fragment, outputs=False,
         files={"runs.json": _v31_with_gemm(gemm, entry)})
# review9: the rest of a malformed table (wrong types, unknown method, negative counts) and a recipe's attention_kernel
# outside the catalogue, which the row took as not expressible (exit 0) where --attention-kernel exits 2
for gemm, entry, fragment in (("qkv_fprop", {"method": "ring"}, "Input should be 'ring_exchange', 'pipeline' or"),
                              ("qkv_fprop", {"num_sm": -1}, "num_sm: Input should be greater than or equal to 0"),
                              ("qkv_fprop", {"num_sm": 4.0}, "num_sm: Input should be a valid integer"),
                              ("qkv_fprop", {"num_sm": True}, "num_sm: Input should be a valid integer"),
                              ("proj_fprop", {"num_splits": -2}, "num_splits: Input should be greater than or"),
                              ("proj_fprop", {"set_sm_margin": 1}, "set_sm_margin: Input should be a valid boolean"),
                              ("proj_fprop", 4, "proj_fprop: Input should be a valid dictionary")):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=fragment, outputs=False,
         files={"runs.json": _v31_with_gemm(gemm, entry)})
# review10: a method TransformerEngine does not run that GEMM's overlap with was timed as if it did (TE @ bee4649c
# base.py L292-295 raises on a pipeline all-gather; the other objects stop with "Operation not supported")
for gemm, entry, fragment in (("qkv_fprop", {"method": "pipeline", "num_splits": 4}, "refuses a pipeline overlap on an"),
                              ("qkv_wgrad", {"method": "ring_exchange"}, "a ring exchange's object has no bulk overlap"),
                              ("proj_fprop", {"method": "bulk"}, "as a pipeline (gemm.cpp L207 split_overlap_rs)"),
                              ("fc1_dgrad", {"method": "ring_exchange"}, "asserts the table then names no fc1_wgrad")):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=fragment, outputs=False,
         files={"runs.json": _v31_with_gemm(gemm, entry)})
case("files", "validate", "--measured", "{tmp}/runs.json", outputs=False,
     fragment="got 'flash-attn-3'",  # after "attention_kernel must be one of" and the catalogue's names
     files={"runs.json": json.dumps({"runs": [dict(_V31, recipe=dict(_V31["recipe"], attention_kernel="flash-attn-3"))]})})


# --- review12: a hostile user's campaign on the CLI --------------------------------------------------------------
# A measurement of 1e-308 made the run's error (predicted / measured - 1) overflow: the table printed "+inf%" and
# `validate --json` wrote `Infinity`, which is not JSON (exit 0). A measurement starts at 1e-6, as a profile's
# efficiencies do, so that every printed number stays finite.
for measured in ({"tokens_per_s_per_device": 1e-308}, {"step_time_s": 1e-300}, {"tokens_per_s_per_device": 5e-7},
                 {"tokens_per_s_per_device": 700.0, "peak_reserved_gib": 1e-200}):
    field = next(k for k, v in measured.items() if v < 1e-6)
    case("files", "validate", "--measured", "{tmp}/runs.json", "--json", outputs=False,
         fragment=f"field measured.{field}: Input should be greater than or equal to 0.000001",
         files={"runs.json": _runs_with(measured=measured)})
# hostile19: a run that measured nothing (`"measured": {}`, or only whose rank) entered no band, and validate said
# "within the documented bands" with n = 0 (exit 0)
for measured in ({}, {"peak_rank": "last"}):
    case("files", "validate", "--measured", "{tmp}/runs.json", outputs=False,
         fragment="field measured: no measurement: give tokens_per_s_per_device, step_time_s",
         files={"runs.json": _runs_with(measured=measured)})
# hostile19: a run's megatron_args refused by the shared launch decoder named neither the run nor the field ("the
# launch gives no --num-attention-heads or --hidden-size: btacalc needs the model")
case("files", "validate", "--measured", "{tmp}/runs.json", outputs=False,
     fragment=f"--measured: run {SHIPPED_RUNS['runs'][0]['id']}: megatron_args: Megatron-LM would refuse this launch: "
              "--hidden-size is a required argument",
     files={"runs.json": _runs_with(megatron_args="--num-layers 2", recipe=None)})
# hostile20: one the launch reader names by its source ("run ID: unknown Megatron-LM flag ...") lost --measured and
# megatron_args
case("files", "validate", "--measured", "{tmp}/runs.json", outputs=False,
     fragment=f"--measured: run {SHIPPED_RUNS['runs'][0]['id']}: megatron_args: unknown Megatron-LM flag --frobnicate",
     files={"runs.json": _runs_with(megatron_args="--num-layers 2 --frobnicate 1", recipe=None)})
# hostile24: a bf16 row whose megatron_args give --fp8-format was predicted at FP8 under its bf16 label (seq and
# global batch were checked, the precision was not)
_TOY_MEM = next(r for r in SHIPPED_RUNS["runs"] if r.get("megatron_args") and r["precision"] == "bf16"
                and "--fp8-format" not in r["megatron_args"] and "--transformer-impl local" not in r["megatron_args"])
case("files", "validate", "--measured", "{tmp}/runs.json", outputs=False,
     fragment=f"--measured: run {_TOY_MEM['id']}: megatron_args train fp8, the run's field precision bf16",
     files={"runs.json": json.dumps({"runs": [{**_TOY_MEM, "megatron_args": _TOY_MEM["megatron_args"]
                                               + " --fp8-format hybrid"}]})})


# A list or range value read a Python literal's digit grouping ('1_6' as 16) where an integer option refuses it
# (review8: `--devices 8_0`): `--vary`, compare's `--devices` and crossover's `--hidden` take digits only too
for args in (["sweep", "--hw", "h100", "--devices", "8", "--vary", "experts=1_6"],
             ["sweep", "--hw", "h100", "--devices", "8", "--vary", "experts=16:64:x1_6"],
             ["compare", "--hw", "h100", "--devices", "8,1_6"], ["crossover", "--hw", "wse3", "--hidden", "2_56"]):
    case("ranges", *args, fragment="is not an integer", outputs=False)

# sweep's --seq, --grad-accum, --precision and --devices beside --vary of the same quantity: --vary set it at every
# point and the option was dropped (exit 0); an option that would change nothing is refused (README)
for option, value_, vary in ((["--seq"], "2048", "seq=1024,4096"), (["--grad-accum"], "4", "grad-accum=1,2"),
                             (["--precision"], "fp8", "precision=bf16,fp8"), (["-n", "--devices"], "16", "devices=8,16")):
    case("ignored", "sweep", "--hw", "h100", "--vary", vary, option[0], value_, outputs=False,
         fragment=f"{'/'.join(reversed(option))} would change nothing: --vary {vary.split('=')[0]} sets it at every point")

# plan and whatif took --seq, --experts, --top-k and --expert-ffn above 2^62, where `sweep --vary` refuses them: on a
# wafer `plan --seq 10^30` printed 1.3e62 GB (exit 1), on a GPU it was a bare OverflowError naming no flag
HUGE = str(10**30)
for cmd in (["plan", "--hw", "wse3"], ["plan", "--hw", "h100", "--devices", "8"], ["compare", "--hw", "wse3"],
            ["crossover", "--hw", "wse3", "--hidden", "256"],
            ["whatif", "--hw", "wse3", "--target", "mfu=0.5", "--solve-for", "chip.peak_flops_per_s"]):
    case("bounds", *cmd, "--seq", HUGE, fragment=f"--seq {HUGE} is beyond 2^62", outputs=False)
for cmd in (["plan", "--hw", "wse3"], ["whatif", "--hw", "wse3", "--target", "mfu=0.5", "--solve-for",
                                      "chip.peak_flops_per_s"]):
    for flag_ in ("--experts", "--top-k", "--expert-ffn"):
        case("bounds", *cmd, flag_, str(2**62 + 1), fragment=f"{flag_} {2**62 + 1} is beyond 2^62", outputs=False)

# hydra: the 2^62 bound of a model's counts and sizes lives on the model (config.model.MAX_COUNT, a ModelSpec field
# validator and with_overrides), not in the CLI: the imports that built a model without the CLI's check planned
# --num-experts / --hidden-size 10^30 (exit 1, "DOES NOT FIT" with a 10^31-byte state) or, in a measured run's
# megatron_args, read it as "another model" (exit 0); each is now one line naming the field, exit 2
BIG = str(10**30)
LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
          "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --bf16 --swiglu "
          "--vocab-size 1000 --ffn-hidden-size 512 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512\n")
for old, new in (("--num-experts 8", f"--num-experts {BIG}"), ("--hidden-size 256", f"--hidden-size {BIG}"),
                 ("--moe-ffn-hidden-size 512", f"--moe-ffn-hidden-size {BIG}"),
                 ("--max-position-embeddings 128", f"--max-position-embeddings {BIG}")):
    field = {"--num-experts": "num_experts", "--hidden-size": "hidden_size", "--moe-ffn-hidden-size": "ffn_size",
             "--max-position-embeddings": "max_position_embeddings"}[old.split()[0]]
    case("bounds", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"l.sh: field {field}: {BIG} is "
         "beyond 2^62", files={"l.sh": LAUNCH.replace(old, new)})
# review19: llm-foundry's attention has no Megatron launch; FlashAttention-2 and llm-foundry's kernels no learnable
# softmax; a launch's layers per virtual stage that do not divide the stage (arguments.py L972-973)
for kernel in ("triton-flash", "flash-attn-2-varlen"):
    for emit in ("megatron", "bridge"):
        case("values", "plan", "--model", "llama-3-8b", "--hw", "h100", "--devices", "8", "--attention-kernel", kernel,
             "--emit", emit, fragment="plans llm-foundry's own attention", outputs=False)
for kernel in ("flash-attn-2", "flash-attn-2-varlen", "triton-flash"):
    case("values", "plan", "--model", "gpt-oss-20b", "--hw", "h100", "--devices", "8", "--attention-kernel", kernel,
         fragment=f"--attention-kernel {kernel} has no learnable softmax")
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM would refuse this "
     "launch: the layers per pipeline stage must divide by --num-layers-per-virtual-pipeline-stage",
     files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers 12 --pipeline-model-parallel-size 2 "
                                   "--num-layers-per-virtual-pipeline-stage 4")})
BRIDGE_MOE = ("model.num_layers=4 model.hidden_size=256 model.num_attention_heads=4 model.seq_length=128 "
              "model.vocab_size=1000 model.gated_linear_unit=True model.ffn_hidden_size=512 model.num_moe_experts=8 "
              "model.moe_router_topk=2 model.moe_ffn_hidden_size=512\n"
              "train.micro_batch_size=1 train.global_batch_size=8 mixed_precision=bf16_mixed\n")
for old, new, field in (("model.num_moe_experts=8", f"model.num_moe_experts={BIG}", "num_experts"),
                        ("model.moe_router_topk=2", f"model.moe_router_topk={BIG}", "top_k"),
                        ("model.num_attention_heads=4", f"model.num_attention_heads={BIG}", "num_heads")):
    case("bounds", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=f"o.txt: field {field}: {BIG} is beyond 2^62", files={"o.txt": BRIDGE_MOE.replace(old, new)})
    case("bounds", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
         fragment=f"r.yaml: field {field}: {BIG} is beyond 2^62",
         files={"r.yaml": re.sub(r"([\w.]+)=(\S+)\s*", r"\1: \2\n", BRIDGE_MOE.replace(old, new))})
case("bounds", "validate", "--measured", "{tmp}/runs.json", fragment=f"field num_experts: {BIG} is beyond 2^62",
     outputs=False, files={"runs.json": json.dumps({"runs": [{
         "id": "r", "source": "test", "model": "mixtral-8x7b", "hw": "h100", "devices": 8, "precision": "bf16",
         "seq": 128, "global_batch": 8, "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check",
         "megatron_args": LAUNCH.replace("--num-experts 8", f"--num-experts {BIG}")}]})})
# review27: what Megatron-Core refuses beside its allgather dispatcher, which a launch naming none runs
# (transformer_config.py L891, L2655, L2977 @ d98e8a64), and DeepEP outside the flex dispatcher (L1744)
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="--moe-enable-deepep needs "
     "--moe-token-dispatcher-type flex", files={"l.sh": LAUNCH.replace("--num-experts 8", "--num-experts 8 --moe-enable-deepep")})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="needs the alltoall or flex dispatcher",
     files={"l.sh": LAUNCH.replace("--num-experts 8", "--num-experts 8 --fp8-format hybrid --moe-router-padding-for-fp8")})
case("files", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="model.variable_seq_lengths needs the alltoall or flex dispatcher",
     files={"o.txt": BRIDGE_MOE + "model.variable_seq_lengths=True\n"})
case("files", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="model.moe_router_padding_for_quantization (which model.moe_router_padding_for_fp8 sets",
     files={"o.txt": BRIDGE_MOE.replace("bf16_mixed", "bf16_with_fp8_current_scaling_mixed")
            + "model.moe_token_dispatcher_type=allgather model.moe_router_padding_for_quantization=True\n"})
# a run file's model override, bounded by the model as the flag is (it was bounded by the CLI's check before)
case("bounds", "plan", "--config", "{tmp}/run.toml", fragment=f"--top-k {BIG} is beyond 2^62", outputs=False,
     files={"run.toml": f'model = "mixtral-8x7b"\nhw = "h100"\ndevices = 8\ntop-k = {BIG}\n'})

# recomputelayers: a block recompute of the first N layers (Megatron --recompute-method block), where btacalc places it
for extra, fragment in (("--recompute-layers 4", "needs --recompute full"),
                        ("--recompute full --recompute-layers -1", "1 or more (0: every layer)")):
    case("values", "plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", *extra.split(), fragment=fragment)
case("values", "plan", "-m", "llama-3-8b", "--hw", "wse3", "--recompute", "full", "--recompute-layers", "4",
     fragment="recomputing some layers and not others is Megatron's block method on a GPU")

# fsdp2: PyTorch's FSDP as btacalc models it shards over every rank, or beside TP (no PP, CP or EP)
case("values", "plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "16", "--fsdp", "--fsdp-impl", "fsdp2", "--pp",
     "2", fragment="--fsdp-impl fsdp2: btacalc models PyTorch's FSDP as data parallel over every rank")

# opsac: torchtitan's per-op checkpoint where its mm-order derivation does not hold, on a wafer, in a Megatron launch
for extra, fragment in (("-m qwen3-30b-a3b --hw h100 --attention flash", "not the Llama block"),
                        ("-m llama-3-8b --hw h100 --attention eager", "needs --attention flash"),
                        ("-m llama-3-8b --hw h100 --attention flash", "needs PyTorch's own modules"),
                        ("-m qwen2.5-7b --hw h100 --attention flash --fsdp --fsdp-impl fsdp2", "runs them as addmm"),
                        ("-m llama-3-8b --hw h100 --attention flash --emit megatron", "Megatron recomputes whole"),
                        ("-m llama-3-8b --hw wse3", "a wafer-scale run's recomputation is the compiler's")):
    case("values", "plan", *extra.split(), "--devices", "8", "--recompute", "op", fragment=fragment)

# memrows: PyTorch's cross-entropy where torchtitan computes another, on a wafer, in a Megatron launch
for extra, fragment in (("--hw h100 --devices 8 --tp 2", "plans under PyTorch's FSDP"),
                        ("--hw wse3", "a wafer-scale run's loss is the compiler's"),
                        ("--hw h100 --devices 8 --emit megatron", "Megatron runs its own vocab-parallel one")):
    case("values", "plan", "-m", "llama-3-8b", *extra.split(), "--loss", "torch_fp32", fragment=fragment)
case("values", "plan", "-m", "llama-3-8b", "--hw", "h100", "--devices", "8", "--pp", "2", "--loss", "torch_fp32_held",
     fragment="--loss torch_fp32_held is PyTorch's cross-entropy in a PyTorch training loop")

# bridgedtype: NVFP4 parameters where FusedAdam keeps the master weights (Megatron-Core hands it no shard of them)
case("values", "plan", "-m", "llama-3-8b", "--hw", "b200", "--devices", "8", "--precision", "nvfp4",
     "--fp8-param-gather", "--precision-aware-optimizer", fragment="hands FusedAdam no shard of an NVFP4 parameter")

# hydra: --from-bridge reads Hydra's command-line overrides (what --emit bridge prints and Bridge's scripts take,
# parsed with hydra-core's own OverridesParser, as Megatron-Bridge's parse_hydra_overrides does); what Bridge refuses
# or what btacalc cannot know is one line, exit 2 (before: every case below was "a Bridge recipe's overrides are a
# YAML mapping", the form refused whole)
HYDRA = ("model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=1\n"
         "train.micro_batch_size=1 train.global_batch_size=64 mixed_precision=bf16_mixed\n")
# review28: a Bridge file's precision-aware optimizer beside an FP8 recipe name Megatron-Core does not have, or its
# optimizer state offloaded to the host (the launch's --optimizer-cpu-offload, refused alike)
# bridgedtype: the optimizer's dtypes as Megatron-Bridge's str_to_dtype reads them, or not at all (tests/
# test_bridge_dtypes.py)
for extra, fragment in (("mixed_precision.fp8_recipe=bogus", "fp8_recipe 'bogus': Megatron-Core's recipes are"),
                        ("optimizer.optimizer_cpu_offload=True", "--optimizer-cpu-offload: Megatron-Core's"),
                        ("optimizer.main_params_dtype=torch.float16", "--main-params-dtype fp16: FusedAdam"),
                        ("optimizer.exp_avg_dtype=half", "optimizer.exp_avg_dtype='half': Megatron-Bridge reads a"),
                        ("optimizer.main_grads_dtype=2", "optimizer.main_grads_dtype=2: Megatron-Bridge reads a")):
    case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=fragment, files={"o.txt": HYDRA + "optimizer.use_precision_aware_optimizer=True\n" + extra + "\n"})
for extra, fragment in (
        # struct mode: a key outside ConfigContainer's sections is "Could not override" in Bridge
        ("trainer.max_steps=10", "trainer.max_steps is not a key of Megatron-Bridge's config"),
        # +key= appends, which Bridge refuses where the recipe holds a value (btacalc cannot see the recipe)
        ("+model.num_layers=4", "+model.num_layers=4 adds model.num_layers, which Bridge refuses where the recipe "
         "holds a value"),
        ("+model.hidden_size=", "adds model.hidden_size"),
        # ~key deletes: Bridge keeps the recipe's value, unknown to btacalc
        ("~model.context_parallel_size", "~model.context_parallel_size deletes model.context_parallel_size"),
        ("~model.context_parallel_size=1", "deletes model.context_parallel_size"),
        # a whole float where Megatron takes an integer, refused as the YAML path refuses it (_bridge_value)
        ("model.context_parallel_size=1.0", "model.context_parallel_size: 1.0 is a float, which Megatron-Bridge sets "
         "as given"),
        ("model.window_size=[128.0,0]", "model.window_size[0]: 128.0 is a float"),
        # list syntax Bridge cannot set: Hydra's sweeps (one run per value), a list where a count stands, a nested list
        ("model.context_parallel_size=1,2", "is a Hydra sweep (simple_choice_sweep)"),
        ("'model.context_parallel_size=choice(1,2)'", "is a Hydra sweep (choice_sweep)"),
        ("'model.context_parallel_size=range(1,3)'", "is a Hydra sweep (range_sweep)"),
        ("model.context_parallel_size=[1,2]", "context_parallel_size"),
        ("'model.window_size=[[128,0]]'", "model.window_size: list [[128, 0]] is not an override value"),
        # interpolations resolve against the recipe's config
        ("'model.context_parallel_size=${model.tensor_model_parallel_size}'", "an interpolation, which Bridge "
         "resolves against the recipe's config"),
        ("model.seq_length=\"${oc.env:SEQ}\"", "an interpolation"),
        # not an override at all, an option of the launching script, a config group's package, an unclosed quote
        ("model.num_layers", "'model.num_layers' is not a Hydra override"),
        ("--recipe llama3_8b", "--recipe is a command-line option of the launching script"),
        ("model@pkg.num_layers=4", "a config group's @package"),
        ("=4", "'=4' names no key"),
        ("'model.num_layers=4", "No closing quotation"),
        # review13: the batch sizes as the launch path refuses them (a ZeroDivisionError or --grad-accum before)
        ("train.micro_batch_size=0", "train.micro_batch_size 0: must be at least 1 (Megatron-LM divides by it)"),
        ("train.global_batch_size=-64", "train.global_batch_size -64: must be at least 1 (a count of sequences)"),
):
    case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=fragment, files={"o.txt": HYDRA + extra + "\n"})
# bridgetypo: a name Megatron-Bridge's config does not have (btacalc/data/bridge_fields.toml, its ConfigContainer at
# 067f987d) is refused naming the nearest real one (difflib); before, a misspelt field inside a known section was
# listed as "not modelled by btacalc" and the run planned without it (model.tensor_model_paralell_size=2 at TP 1)
BRIDGE_TYPO = ("train.global_batch_size=64\ntrain.micro_batch_size=1\nmodel.seq_length=4096\n"
               "mixed_precision=bf16_mixed\n")
for text, fragment in (
        ("model.tensor_model_paralell_size=2\n" + BRIDGE_TYPO, "model.tensor_model_paralell_size is not a field of "
         "Megatron-Bridge's model config (Megatron-Bridge@067f987d, btacalc/data/bridge_fields.toml): did you mean "
         "model.tensor_model_parallel_size?"),
        # a dict value merges into its section (Hydra): each of its keys is checked
        ("'model={tensor_model_paralell_size:2}'\n" + BRIDGE_TYPO, "did you mean model.tensor_model_parallel_size?"),
        (BRIDGE_TYPO.replace("train.global_batch_size", "train.global_batch_sise"),
         "did you mean train.global_batch_size?"),
        ("ddp.overlap_grad_reduc=true\n" + BRIDGE_TYPO, "did you mean ddp.overlap_grad_reduce?"),
        ("comm_overlap.tp_comm_overlapp=true\n" + BRIDGE_TYPO, "did you mean comm_overlap.tp_comm_overlap?"),
        ("mixed_precision.fp8_recipes=delayed\n" + BRIDGE_TYPO, "did you mean mixed_precision.fp8_recipe?"),
        # a section misspelt, and a name near nothing (no suggestion)
        ("trian.train_iters=10\n" + BRIDGE_TYPO, "trian is not one of its sections (Megatron-Bridge@067f987d "
         "ConfigContainer): did you mean train?"),
        ("ddp.qqqq=1\n" + BRIDGE_TYPO, "ddp.qqqq is not a field of Megatron-Bridge's ddp config"),
        # the YAML form: Bridge's OmegaConf merge skips a key its config lacks with a warning (omegaconf_utils.py
        # L470-474): refused as the overrides' form refuses it
        (re.sub(r"([\w.]+)=(\S+)\s*", r"\1: \2\n", "model.tensor_model_paralell_size=2\n" + BRIDGE_TYPO),
         "did you mean model.tensor_model_parallel_size?"),
        ("train:\n  global_batch_size: 64\n  micro_batch_sise: 1\nmixed_precision: bf16_mixed\n",
         "train.micro_batch_sise is not a field of Megatron-Bridge's train config"),
        ("trainer:\n  max_steps: 10\nmixed_precision: bf16_mixed\n", "trainer.max_steps is not a key of "
         "Megatron-Bridge's config: trainer is not one of its sections"),
):
    case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge",
         "{tmp}/o." + ("yaml" if ": " in text else "txt"), fragment=fragment,
         files={("o.yaml" if ": " in text else "o.txt"): text})
# --from-megatron already refused an unknown flag; it now names the nearest one too
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="unknown Megatron-LM flag "
     "--tensor-model-paralell-size (not in arguments.py at Megatron-LM@d98e8a64): did you mean "
     "--tensor-model-parallel-size?", files={"l.sh": LAUNCH.replace("--num-layers 4", "--tensor-model-paralell-size 2 --num-layers 4")})
# review14: the suggestion compares the names without their dashes: "--tp" was 0.67 alike to "--sft" by the shared
# "--" alone (difflib's ratio 2*3/9), and "--" itself to "--lr"; a name near nothing gets no suggestion
for flag, fragment in (("--tp 2", "unknown Megatron-LM flag --tp (not in arguments.py at Megatron-LM@d98e8a64)\n"),
                       ("--", "unknown Megatron-LM flag -- (not in arguments.py at Megatron-LM@d98e8a64)\n"),
                       ("--num-layer 4", "did you mean --num-layers?")):
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=fragment,
         files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers 4 " + flag)})
for text, fragment in (("", "no overrides (the file is empty)"), ("# a comment\n\n", "no overrides (the file is empty)"),
                       # a mix of YAML and overrides: Bridge reads one file as YAML (OmegaConf.load), never both
                       ("model:\n  num_layers: 4\ntrain.micro_batch_size=1\n",
                        "a mix of Hydra overrides (line 3: train.micro_batch_size=1) and YAML (line 1: model:)"),
                       ("train.micro_batch_size=1\nddp.overlap_grad_reduce: true\n", "a mix of Hydra overrides"),
                       # a string where Megatron takes a number (Hydra's quotes inside the shell's), as the YAML
                       # path refuses it; unquoted by the shell alone, "4" is the integer 4, as Bridge reads it
                       (HYDRA + "'ddp.num_buckets=\"4\"'\n", "ddp.num_buckets: '4' is a string")):
    case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=fragment, files={"o.txt": text})

# review14: a key below a field btacalc reads as one value (model.tensor_model_parallel_size.a, a YAML key with a dot
# in it, a Hydra dict under the field) was listed "ignored: not modelled by btacalc" and the run planned at the
# field's default (TP 1); Hydra refuses a key under a value node. And a +/~ override of a misspelt key named the
# misspelling as the key to write; the nearest real field is named first now.
for text, fragment in (
        ("model.tensor_model_parallel_size.a=2\n" + BRIDGE_TYPO, "model.tensor_model_parallel_size.a: "
         "model.tensor_model_parallel_size takes one value"),
        ("'model={tensor_model_parallel_size:{a:2}}'\n" + BRIDGE_TYPO, "model.tensor_model_parallel_size takes one "
         "value"),
        ("train.micro_batch_size.x=1\n" + BRIDGE_TYPO.replace("train.micro_batch_size=1\n", ""),
         "train.micro_batch_size takes one value"),
        ("+model.tensor_model_paralell_size=2\n" + BRIDGE_TYPO, "did you mean model.tensor_model_parallel_size?"),
        ("~model.tensor_model_paralell_size\n" + BRIDGE_TYPO, "did you mean model.tensor_model_parallel_size?"),
        ("+trainer.max_steps=2\n" + BRIDGE_TYPO, "trainer is not one of its sections"),
        ("model:\n  tensor_model_parallel_size:\n    a: 2\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n"
         "mixed_precision: bf16_mixed\n", "model.tensor_model_parallel_size takes one value"),
        ('model:\n  "pipeline_model_parallel_size.x": 1\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n'
         "mixed_precision: bf16_mixed\n", "model.pipeline_model_parallel_size.x: model.pipeline_model_parallel_size "
         "takes one value"),
):
    case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge",
         "{tmp}/o." + ("yaml" if ": " in text else "txt"), fragment=fragment,
         files={("o.yaml" if ": " in text else "o.txt"): text})
# review14: a measured run's software_date in ASCII digits (re's \d took "２０２５-04"), no earlier than CUDA 1.0
# (2007-06) and no later than this month; a source without a date is refused
for extra, fragment in (({"software_date": "\uff12\uff10\uff12\uff15-04"}, "is not a month written YYYY-MM"),
                        ({"software_date": "0000-01"}, "software_date 0000-01 is not a release month"),
                        ({"software_date": "2006-12"}, "from 2007-06 (CUDA 1.0) to this month"),
                        ({"software_date": "9999-01"}, "software_date 9999-01 is not a release month"),
                        ({"software_date_source": "NGC 25.04"}, "software_date_source is given without "
                         "software_date")):
    case("files", "validate", "--measured", "{tmp}/runs.json", fragment=fragment, outputs=False,
         files={"runs.json": json.dumps({"runs": [{
             "id": "r", "source": "test", "model": "mixtral-8x7b", "hw": "h100", "devices": 8, "precision": "bf16",
             "seq": 4096, "global_batch": 64, "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check",
             **extra}]})})

# review13: --te-version as te_releases.toml's version grammar reads it (major.minor[.patch][.devN][+build]), on each
# command that takes it; the empty word and a bare "+" are no version
for command in (["plan"], ["compare"], ["sweep", "--vary", "experts=16,32"]):
    for version, fragment in (("banana", "--te-version 'banana': expected a TransformerEngine version"),
                              ("", "--te-version '': expected a TransformerEngine version"),
                              ("1.10+", "--te-version '1.10+': expected"), ("2..2", "--te-version '2..2': expected")):
        case("values", *command, "-m", "qwen3-30b-a3b", "--hw", "gb200", "--devices", "64", "--precision", "fp8",
             "--te-version", version, fragment=fragment)
# review13: a run file's TOML float where an option takes text lost its trailing zeros (te-version = 1.10 planned
# TransformerEngine 1.1)
for line in ("te-version = 1.10", "te-version = 2.20"):
    case("files", "plan", "--config", "{tmp}/run.toml", outputs=False,
         fragment=f"te-version = {float(line.split('= ')[1])!r} is a TOML number, which keeps no trailing zeros",
         files={"run.toml": f'model = "qwen3-30b-a3b"\nhw = "gb200"\ndevices = 64\nprecision = "fp8"\n{line}\n'})
# a Bridge overrides file without a 16-bit recipe: the refusal names Bridge's keys, not Megatron's flags
for text in ("model.tensor_model_parallel_size=2\ntrain.global_batch_size=64\ntrain.micro_batch_size=1\n",
             "model:\n  tensor_model_parallel_size: 2\ntrain:\n  global_batch_size: 64\n  micro_batch_size: 1\n"):
    case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment="o.txt: the overrides train in fp32 (no mixed_precision such as bf16_mixed", files={"o.txt": text})
# --te-version on Hopper under delayed scaling: per-tensor FP8 GEMMs are TN-only below compute capability 10.0, every
# release transposes, and Megatron-Core keeps the projection's quantised copy under every release (fp8-current takes
# it: the release decides that copy, tests/test_proj_copy.py)
for hw in ("h100", "h200"):
    case("values", "plan", "-m", "llama-3-8b", "--hw", hw, "--devices", "8", "--precision", "fp8",
         "--te-version", "2.2", fragment=f"(compute capability 10.x-11.x, 13.0 on); {hw} has 9.0")
# review13: a wafer refused --te-version only where it differed from the default, so the pinned TE's own version and
# the empty word (read as not given) were planned in silence
for version in ("2.20.0.dev0+d0067d0", "", "1.10"):
    case("values", "plan", "-m", "qwen3-30b-a3b", "--hw", "wse3", "--te-version", version,
         fragment="--te-version: the TransformerEngine release decides GPU FP8 casts and transposes; a wafer-scale run")


# hostile15: what review3 ... review14 missed
# a run file or a Bridge recipe nested 5,000 deep was an internal error (RecursionError, exit 3); a profile was refused
DEEP = 5000
case("files", "plan", "--config", "{tmp}/run.toml", outputs=False, fragment="run.toml': not TOML: nested too deeply",
     files={"run.toml": "a = " + "[" * DEEP + "]" * DEEP + "\n"})
case("files", "plan", "--config", "{tmp}/run.toml", outputs=False, fragment="run.toml': not TOML: nested too deeply",
     files={"run.toml": "a = " + "{x = " * DEEP + "1" + "}" * DEEP + "\n"})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
     fragment="r.yaml: nested too deeply to read", files={"r.yaml": "model:\n  a: " + "[" * DEEP + "]" * DEEP + "\n"})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
     fragment="r.yaml: nested too deeply to read",
     files={"r.yaml": "model:\n" + "".join(" " * (i + 1) + "a:\n" for i in range(1200))})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: nested too deeply to read", files={"o.txt": "model.a=" + "[" * DEEP + "]" * DEEP + "\n"})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: nested too deeply to read", files={"o.txt": "model.a=" + "{a:" * 3000 + "1" + "}" * 3000 + "\n"})
# a name that shows nothing: only format characters (zero-width space, soft hyphen, direction isolates, the BOM) or
# only control characters (--name $'\x01' became the model name "", past the check of spaces alone)
for shown in ("\u200b", "\u00ad\u2066\u2069", "\ufeff", "\x01", "\x1b\x07 \u200b"):
    case("values", "plan", "--name", shown, fragment="--name must not be empty (or only spaces, control and invisible "
         "format characters)")
case("values", "sweep", "--vary", "experts=16", "--name", "\u200b", fragment="--name must not be empty")
case("values", "compare", "--name", "\x01", fragment="--name must not be empty")
case("files", "validate", "--measured", "{tmp}/runs.json", outputs=False, fragment="field id: must not be empty",
     files={"runs.json": json.dumps({"runs": [{
         "id": "\u200b\u2060", "source": "test", "model": "llama-3-8b", "hw": "h100", "devices": 8, "precision": "bf16",
         "seq": 128, "global_batch": 8, "measured": {"tokens_per_s_per_device": 1000.0}, "role": "check"}]})})
case("profiles", "hw", "check", "{tmp}/p.toml", fragment="display_name",
     files={"p.toml": re.sub(r'display_name = "[^"]*"', 'display_name = "\u200b"', GPU_PROFILE, count=1)})
# a number option given NaN or an infinity: the range check read "Input should be less than or equal to 100"
for args in (["plan", "--sensitivity", "nan"], ["plan", "--sensitivity", "-inf"], ["plan", "--routing-imbalance", "nan"],
             ["plan", "--routing-imbalance", "1e309"], ["measure", "--real", "--real-limit-gb", "nan"]):
    case("usage", *args, fragment=f"{args[-2]} takes a finite number, got '{args[-1]}'")
for line in ("routing-imbalance = nan", "sensitivity = inf", "sensitivity = -1e400"):
    case("files", "plan", "--config", "{tmp}/run.toml", outputs=False, fragment="takes a finite number, got",
         files={"run.toml": line + "\n"})
# Bridge hands num_moe_experts to TransformerConfig, which refuses 0 or fewer (Megatron-LM's own --num-experts 0 is
# dense): model.num_moe_experts=0 was planned as a dense model
for value in ("0", "-2"):
    case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=f"o.txt: model.num_moe_experts={value}: Megatron-Core refuses 0 or fewer experts",
         files={"o.txt": HYDRA + f"model.num_moe_experts={value}\n"})
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
     fragment="r.yaml: model.num_moe_experts=0: Megatron-Core refuses", files={"r.yaml": "model:\n  num_moe_experts: 0\n"
     "  tensor_model_parallel_size: 2\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 64\nmixed_precision: bf16_mixed\n"})

# a run file's option given twice under two spellings: the last won in silence (the command line refuses a repeat)
for lines, fragment in (("global-batch = 64\nglobal_batch = 128\n", "global-batch and global_batch are one option "
                         "(--global-batch): give it once"),
                        ("as_json = true\njson = false\n", "as_json and json are one option (--json)")):
    case("files", "plan", "--config", "{tmp}/run.toml", outputs=False, fragment=fragment,
         files={"run.toml": 'model = "llama-3-8b"\nhw = "h100"\ndevices = 8\n' + lines})
# the options a run file cannot hold were "unknown option", though plan has them
for key in ("schema", "config"):
    case("files", "plan", "--config", "{tmp}/run.toml", outputs=False,
         fragment=f"{key} is a plan option a run file cannot hold", files={"run.toml": f"{key} = true\n"})

# hostile16: what hostile15 left
# `# btacalc option:` lines (the plan options no Megatron flag sets, which --emit writes and --from-* read back): a line
# btacalc would not write is refused, never skipped
for line, fragment in (("--tp 2", "--tp is not an option btacalc writes in a comment"),
                       ("--routing-imbalance nan", "--routing-imbalance takes a finite number, got 'nan'"),
                       ("--routing-imbalance", "--routing-imbalance needs a value"),
                       ("--no-rht-cast-fusion yes", "--no-rht-cast-fusion is a switch and takes no value"),
                       ("routing imbalance 1.5", "takes --flag [value] (what it means)")):
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment=f"launch.args: line 1: "
         f"# btacalc option: {fragment}", files={"launch.args": f"# btacalc option: {line}\n" + LLAMA_LAUNCH})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args",
     fragment="line 2: # btacalc option: --te-version: te-version is given twice",
     files={"launch.args": "# btacalc option: --te-version 2.2\n# btacalc option: --te-version 2.9\n" + LLAMA_LAUNCH})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: line 1: # btacalc option: --routing-imbalance takes a finite number, got 'inf'",
     files={"o.txt": "# btacalc option: --routing-imbalance inf\n" + HYDRA})
# fp16: a launch with --fp16 and FP8 (btacalc's FP8 recipes run over bf16), or --bf16 and --fp16 (Megatron asserts one)
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment="--fp16 with --fp8-format",
     files={"launch.args": LLAMA_LAUNCH.replace("--bf16", "--fp16", 1)})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment="--bf16 and --fp16 together",
     files={"launch.args": LLAMA_LAUNCH.replace("--bf16", "--bf16 --fp16", 1)})
# the wafer emitters write no precision: fp16 would be emitted as bf16
for emit in ("cerebras", "modelzoo"):
    case("values", "plan", "--hw", "wse3", "--precision", "fp16", "--emit", emit,
         fragment=f"--emit {emit} writes no precision setting")
# Bridge's mixed precision: fp8_param and fp8_param_gather kept equal by Bridge; both bf16 and fp16
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="mixed_precision.fp8_param=False and mixed_precision.fp8_param_gather=True: Megatron-Bridge keeps the "
     "two equal", files={"o.txt": HYDRA.replace("bf16_mixed", "bf16_with_fp8_delayed_scaling_mixed") +
                         "mixed_precision.fp8_param_gather=true\nmixed_precision.fp8_param=false\n"})
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="mixed_precision sets both bf16 and fp16", files={"o.txt": HYDRA + "mixed_precision.fp16=true\n"})
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="mixed_precision.fp8=1: Megatron-Bridge takes a recipe name (a string) or null",
     files={"o.txt": HYDRA + "mixed_precision.fp8=1\n"})
# hostile17: an FP8 (FP4) parameter gather with no FP8 (FP4) recipe, refused naming the Bridge fields given (it named
# btacalc's --fp8-param-gather); Megatron-Core refuses fp8_param without fp8 (transformer_config.py L1566-1567)
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: mixed_precision.fp8=null with mixed_precision=bf16_with_fp8_delayed_scaling_mixed, whose recipe "
     "sets fp8_param_gather = True: a parameter gather in FP8 needs an FP8 recipe",
     files={"o.txt": HYDRA.replace("bf16_mixed", "bf16_with_fp8_delayed_scaling_mixed") + "mixed_precision.fp8=null\n"})
case("values", "plan", "--hw", "b200", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: mixed_precision.fp4=null with mixed_precision=bf16_with_nvfp4_mixed, whose recipe sets "
     "fp4_param_gather = True: a parameter gather in FP4 needs an FP4 recipe",
     files={"o.txt": HYDRA.replace("bf16_mixed", "bf16_with_nvfp4_mixed") + "mixed_precision.fp4=null\n"})
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: mixed_precision=bf16_mixed (no fp8) with mixed_precision.fp8_param_gather=true: a parameter "
     "gather in FP8 needs an FP8 recipe", files={"o.txt": HYDRA + "mixed_precision.fp8_param_gather=true\n"})
# a mixed-precision switch given a word: Bridge sets it as given, and a non-empty string is true
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="mixed_precision.grad_reduce_in_fp32: 'maybe' is a string",
     files={"o.txt": HYDRA + "mixed_precision.grad_reduce_in_fp32=maybe\n"})

# hostile20: a billion-laughs bomb of mappings (8 sections of 8 aliases of the one before, 8^6 = 262,144 keys from
# 0.4 KB): the dotted-key walk took minutes and gigabytes at 9 levels; now refused once it passes 10,000 keys
_LAUGHS = "l0: &l0 {" + ", ".join(f"k{i}: 1" for i in range(8)) + "}\n" + "".join(
    f"l{n}: &l{n} {{" + ", ".join(f"k{i}: *l{n - 1}" for i in range(8)) + "}\n" for n in range(1, 7))
case("bounds", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
     fragment="r.yaml: more than 10,000 keys with the YAML aliases expanded (reached at l", files={"r.yaml": _LAUGHS + BRIDGE})
# a backslash with blanks after it ends the line in a shell: "join them to it with \\", which the file did
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: flags after the launch command "
     "(--num-layers ...): join them to it with \\ (line 1 ends in a backslash and then blanks, which a shell reads as an "
     "escaped blank", files={"l.sh": "torchrun --nproc_per_node 8 pretrain_gpt.py \\ \n" + LAUNCH.split("py ", 1)[1]})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: ' ' (a word of blanks) is not a Hydra override (line 1 ends in a backslash and then blanks",
     files={"o.txt": HYDRA.replace("\n", " \\ \n", 1)})
# the shared decoder's refusals named no file ($(...) is not run, so $L stays unexpanded), and in a Bridge file a
# Megatron-LM flag it does not use (seq_length's list was named --max-position-embeddings, which it sets)
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh",
     fragment="l.sh: Megatron-LM's --num-layers (num_layers) takes an integer, got '$L'",
     files={"l.sh": "L=$(echo 4)\n" + LAUNCH.replace("--num-layers 4", "--num-layers $L")})
# a variable set from a command's output (which btacalc does not run): `${L:-32}` was read as 32 in silence (bash gives
# the command's 16), and `export L=$(echo 16)` set L to "$(echo"
for assignment in ("L=$(echo 16)", "export L=$(echo 16)", "L=`echo 16`"):
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM's --num-layers "
         "(num_layers) takes an integer, got '${L:-32}': a variable the file does not set, sets from a command's",
         files={"l.sh": assignment + "\n" + LAUNCH.replace("--num-layers 4", "--num-layers ${L:-32}")})
# bash arithmetic over a variable the file sets from a command: refused, not read as 0 (bash's unset)
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM's --num-layers "
     "(num_layers) takes an integer, got '$((L*2))': a variable the file does not set, sets from a command's output",
     files={"l.sh": "L=$(nproc)\n" + LAUNCH.replace("--num-layers 4", "--num-layers $((L*2))")})
# two launches (an if/else, or one after the other): the first was planned and the second passed over in silence;
# flags before the launch were said to come "after" it
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: two commands run a Python "
     "script (pretrain_gpt.py, then pretrain_gpt.py): btacalc reads one launch",
     files={"l.sh": "if [ -n \"$SMALL\" ]; then\n" + LAUNCH.replace("--num-layers 4", "--num-layers 2") + "else\n"
            + LAUNCH + "fi\n"})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: two commands run a Python "
     "script (pretrain_gpt.py, then pretrain_gpt.py)", files={"l.sh": LAUNCH.rstrip() + " 2>&1 | tee a.log && " + LAUNCH})
# a model size of 0: "the inputs take a number beyond the arithmetic's range (ZeroDivisionError ...)" (--seq-length,
# --num-attention-heads), or read as not given and planned (--kv-channels 0 as h/a, --num-query-groups 0 as MHA,
# --moe-ffn-hidden-size 0 as the dense FFN; Megatron-LM takes the 0)
for old, new in (("--seq-length 128", "--seq-length 0"), ("--num-attention-heads 4", "--num-attention-heads 0"),
                 ("--num-layers 4", "--num-layers 4 --kv-channels 0"), ("--num-layers 4", "--num-layers 4 --num-query-groups 0"),
                 ("--moe-ffn-hidden-size 512", "--moe-ffn-hidden-size 0"), ("--num-layers 4", "--num-layers -4")):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh",
         fragment=f"l.sh: {new.split()[-2]} {new.split()[-1]}: must be at least 1 (a size of the model)",
         files={"l.sh": LAUNCH.replace(old, new)})
# torchrun's sizes as a variable the file does not set, gpu / auto, an elastic range: refused even beside --devices
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: torchrun's --nnodes $SLURM_NNODES "
     "is no number of processes btacalc can read (a variable the file does not set, gpu, auto or an elastic range): give "
     "--devices", files={"l.sh": LAUNCH.replace("--nproc_per_node 8", "--nproc_per_node 8 --nnodes $SLURM_NNODES")})
# a NUL byte: a launch's `--num-layers 3<NUL>2` was refused as the integer '3\x002', a Hydra file's as a token
# recognition error, /proc/self/environ read as overrides
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh': not text: a NUL byte (byte 58)",
     files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers 4\0 2").encode()})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt': not text: a NUL byte (byte 0)", files={"o.txt": ("\0" + HYDRA).encode()})
# a Bridge sequence beyond the bound was refused naming max_position_embeddings, which Bridge derives from it
case("bounds", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment=f"o.txt: model.seq_length {10**26}: beyond 2^62 tokens", files={"o.txt": HYDRA + f"model.seq_length={10**26}\n"})
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: model.seq_length 0: must be at least 1 (a size of the model)", files={"o.txt": HYDRA + "model.seq_length=0\n"})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: flags before the launch "
     "command (--num-layers ...): move them into it", files={"l.sh": "--num-layers 4\n" + LAUNCH.replace("--num-layers 4 ", "")})
case("files", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
     fragment="r.yaml: train.micro_batch_size takes an integer, got True",
     files={"r.yaml": BRIDGE.replace("  micro_batch_size: 2", "  micro_batch_size: true")})
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: model.seq_length takes an integer, got [1, 2]", files={"o.txt": HYDRA + "model.seq_length=[1,2]\n"})

# --- hostile21 ------------------------------------------------------------------------------------------------
# a sweep with --plot whose points all fit nowhere: its JSON (or "written to p.png, out.csv, out.json") was printed,
# then the plot was refused with exit 2 and no file written
NOTHING_FITS = ("sweep", "--hw", "h100", "--devices", "8", "--vary", "seq=1024,2048", "--plot", "{tmp}/p.png")
# without the plot extra (a fresh `pip install '.[test]'`) --plot is refused first, before any point is solved
NOTHING_TO_DRAW = ("--plot: no point of the sweep fits, nothing to draw" if importlib.util.find_spec("matplotlib")
                   else "--plot needs matplotlib")
case("outputs", *NOTHING_FITS, fragment=NOTHING_TO_DRAW)
case("outputs", *NOTHING_FITS, "--json", fragment=NOTHING_TO_DRAW, outputs=False)
# a runs file with no runs: "within the documented bands", exit 0, nothing checked
case("files", "validate", "--measured", "{tmp}/none.json", fragment="none.json holds no runs: nothing to predict or check",
     files={"none.json": '{"runs": []}'}, outputs=False)
# a range's step or factor refused as a "value" ("--devices value 0 must be positive" for '8:16:0')
for spec, fragment in (("8:16:0", "range '8:16:0': step 0 must be positive"),
                       ("8:16:x0", "range '8:16:x0': factor 0 must be positive"),
                       ("8:16:a", "range '8:16:a': step 'a' is not an integer")):
    case("ranges", "compare", "--hw", "h100", "--devices", spec, fragment="--devices " + fragment)
case("ranges", "sweep", "--hw", "wse3", "--vary", "seq=1024:4096:-1024",
     fragment="--vary seq range '1024:4096:-1024': step -1024 must be positive")
# an MFU above 1 is no target (the model's FLOPs over the peak): 31 trace rows and "not reached", exit 1
for value in ("1.5", "2"):
    case("values", "whatif", "--hw", "wse3", "--target", f"mfu={value}", "--solve-for", "chip.peak_flops_per_s",
         fragment=f"--target 'mfu={value}': mfu is the share of the peak FLOP/s the model's FLOPs use, at most 1")

# --- hostile22 ------------------------------------------------------------------------------------------------
# `${NAME:?message}` of a variable the launch does not set: bash stops the script, the launch never runs (it was
# refused "'NUM_LAYERS}' is not a Megatron-LM flag", and with the variable set refused too)
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: ${NUM_LAYERS:?give NUM_LAYERS}: "
     "NUM_LAYERS is empty or not set in the file, so bash stops the script there (give NUM_LAYERS) and the launch never "
     "runs", files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers ${NUM_LAYERS:?give NUM_LAYERS}")})
# a YAML key "" was read as its section and listed "ignored model.: not modelled by btacalc", exit 0
case("files", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
     fragment="r.yaml: 'model.' has an empty name (a YAML key \"\" or a dot at an end or doubled)",
     files={"r.yaml": BRIDGE.replace("model:\n", "model:\n  \"\": 1\n")})
# a `#` inside a Hydra word began a comment: the overrides after it on the line were dropped, exit 0; the shell passes
# the word whole and Hydra's grammar refuses it
case("files", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: 'logger.wandb_exp_name=run#3' is not a Hydra override",
     files={"o.txt": "logger.wandb_exp_name=run#3 " + HYDRA})

# more model-parallel ranks than processes (TP 16 on 8, CP 16): "the inputs take a number beyond the arithmetic's
# range (ZeroDivisionError: integer modulo by zero)" from the batch rule (data parallel 0)
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM would refuse this "
     "launch: the processes (world size) must be a multiple of --tensor-model-parallel-size x "
     "--pipeline-model-parallel-size x --context-parallel-size (Megatron-LM@d98e8a64 megatron/training/arguments.py:432)",
     files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers 4 --context-parallel-size 16")})
case("values", "plan", "--hw", "h100", "-m", "llama-3-8b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: Megatron would refuse this run: the processes (world size) must be a multiple of "
     "model.tensor_model_parallel_size",
     files={"o.txt": HYDRA.replace("model.tensor_model_parallel_size=2", "model.tensor_model_parallel_size=16")})

# --moe-layer-freq 0 (Megatron-Core's i % N) was "the inputs take a number beyond the arithmetic's range
# (ZeroDivisionError: integer modulo by zero)"; a Bridge file is named by its key
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM's --moe-layer-freq "
     "(moe_layer_freq) takes an N of at least 1 (layer i is an MoE layer when i % N == 0",
     files={"l.sh": LAUNCH.replace("--num-experts 8", "--num-experts 8 --moe-layer-freq 0")})
case("values", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: model.moe_layer_freq takes an N of at least 1", files={"o.txt": BRIDGE_MOE + "model.moe_layer_freq=0\n"})

# a command's output as a value: "takes an integer, got '$(nproc)'" with no reason, and `$(echo 4)` unquoted, split at
# its blank, "'4)' is not a Megatron-LM flag (a value without its flag?)"
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM's --num-layers "
     "(num_layers) takes an integer, got '$(nproc)': $(...) or `...`, a command's output, which btacalc does not run",
     files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers $(nproc)")})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: '4)' is not a Megatron-LM flag "
     "(part of a $(...) or `...` split at its blanks: a command's output, which btacalc does not run: give the value)",
     files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers $(echo 4)")})

# a dropout rate that is no probability: NaN or -0.1 read "attention_dropout > 0 is not modelled", and GPT-2's three
# rates at 1.5 read as no dropout (planned, exit 0)
GPT2_CONFIG = (Path(__file__).parent / "data" / "gpt2-small.config.json").read_text()
QWEN3_MOE_CONFIG = (Path(__file__).parent / "data" / "qwen3-30b-a3b.config.json").read_text()
case("files", "plan", "--model", "{tmp}/config.json", fragment="config.json: field 'attention_dropout' must be a "
     "probability in [0, 1], got -0.1", files={"config.json": QWEN3_MOE_CONFIG.replace('"attention_dropout": 0.0',
                                                                                      '"attention_dropout": -0.1')})
case("files", "plan", "--model", "{tmp}/config.json", fragment="config.json: field 'resid_pdrop' must be a probability "
     "in [0, 1], got 1.5", files={"config.json": re.sub(r'"(resid|embd|attn)_pdrop": 0.1', r'"\1_pdrop": 1.5', GPT2_CONFIG)})

# --num-layers 2^63 - 1 in an MoE launch or Bridge file: the MoE pattern was built one layer at a time before the
# model's bound was checked, and the command ran until it was stopped, its memory growing
case("bounds", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"l.sh: --num-layers {2**63 - 1}: more "
     "than 10,000 layers, btacalc's bound on a model", files={"l.sh": LAUNCH.replace("--num-layers 4",
                                                                                    f"--num-layers {2**63 - 1}")})
case("bounds", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment=f"o.txt: model.num_layers {2**63 - 1}: more than 10,000 layers",
     files={"o.txt": BRIDGE_MOE.replace("model.num_layers=4", f"model.num_layers={2**63 - 1}")})

# a YAML tag given a value it cannot take: "internal error (please report ...): ValueError: invalid literal for int()",
# KeyError: 'maybe', AttributeError ... 'groupdict'
for tagged, error in (("!!int 4.5", "ValueError: invalid literal for int()"), ("!!bool maybe", "KeyError: 'maybe'"),
                      ("!!timestamp abc", "AttributeError"), ("!!set 4", "ValueError: not enough values to unpack")):
    case("files", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/r.yaml",
         fragment=f"r.yaml: not YAML: a value its tag cannot take (such as !!int 4.5): {error}",
         files={"r.yaml": BRIDGE.replace("  tensor_model_parallel_size: 4", f"  tensor_model_parallel_size: {tagged}")})

# recompute_modules that is no list of names: a number, a boolean or [1,2] was an internal error (exit 3); a string
# was read letter by letter ("--recompute: recompute '_,a,c,e,n,o,r,t,t' names t twice")
for value, got in (("3", "3"), ("true", "True"), ("[1,2]", "[1, 2]"), ("core_attn", "'core_attn'")):
    case("files", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=f"o.txt: model.recompute_modules takes a list of module names (such as [core_attn,mlp]), got {got}",
         files={"o.txt": BRIDGE_MOE + f"model.recompute_granularity=selective model.recompute_modules={value}\n"})


# hostile23: bash forms the launch reader passed on as written, split or misread without a word; each is now read as
# bash reads it (tests/test_launch_quoting.py) or refused naming the form
_SETS = "L=32\nD=/data/x.bin\n"
for form, said in (("${L%2}", "${L%2}, a parameter expansion that removes a suffix"),
                   ("${D##*/}", "${D##*/}, a parameter expansion that removes a prefix"),
                   ("${L/3/x}", "${L/3/x}, a parameter expansion that replaces a pattern"),
                   ("${L:0:1}", "${L:0:1}, a parameter expansion that takes a substring"),
                   ("${!L}", "${!L}, an indirect expansion"), ("{1..4}", "{1..4}, a brace expansion"),
                   ("a{b,c}", "{b,c}, a brace expansion"), ("$0", "$0, the script's name"),
                   ("$$", "$$, the shell's process id"),
                   ("$((L^3))", "$((L^3)), bash arithmetic with an operator or number btacalc does not evaluate"),
                   ("$((--L))", "$((--L)), bash arithmetic with an operator or number")):
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"l.sh: {said}", files={
        "l.sh": _SETS + LAUNCH.replace("--num-layers 4", f"--num-layers 4 --data-path {form}")})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: A holds {4,8}, a brace expansion "
     "(bash makes a word of each item), which btacalc does not expand as bash does: give the value",
     files={"l.sh": "A=( --num-layers {4,8} )\n" + LAUNCH.replace("--num-layers 4", '"${A[@]}"')})
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="bash arithmetic $((7//2)): '/' where "
     "an operand stands (a syntax error: bash stops the script there)",
     files={"l.sh": LAUNCH.replace("--num-layers 4", "--num-layers $((7//2))")})
# an array's $NAME is its first element: bash passes --num-layers alone (it read every element)
case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: --num-layers needs a value",
     files={"l.sh": "A=( --num-layers 4 )\n" + LAUNCH.replace("--num-layers 4", "$A")})

# hostile23: the MLA YaRN and DeepSeek routing flags at values Megatron cannot train, or refuses
MLA_LAUNCH = LAUNCH.replace("\n", " --multi-latent-attention --qk-layernorm --position-embedding-type rope "
                            "--rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 --moe-router-num-groups 4 "
                            "--moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5\n")
for old, new, said in (
        # Megatron's `if not self.moe_router_num_groups` (a ZeroDivisionError in the split rule's modulo before)
        ("--moe-router-num-groups 4", "--moe-router-num-groups 0", "Megatron-LM would refuse this launch: "
         "--moe-router-group-topk (group-limited routing) needs --moe-router-num-groups"),
        # read as no YaRN (RoPE), or planned at factor inf
        ("--rotary-scaling-factor 40", "--rotary-scaling-factor 0.5", "--rotary-scaling-factor (rotary_scaling_factor) "
         "takes a YaRN context extension of at least 1 (1: none, plain RoPE), got '0.5': below 1 the positions"),
        ("--rotary-scaling-factor 40", "--rotary-scaling-factor -40", "got '-40'"),
        ("--rotary-scaling-factor 40", "--rotary-scaling-factor inf", "takes a YaRN context extension of at least 1"),
        # planned at nan / inf
        ("--mscale 1.0", "--mscale nan", "field yarn.mscale: Input should be a finite number"),
        ("--mscale-all-dim 1.0", "--mscale-all-dim inf", "field yarn.mscale_all_dim: Input should be a finite number"),
        ("--moe-router-topk-scaling-factor 2.5", "--moe-router-topk-scaling-factor inf",
         "field router_scale: Input should be a finite number")):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"l.sh: {said}" if
         said.startswith(("Megatron", "field")) else said, files={"l.sh": MLA_LAUNCH.replace(old, new)})
# GPT-OSS's YaRN: an original table of 0 was read as not given (4096)
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="field "
     "yarn.original_max_position_embeddings: Input should be greater than 0", files={"l.sh": LAUNCH.replace(
         "\n", " --position-embedding-type yarn --rotary-scaling-factor 32 --yarn-original-max-position-embeddings 0\n")})

# hostile23: Megatron-LM's argparse choices are case-sensitive (TransformerConfig's Literal fields, AttnBackend's names):
# these were planned (Sigmoid as the softmax router, banana as flash attention)
for flag, value, near in (("--normalization", "rmsnorm", ": did you mean RMSNorm?"),
                          ("--attention-backend", "FUSED", ": did you mean fused?"), ("--attention-backend", "banana", ""),
                          ("--moe-router-score-function", "Sigmoid", ": did you mean sigmoid?"),
                          ("--moe-token-dispatcher-type", "AllToAll", ": did you mean alltoall?")):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"{flag} '{value}': Megatron-LM's "
         f"argparse takes one of", files={"l.sh": LAUNCH.replace("\n", f" {flag} {value}\n")})
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"stops the launch otherwise{near}\n",
         files={"l.sh": LAUNCH.replace("\n", f" --bf16 {flag} {value}\n")})

# review21: arguments.py's own choices (hostile23's table held two of them) and a list option's items: these were read
# (an unread flag listed as not modelled) where Megatron-LM's argparse stops
for flags, shown, near in (("--optimizer Adam", "--optimizer 'Adam'", "adam"),
                           ("--data-parallel-sharding-strategy OPTIM", "--data-parallel-sharding-strategy 'OPTIM'",
                            "optim"),
                           ("--moe-router-load-balancing-type aux_loss AUX_LOSS",
                            "--moe-router-load-balancing-type 'AUX_LOSS'", "aux_loss"),
                           ("--fp8-amax-compute-algo MAX", "--fp8-amax-compute-algo 'MAX'", "max")):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"{shown}: Megatron-LM's argparse "
         f"takes one of", files={"l.sh": LAUNCH.replace("\n", f" --bf16 {flags}\n")})
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment=f"did you mean {near}?\n",
         files={"l.sh": LAUNCH.replace("\n", f" --bf16 {flags}\n")})

# hostile23: a shared-expert width of 0 (TransformerConfig L1813-1819; "0" was a width: "shared experts take no bias"),
# a sqrtsoftplus router (planned as the softmax router, in silence)
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM would refuse this "
     "launch: --moe-shared-expert-intermediate-size must be positive",
     files={"l.sh": LAUNCH.replace("\n", " --moe-shared-expert-intermediate-size 0\n")})
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: --moe-router-score-function "
     "sqrtsoftplus: btacalc models the softmax and sigmoid routers",
     files={"l.sh": LAUNCH.replace("\n", " --moe-router-score-function sqrtsoftplus\n")})

# hostile23: a name too long to be a file's was "cannot read or write .../hardware_profiles/hhh...: File name too long",
# the whole name echoed on the line
for cmd, option, what in ((["plan", "--hw"], "--hw", "hardware"), (["plan", "--model"], "--model", "model"),
                          (["hw", "show"], "profile", "hardware"), (["models", "show"], "model", "model")):
    case("names", *cmd, "h" * 300, fragment=f"{option}: unknown {what} '{'h' * 56}...: no built-in name, and at 300 "
         "characters too long to be a file's")

# hostile23: a precision's case variant (Megatron-LM and TransformerEngine spell them lower-case) is refused naming it,
# as --hw H100 and --model names are, on every surface that takes one
for args, said in ((["plan", "--hw", "b200", "--precision", "BF16"], "'BF16' is not one of 'bf16', 'fp16', 'fp8', "
                    "'fp8-current', 'fp8-blockwise', 'mxfp8', 'nvfp4'"),
                   (["plan", "--hw", "b200", "--precision", "MXFP8"], "did you mean mxfp8?"),
                   (["sweep", "--hw", "b200", "--vary", "precision=bf16,MXFP8"], "--vary precision: 'MXFP8' is not one "
                    "of bf16, fp16, fp8, fp8-current, fp8-blockwise, mxfp8, nvfp4: did you mean mxfp8?"),
                   (["compare", "--hw", "b200", "--precision", "bf16,Fp8_Current"], "got 'Fp8_Current': did you mean "
                    "fp8-current?"),
                   (["whatif", "--hw", "h100", "--precision", "FP8", "--target", "mfu=0.5", "--solve-for",
                     "chip.peak_flops_per_s"], "did you mean fp8?")):
    case("names", *args, fragment=said + ("" if "did you mean" in said else ": did you mean bf16?"))
case("files", "validate", "--measured", "{tmp}/r.json", fragment="field precision: 'BF16' is not one of bf16, fp16, "
     "fp8, fp8-current, fp8-blockwise, mxfp8, nvfp4: did you mean bf16?", files={"r.json": json.dumps({"runs": [{
         "id": "a", "source": "https://x.org", "model": "llama-3-8b", "hw": "h100", "devices": 8, "precision": "BF16",
         "seq": 8192, "global_batch": 128, "tokens_per_s_per_device": 1000}]})})
# numerics23: a Llama-like config.json's rope_scaling of a type Megatron cannot state was planned and launched as plain
# RoPE without a word (dynamic NTK, longrope, a linear factor --rotary-seq-len-interpolation-factor's int cannot
# hold, a YaRN attention_factor); and a launch's interpolation factor Megatron's argparse refuses was passed over
for model_config, scaling, said in (
        (LLAMA_CONFIG, {"rope_type": "dynamic", "factor": 2.0}, "rope_scaling 'dynamic' (dynamic NTK scaling"),
        (QWEN3_MOE_CONFIG, {"type": "dynamic", "factor": 4.0}, "rope_scaling 'dynamic' (dynamic NTK scaling"),
        (LLAMA_CONFIG, {"rope_type": "longrope", "factor": 4.0}, "rope_scaling 'longrope' (Megatron-LM and"),
        # hostile24: a factor Megatron-Core cannot train (it multiplies the positions by 1 / factor); 2.5 and 0.5,
        # refused here before, are Megatron-Bridge's (a float field) and planned
        (LLAMA_CONFIG, {"type": "linear", "factor": 0}, "rope_scaling linear factor must be a finite number above 0"),
        (LLAMA_CONFIG, {"type": "linear", "factor": float("nan")}, "finite number above 0 (Megatron-Core multiplies"),
        # hostile24: a YaRN factor below 1 or nan was read as plain RoPE (factor > 1 false), where the launch reader
        # refuses it; a rope_type and a type that disagree were read by rope_type (Bridge's Llama bridge reads type);
        # a 400-digit factor was "the inputs take a number beyond the arithmetic's range (OverflowError ...)"
        (LLAMA_CONFIG, {"rope_type": "yarn", "factor": 0.5, "original_max_position_embeddings": 8192},
         "rope_scaling: yarn factor must be a finite context extension of at least 1 (1: none, plain RoPE), got 0.5"),
        (QWEN3_MOE_CONFIG, {"type": "yarn", "factor": float("nan"), "original_max_position_embeddings": 8192},
         "yarn factor must be a finite context extension of at least 1 (1: none, plain RoPE), got nan"),
        (LLAMA_CONFIG, {"type": "linear", "rope_type": "llama3", "factor": 4.0}, "rope_scaling: rope_type 'llama3' "
         "and type 'linear' disagree: transformers reads rope_type, Megatron-Bridge's Llama bridge type"),
        (LLAMA_CONFIG, {"type": "linear", "factor": 10 ** 400}, "rope_scaling: field 'factor' is an integer of 401 "
         "digits, beyond a float's range"),
        (LLAMA_CONFIG, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192,
                        "attention_factor": 1.1}, "rope_scaling yarn with attention_factor")):
    case("values", "plan", "--model", "{tmp}/config.json", fragment=said, files={"config.json": json.dumps(
        {**json.loads(model_config), "rope_scaling": scaling})})
for value in ("2.5", "0", "two"):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="--rotary-seq-len-interpolation-"
         "factor", files={"l.sh": LAUNCH.replace("\n", f" --position-embedding-type rope --rotary-seq-len-interpolation-factor {value}\n")})
# hostile24: a Bridge file's factor at 0 or below (Megatron-Core's 1 / factor); a non-integer factor is planned, and
# `--emit megatron` refuses it (--rotary-seq-len-interpolation-factor is type=int), writing nothing to -o
for value in ("0", "-1.5"):
    case("values", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt", fragment="o.txt: "
         f"model.seq_len_interpolation_factor takes a finite factor above 0 (1: none; Megatron-Core multiplies the "
         f"positions by 1 / factor, rotary_pos_embedding.py L135-136), got {value}", files={"o.txt": BRIDGE_MOE.replace(
             "\n", f" model.position_embedding_type=rope model.seq_len_interpolation_factor={value}\n", 1)})
# hostile24: a Bridge key's refusal dropped its reason (torch's dropout, flash-attn's check) after "got nan"
for value, fragment in (("model.hidden_dropout=nan", "o.txt: model.hidden_dropout takes a probability in [0, 1], got "
                                                     "nan: torch's dropout raises on it"),
                        ("model.attention_dropout=nan model.attention_backend=flash", "o.txt: model.attention_dropout "
                         "takes a probability in [0, 1], got nan: TransformerEngine's FlashAttention")):
    case("files", "plan", "--hw", "h100", "--devices", "8", "--from-bridge", "{tmp}/o.txt", fragment=fragment,
         files={"o.txt": BRIDGE_MOE.replace("\n", f" {value}\n", 1)})
# hostile24: an exported NVTE_* switch Megatron-Core's _set_attention_backend asserts against (language_module.py
# L120-126): planned (as fused attention, or flash with the switch saying otherwise)
for export, backend in (("NVTE_FUSED_ATTN=0", ""),
                        ("NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=0", " --attention-backend flash"),
                        ("NVTE_UNFUSED_ATTN=1", " --attention-backend fused")):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM would refuse "
         "this launch: an exported NVTE_FLASH_ATTN / NVTE_FUSED_ATTN / NVTE_UNFUSED_ATTN must be what Megatron-Core "
         "sets",
         files={"l.sh": f"export {export}\n" + LAUNCH.replace("\n", f"{backend}\n")})
# hostile24: an integer flag's value beyond a float (310 digits) was "the inputs take a number beyond the arithmetic's
# range (OverflowError ...)", naming no flag
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/l.sh", fragment="l.sh: Megatron-LM's --rotary-base "
     "(rotary_base) takes a number, got 1000", files={"l.sh": LAUNCH.replace(
         "\n", " --position-embedding-type rope --rotary-base 1" + "0" * 309 + "\n")})
case("values", "plan", "--model", "{tmp}/config.json", "--hw", "h100", "--devices", "8", "--emit", "megatron", "-o",
     "{tmp}/launch.sh", outputs=False, fragment="'s linear RoPE scaling factor 2.5 is no integer, "
     "which Megatron-LM's --rotary-seq-len-interpolation-factor (type=int", files={"config.json": json.dumps(
         {**json.loads(LLAMA_CONFIG), "rope_scaling": {"type": "linear", "factor": 2.5}})})


# hostile25: a launch whose model is not its flags' GPT (another script's model, a YAML of arguments, a heterogeneous
# layer config) was planned from the flags, listed "not modelled by btacalc"; --num-layers beside --encoder-num-layers
# (Megatron-LM asserts) was planned; a launch with neither was "field num_layers: Input should be a valid integer"
for script, fragment in (("pretrain_hybrid.py", "pretrain_hybrid.py builds a HybridModel of Mamba, attention and MLP"),
                         ("pretrain_mamba.py", "pretrain_mamba.py builds a HybridModel"),
                         ("/opt/Megatron-LM/pretrain_vlm.py", "/opt/Megatron-LM/pretrain_vlm.py builds a LLaVAModel")):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment=f"launch.args: {fragment}",
         files={"launch.args": LLAMA_LAUNCH.replace("pretrain_gpt.py", script)})
for extra, fragment in (("--yaml-cfg run.yaml", "--yaml-cfg run.yaml: Megatron-LM replaces every argument with that "
                         "YAML file's"),
                        ("--heterogeneous-layers-config-path nas.json", "--heterogeneous-layers-config-path nas.json: "
                         "Megatron-LM builds each layer's attention and MLP from the JSON's block_configs"),
                        ("--heterogeneous-layers-config-encoded-json '{}'", "--heterogeneous-layers-config-encoded-json "
                         "{}: Megatron-LM builds each layer's"),
                        ("--encoder-num-layers 32", "Megatron-LM would refuse this launch: --num-layers and "
                         "--encoder-num-layers together ('cannot have both")):
    case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args", fragment=f"launch.args: {fragment}",
         files={"launch.args": LLAMA_LAUNCH.replace("--num-layers 32", f"--num-layers 32 {extra}", 1)})
case("values", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args",
     fragment="launch.args: the launch gives no --num-layers (Megatron-LM requires it or --encoder-num-layers",
     files={"launch.args": LLAMA_LAUNCH.replace("--num-layers 32 ", "", 1)})
# a Bridge key btacalc reads set to null (Bridge sets None as given): planned at Megatron-LM's default in silence, or
# "field top_k: Input should be a valid integer"
for key, flag in (("model.hidden_dropout", "--hidden-dropout"), ("model.rotary_base", "--rotary-base"),
                  ("model.moe_router_topk", "--moe-router-topk"),
                  ("model.tensor_model_parallel_size", "--tensor-model-parallel-size")):
    case("values", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=f"o.txt: {key}=null: Megatron-Bridge sets the field to None as given (omegaconf_utils.py "
                  f"_apply_overrides L454-515 @ 067f987d), where Megatron-LM's {flag} defaults to",
         files={"o.txt": HYDRA.replace("model.tensor_model_parallel_size=2 ", "") + f"{key}=null\n"})
case("values", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
     fragment="o.txt: model.num_layers=null leaves the model no number of layers",
     files={"o.txt": HYDRA + "model.num_layers=null model.hidden_size=2048 model.num_attention_heads=32 "
            "model.seq_length=4096\n"})  # hostile35: without a sequence length that is refused first
# the NVLink domain a launch's `# btacalc option: --gpus-per-node` states (--emit writes it where torchrun or Bridge's
# overrides would give another): a whole number of devices from 1 to 2^20
for given in ("0", "abc", "\u0668", "2000000", "8.0"):
    case("files", "plan", "--hw", "h100", "--from-megatron", "{tmp}/launch.args",
         fragment=f"launch.args: line 1: # btacalc option: --gpus-per-node takes a whole number of devices from 1 to "
                  f"1048576, got {given!r}", files={"launch.args": f"# btacalc option: --gpus-per-node {given}\n" + LLAMA_LAUNCH})
# a TransformerEngine version in another script's digits (TE's versions are ASCII, PEP 440)
case("values", "plan", "--hw", "b200", "--devices", "8", "-m", "llama-3-8b", "--precision", "fp8", "--te-version",
     "\u0662.\u0662", fragment="--te-version '\u0662.\u0662': expected a TransformerEngine version")
# a null training batch size, which Megatron-Bridge asserts (training/config.py L1433-1442 @ 067f987d): read as left out
for key in ("train.global_batch_size", "train.micro_batch_size"):
    case("values", "plan", "--hw", "h100", "-m", "qwen3-30b-a3b", "--devices", "8", "--from-bridge", "{tmp}/o.txt",
         fragment=f"o.txt: {key}=null: Megatron-Bridge needs the training batch sizes",
         files={"o.txt": " ".join(w for w in HYDRA.split() if not w.startswith(key + "=")) + f" {key}=null\n"})


def _make(folder: Path, files: dict[str, Any]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple) and content[0] == "symlink":
            path.symlink_to(content[1])
        elif isinstance(content, tuple) and content[0] == "fifo":
            os.mkfifo(path)
        elif isinstance(content, tuple) and content[0] == "hardlink":
            os.link(folder / content[1], path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _snapshot(folder: Path) -> dict[str, Any]:
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            out[key] = ("link", os.readlink(path))
        elif path.is_file():
            out[key] = (path.read_bytes(), oct(path.stat().st_mode))
        else:
            out[key] = "dir" if path.is_dir() else "special"
    return out


OUTPUT_FLAGS = {"plan": ["--output", "{tmp}/out.json"],
                **{c: ["--output", "{tmp}/out.json", "--csv", "{tmp}/out.csv"] for c in ("sweep", "compare", "crossover")}}


def _args(c: Case, folder: Path, data: Path) -> list[str]:
    args = c.args + (OUTPUT_FLAGS.get(c.args[0], []) if c.outputs else [])
    return [a.replace("{tmp}", str(folder)).replace("{data}", str(data)) for a in args]


def test_at_least_200_cases_across_every_command_and_class():
    counts = Counter(c.cls for c in CASES)
    assert len(CASES) >= 200, counts
    assert set(counts) == {"usage", "names", "values", "profiles", "outputs", "ranges", "bounds", "files", "ignored"}
    commands = {c.args[0] + (" " + c.args[1] if c.args[0] in ("hw", "models") and len(c.args) > 1 else "")
                for c in CASES}
    assert {"plan", "sweep", "compare", "crossover", "validate", "formulas", "hw list", "hw show", "hw check",
            "models list", "models show", "measure"} <= commands


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input(cli, tmp_path, data_dir, c):
    if c.args[0] == "measure":
        pytest.importorskip("torch")
    _make(tmp_path, c.files)
    before = _snapshot(tmp_path)
    code, out, err = cli(*_args(c, tmp_path, data_dir))
    assert code == 2, (code, err)
    assert err.startswith("btacalc: error:") and c.fragment in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert out == ""
    assert _snapshot(tmp_path) == before  # nothing written, nothing left behind, nothing changed
