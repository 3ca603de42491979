"""Feed btacalc's `--emit bridge` overrides to Megatron-Bridge's OWN config code (a developer check outside the test
suite: it needs Megatron-Bridge and Megatron-LM source trees, which btacalc does not depend on; nothing imports it).

    git --git-dir=BRIDGE_MIRROR archive 067f987d src scripts | tar -x -C /tmp/mb     # Megatron-Bridge 067f987d
    git --git-dir=MEGATRON_MIRROR archive d98e8a64 | tar -x -C /tmp/mlm                # Megatron-LM d98e8a64
    python tools/bridge_config_check.py /tmp/mb /tmp/mlm [--only TEXT] [--random N] [--no-again] [--list]

For each plan of megatron_parse_check.launches() (btacalc plan options) it runs `python -m btacalc plan ...
--emit bridge` from this checkout and then, in this process, what Megatron-Bridge's scripts/performance/run_recipe.py
does with the words: the recipe's ConfigContainer (recipes/common.py `_pretrain_common`, with the model provider a
model's recipe sets: GPTModelProvider, or MLAModelProvider where the plan has multi-latent attention; its
`mixed_precision` "bf16_mixed" and no `comm_overlap`, as the recipe leaves them), the overrides applied by
`process_config_with_overrides` (omegaconf_utils.py: OmegaConf in struct mode, Hydra's own OverridesParser, then
`_apply_overrides` onto the dataclasses), and then `runtime_config_update` (config.py L1992-2032: the mixed-precision
recipe's setup, the data-parallel size from WORLD_SIZE, CommOverlapConfig.setup, and ConfigContainer.validate(), which
finalizes the DDP and optimizer configs and runs the provider's TransformerConfig.__post_init__). The environment is
the file's `# environment:` lines, WORLD_SIZE its `# btacalc option: --devices N`, RANK 0.

One line per plan: `ok`, `overrides: <Bridge's / Hydra's error>`, `validate: <Bridge's or Megatron-Core's error>`,
`landed: <key: meant -> got>` (an overridden attribute that does not hold the value and type btacalc wrote after
validate(): Bridge and Megatron-Core rewrite some fields), `again: <what differs>` (the file read back with
`--from-bridge` does not plan the same run) or `skip` (btacalc refuses the plan, exit 2); exit 1 when any fails.

What is not Bridge's code (nothing of Bridge's or Megatron-Core's checking logic is replaced):
- typing.override from typing_extensions and triton as an import-only stand-in, as megatron_parse_check.py does;
- the package __init__ files of megatron.bridge, megatron.bridge.models and megatron.bridge.recipes (registries that
  import every Hugging Face conversion bridge and recipe) are not run: their names resolve on first use from the
  file's own `from ... import` lines;
- a few Bridge modules import, unguarded, packages a config check never calls (transformers, datasets, safetensors
  in the Hugging Face conversion and data code, TransformerEngine in the LoRA layers, torch's TensorBoard writer in
  training/state.py): exactly those imports (STANDINS, importer and name) get an import-only stand-in, handed to that
  module alone and never put in sys.modules, so Megatron-Core's own `try: import transformer_engine` still fails and
  it runs without TE; once the imports are done any use of a stand-in raises;
- torch.cuda's device queries answer as the plan's GPU (compute capability and name: Bridge's DeepEP check reads
  both, flex_dispatcher_backend.py L95-109); Megatron-Core's cached TE version is megatron_parse_check.TE_VERSION.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import importlib
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import megatron_parse_check as megparse  # noqa: E402  (the plans, the triton stand-in, TE's version)

ROOT = megparse.ROOT
GPU = {"a100": ((8, 0), "NVIDIA A100-SXM4-80GB"), "a100-80gb": ((8, 0), "NVIDIA A100-SXM4-80GB"),
       "h100": ((9, 0), "NVIDIA H100 80GB HBM3"), "h200": ((9, 0), "NVIDIA H200"),
       "b200": ((10, 0), "NVIDIA B200"), "gb200": ((10, 0), "NVIDIA GB200")}
LAZY_PACKAGES = ("megatron.bridge", "megatron.bridge.models", "megatron.bridge.recipes")
STANDINS = {  # (importing Bridge module, the name it imports unguarded) at 067f987d
    ("megatron.bridge.data.builders.direct_hf_sft", "transformers"),
    ("megatron.bridge.data.builders.energon", "transformers"),
    ("megatron.bridge.data.builders.mock_vlm_sft", "transformers"),
    ("megatron.bridge.data.datasets.gpt_sft", "datasets"),
    ("megatron.bridge.data.sources.hf", "datasets"),
    ("megatron.bridge.models.conversion.auto_bridge", "safetensors"),
    ("megatron.bridge.models.conversion.auto_bridge", "transformers"),
    ("megatron.bridge.models.conversion.model_bridge", "transformers"),
    ("megatron.bridge.models.conversion.transformers_compat", "transformers"),
    ("megatron.bridge.models.conversion.utils", "transformers"),
    ("megatron.bridge.models.hf_pretrained.base", "transformers"),
    ("megatron.bridge.models.hf_pretrained.causal_lm", "transformers"),
    ("megatron.bridge.models.hf_pretrained.masked_lm", "transformers"),
    ("megatron.bridge.models.hf_pretrained.safe_config_loader", "transformers"),
    ("megatron.bridge.models.hf_pretrained.token_classification", "transformers"),
    ("megatron.bridge.peft.lora_layers", "transformer_engine"),
    ("megatron.bridge.training.utils.config_utils", "transformers"),
    ("megatron.bridge.training.state", "torch.utils.tensorboard.writer"),
}
# the file's own notes of a model Megatron-LM's and Bridge's fields cannot give (read back, it plans the run they give)
NOTED = ("no Megatron flag for", "this launch gives all", "fewer parameters", "the model normalises the full q and k")
MLA_KEYS = ("model.multi_latent_attention", "model.q_lora_rank", "model.kv_lora_rank")


# ------------------------------------------------------------------------------------------------- importing Bridge

class _StandIn(megparse._Kernel):
    """An import-only stand-in (megatron_parse_check's triton stand-in): attributes, calls and subclassing work while
    Bridge's modules import; afterwards (ARMED) any use raises, so a check that reached one would fail rather than pass
    on it."""
    ARMED = False

    def _used(self) -> None:
        if _StandIn.ARMED:
            raise RuntimeError(f"stand-in {self._name} used after import")


class _StandInModule(megparse._TritonModule):
    STAND_IN = _StandIn


def _exports(init: Path, package: str) -> dict[str, tuple[str, str]]:
    """The names a package __init__ re-exports, from its own `from X import Y` lines."""
    out = {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module if node.level == 0 else f"{package}.{node.module}"
            out.update({alias.asname or alias.name: (module, alias.name) for alias in node.names})
    return out


class _LazyPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """LAZY_PACKAGES without running their __init__: a name is imported from where the __init__ says on first use."""

    def __init__(self, src: Path) -> None:
        self.src = src

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in LAZY_PACKAGES:
            return None
        folder = self.src / name.replace(".", "/")
        spec = importlib.machinery.ModuleSpec(name, self, is_package=True, origin=str(folder / "__init__.py"))
        spec.submodule_search_locations = [str(folder)]
        return spec

    def create_module(self, spec: Any) -> Any:
        return None

    def exec_module(self, module: Any) -> None:
        table = _exports(Path(module.__spec__.origin), module.__name__)

        def lookup(item: str) -> Any:
            if item not in table:
                raise AttributeError(item)
            value = getattr(importlib.import_module(table[item][0]), table[item][1])
            setattr(module, item, value)
            return value
        module.__getattr__ = lookup


def _import_hook(real: Any) -> Any:
    def hook(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        try:
            return real(name, globals, locals, fromlist, level)
        except ModuleNotFoundError:
            importer = (globals or {}).get("__name__", "")
            if level or not ({(importer, name), (importer, name.split(".")[0])} & STANDINS):
                raise
            module = _StandInModule(name if fromlist else name.split(".")[0])
            module.__path__ = []
            return module
    return hook


def load_bridge(bridge: Path, megatron: Path) -> dict[str, Any]:
    """Megatron-Bridge's config code from the two trees; returns the functions and classes the check calls."""
    megparse.load_megatron(megatron)  # typing.override, the triton stand-in, megatron on sys.path
    from packaging.version import Version

    import megatron.core.utils as core_utils

    core_utils._te_version = Version(megparse.TE_VERSION)  # Megatron's cache of TE's version (core/utils.py L318-324)
    src = bridge / "src"
    sys.path.insert(0, str(src))
    sys.meta_path.insert(0, _LazyPackages(src))
    builtins.__import__ = _import_hook(builtins.__import__)
    importlib.import_module("megatron.bridge.models.conversion")  # models/__init__.py's order (L17), before data/
    config = importlib.import_module("megatron.bridge.training.config")
    omegaconf_utils = importlib.import_module("megatron.bridge.training.utils.omegaconf_utils")
    common = importlib.import_module("megatron.bridge.recipes.common")
    mixed = importlib.import_module("megatron.bridge.training.mixed_precision")
    gpt = importlib.import_module("megatron.bridge.models.gpt_provider")
    mla = importlib.import_module("megatron.bridge.models.mla_provider")
    _StandIn.ARMED = True
    return {"runtime_config_update": config.runtime_config_update, "pretrain_common": common._pretrain_common,
            "process": omegaconf_utils.process_config_with_overrides, "GPT": gpt.GPTModelProvider,
            "MLA": mla.MLAModelProvider, "mixed": mixed.get_mixed_precision_config,
            "CommOverlapConfig": importlib.import_module("megatron.bridge.training.comm_overlap").CommOverlapConfig}


# ------------------------------------------------------------------------------------------------ one emitted file

def read_overrides(text: str) -> tuple[dict[str, str], int, list[str]]:
    """The file's `# environment:` switches, its `# btacalc option: --devices N` and its override words."""
    env, devices, words = {}, 0, []
    for line in text.splitlines():
        if line.startswith("# environment: "):
            key, _, value = line[len("# environment: "):].partition("=")
            env[key] = value
        elif line.startswith("# btacalc option: --devices "):
            devices = int(line.split()[4])
        elif line.strip() and not line.startswith("#"):
            words += shlex.split(line)
    return env, devices, words


def meant(words: list[str]) -> dict[str, Any]:
    """Each override's key and the value btacalc wrote, as Hydra's grammar reads it (the parser Bridge applies)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    return {o.key_or_group: o.value() for o in parser.parse_overrides(overrides=words)}


@contextlib.contextmanager
def _gpu(gpu: str) -> Any:
    """torch.cuda's device queries answer as the plan's GPU (CPU torch cannot)."""
    import torch

    arch, name = GPU[gpu]
    saved = torch.cuda.get_device_capability, torch.cuda.get_device_properties
    props = types.SimpleNamespace(major=arch[0], minor=arch[1], name=name, multi_processor_count=132)
    torch.cuda.get_device_capability = lambda *a, **k: arch  # type: ignore[assignment]
    torch.cuda.get_device_properties = lambda *a, **k: props  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.get_device_properties = saved


@contextlib.contextmanager
def _environment(env: dict[str, str], cwd: str) -> Any:
    saved, here = dict(os.environ), os.getcwd()
    for key in [k for k in os.environ if k.startswith(("NVTE_", "NCCL_", "CUDA_", "WORLD_SIZE", "RANK", "SLURM"))]:
        del os.environ[key]
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)


BASES = ("recipe", "sections")


def base_container(bridge: dict[str, Any], keys: dict[str, Any], base: str) -> Any:
    """The recipe's container before the overrides: `_pretrain_common()` with the model provider a recipe sets;
    base "sections": with the CommOverlapConfig and MixedPrecisionConfig objects most recipes set (Llama 3,
    DeepSeek, the performance recipes) where `_pretrain_common` leaves None and the name "bf16_mixed" (which the
    Qwen3 MoE pretrain recipes keep, recipes/qwen/h100/qwen3_moe.py L116)."""
    cfg = bridge["pretrain_common"]()
    mla = any(keys.get(k) not in (None, False) for k in MLA_KEYS)
    cfg.model = bridge["MLA" if mla else "GPT"]()
    if base == "sections":
        cfg.comm_overlap = bridge["CommOverlapConfig"](tp_comm_overlap=False)  # deepseek_v3.py L228
        cfg.mixed_precision = bridge["mixed"]("bf16_mixed")
    return cfg


def _walk(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def _same(got: Any, want: Any) -> bool:
    """The attribute holds the value btacalc wrote, as Bridge converts it: a dtype name to torch's dtype
    (omegaconf_utils.py L498-505), an activation's name to the function (L508-513), an enum to its name."""
    import torch

    if isinstance(got, torch.dtype) and isinstance(want, str):
        from megatron.bridge.utils.activation_map import str_to_dtype

        return got == str_to_dtype(want)
    if callable(got) and isinstance(want, str) and not isinstance(got, type):
        from megatron.bridge.utils.activation_map import str_to_callable

        return got is str_to_callable(want)
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    if hasattr(got, "name") and type(got).__module__.startswith("megatron") and isinstance(want, str):
        return bool(got.name == want)
    return bool(got == want and type(got) is type(want)) or (isinstance(got, float) and isinstance(want, int)
                                                              and not isinstance(want, bool) and got == want)


def landed(bridge: dict[str, Any], cfg: Any, keys: dict[str, Any]) -> list[str]:
    """Overridden attributes that do not hold what btacalc wrote after runtime_config_update."""
    out = []
    recipe = keys.get("mixed_precision")
    for key, want in keys.items():
        if key == "mixed_precision":  # the recipe's name: its fields must be the recipe's, less those written
            expected = bridge["mixed"](want)
            for field in expected.__dataclass_fields__:
                if f"mixed_precision.{field}" not in keys and getattr(cfg.mixed_precision, field) != \
                        getattr(expected, field):
                    out.append(f"mixed_precision.{field} ({recipe}): {getattr(expected, field)!r} -> "
                               f"{getattr(cfg.mixed_precision, field)!r}")
            continue
        if key.endswith("._call_"):  # read with its _target_
            continue
        if key.endswith("._target_"):  # Bridge built the section from this class (omegaconf_utils.py L478-486)
            section = _walk(cfg, key.rsplit(".", 1)[0])
            if keys.get(key.replace("._target_", "._call_")) is False:
                # resolved, not called (a torch dtype as Megatron's YAML writes one, instantiate_utils.py L293-305)
                module, _, name = want.rpartition(".")
                if section is not getattr(importlib.import_module(module), name):  # torch.half is torch.float16
                    out.append(f"{key}: {want} -> {section!r}")
            elif f"{type(section).__module__}.{type(section).__qualname__}" != want:
                out.append(f"{key}: {want} -> {type(section)}")
            continue
        try:
            got = _walk(cfg, key)
        except (AttributeError, KeyError, TypeError) as exc:
            out.append(f"{key}: not an attribute after validate ({exc})")
            continue
        if key == "model.no_rope_freq" and isinstance(want, int) and isinstance(got, list):
            # Megatron-Core writes the period out per layer (transformer_config.py L3138-3148 @ d98e8a64)
            want = ([0] * (want - 1) + [1]) * (len(got) // want)
        if key == "model.pipeline_model_parallel_layout" and isinstance(want, str) and got is not None:
            got = str(got)  # Megatron-Core parses the layout into PipelineParallelLayerLayout (transformer_config.py)
        if not _same(got, want):
            out.append(f"{key}: {want!r} -> {got!r}")
    return out


def check(bridge: dict[str, Any], text: str, gpu: str, workdir: str, base: str = "recipe") -> str:
    """'ok' or the first failure of Bridge's override path and validation for one emitted file."""
    env, devices, words = read_overrides(text)
    keys = meant(words)
    env.update(WORLD_SIZE=str(devices), RANK="0", LOCAL_RANK="0")
    with _environment(env, workdir), contextlib.redirect_stdout(io.StringIO()), _gpu(gpu):
        cfg = base_container(bridge, keys, base)
        try:
            with _warnings() as dropped:
                cfg = bridge["process"](cfg, cli_overrides=words)
        except BaseException as exc:
            return f"overrides: {type(exc).__name__}: {_short(exc)}"
        if dropped:
            return "overrides: " + "; ".join(dropped)
        try:
            bridge["runtime_config_update"](cfg)
        except BaseException as exc:  # Bridge / Megatron-Core assert, raise or exit
            return f"validate: {type(exc).__name__}: {_short(exc)}"
        wrong = landed(bridge, cfg, keys)
    return "ok" if not wrong else "landed: " + "; ".join(wrong)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    cause = exc.__cause__
    if cause is not None:
        text += " <- " + " ".join(str(cause).split())
    return text[:400]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _warnings() -> Any:
    """omegaconf_utils._apply_overrides skips, with a warning, a key the object lacks or cannot take (L469-521):
    an override that would be dropped so."""
    logger = logging.getLogger("megatron.bridge.training.utils.omegaconf_utils")
    handler, propagate = _Collect(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    logging.disable(logging.NOTSET)
    try:
        yield handler.lines
    finally:
        logging.disable(logging.WARNING)
        logger.removeHandler(handler)
        logger.propagate = propagate


# --------------------------------------------------------------------------------------------- btacalc both ways

def btacalc(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    run = subprocess.run([sys.executable, "-m", "btacalc", *args], cwd="/", input=stdin, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return run.returncode, run.stdout, run.stderr


def _plan_json(*args: str, stdin: str | None = None) -> dict[str, Any]:
    code, out, err = btacalc("plan", *args, "--json", stdin=stdin)
    if code not in (0, 1):
        raise ValueError(err.strip().splitlines()[-1] if err.strip() else f"exit {code}")
    data = json.loads(out)
    return dict(data["best"] if "best" in data else data)


def same_plan(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where two plans differ (tests/test_megatron_launch.py _same_plan's fields)."""
    out = [f"plan.{k}" for k in ("tiles", "tile_batch", "micro_batches", "step_batch", "fits")
           if a["plan"].get(k) != b["plan"].get(k)]
    out += [k for k in ("memory_bytes", "flops_per_step", "parallelism") if a.get(k) != b.get(k)]
    ta, tb = a.get("throughput"), b.get("throughput")
    if (ta is None) != (tb is None) or (ta and not math.isclose(ta["step_time_s"], tb["step_time_s"], rel_tol=1e-12)):
        out.append("step_time_s")
    out += [f"model.{k}" for k in ("params_total", "params_active", "hidden_size", "num_layers", "vocab_size",
                                   "ffn_size", "num_experts") if a["model"].get(k) != b["model"].get(k)]
    return out


def again(plan: str, text: str, gpu: str) -> str:
    """'' when the file read back with --from-bridge plans the run `plan` plans, else what differs."""
    try:
        original = _plan_json(*plan.split())
        back = _plan_json("--hw", gpu, "--from-bridge", "-", stdin=text)
    except ValueError as exc:
        return f"btacalc refuses: {exc}"
    if original["plan"]["tiles"] > 1:  # the file is the plan re-solved at G = 1 (cli/plan.py _untiled): its layout
        original = _plan_json(*plan.split(), "--tiles", "1")
    differ = same_plan(original, back)
    if not differ:
        return ""
    parts = []
    for key in differ:
        if key == "step_time_s":
            times = [(plan_json["throughput"] or {}).get(key) for plan_json in (original, back)]
            parts.append(f"step_time_s {times[0]} -> {times[1]}")
            continue
        head, _, tail = key.partition(".")
        a, b = (original[head], back[head]) if not tail else (original[head].get(tail), back[head].get(tail))
        if isinstance(a, dict) and isinstance(b, dict):
            a, b = ({k: v for k, v in a.items() if b.get(k) != v}, {k: v for k, v in b.items() if a.get(k) != v})
        parts.append(f"{key} {a!r} -> {b!r}")
    return "; ".join(parts)[:400]


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("bridge", type=Path, help="a Megatron-Bridge source tree (067f987d; src/ is enough)")
    cli.add_argument("megatron", type=Path, help="a Megatron-LM source tree (d98e8a64)")
    cli.add_argument("--no-again", action="store_true", help="do not read the files back with --from-bridge")
    cli.add_argument("--random", type=int, default=0, help="also this many seeded random plans")
    cli.add_argument("--only", default="", help="only plans whose name contains this")
    cli.add_argument("--start", default="", help="skip the plans before the one of this name")
    cli.add_argument("--base", choices=BASES, default="recipe", help="the container the overrides apply to")
    cli.add_argument("--list", action="store_true", help="list the plans and exit")
    opts = cli.parse_args(argv)
    todo = [(n, p) for n, p in megparse.launches(opts.random) if opts.only in n]
    names = [n for n, _ in todo]
    todo = todo[names.index(opts.start):] if opts.start in names else todo
    if opts.list:
        print("\n".join(f"{name}\t{plan}" for name, plan in todo))
        return 0
    bridge = load_bridge(opts.bridge.resolve(), opts.megatron.resolve())
    logging.disable(logging.WARNING)  # Bridge's warnings are not printed; _warnings() collects the override path's
    failed = skipped = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name, plan in todo:
            code, text, err = btacalc("plan", *plan.split(), "--emit", "bridge")
            if code == 2:
                skipped += 1
                print(f"{name}: skip (btacalc refuses: {(err.strip().splitlines() or ['?'])[-1]})", flush=True)
                continue
            gpu = plan.split("--hw ")[1].split()[0]
            result = check(bridge, text, gpu, workdir, opts.base)
            if result == "ok" and not opts.no_again:
                result = ("again: " + differ) if (differ := again(plan, text, gpu)) else "ok"
                noted = [n for n in NOTED if n in text]
                result = f"ok (read back as the file notes, {noted[0]!r}: {differ})"[:300] if differ and noted \
                    else result
            failed += not result.startswith("ok")
            print(f"{name}: {result}", flush=True)
    print(f"{len(todo) - skipped} configs checked, {failed} failed, {skipped} refused by btacalc")
    return 1 if failed else 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    sys.exit(main(sys.argv[1:]))
