"""Run Megatron-LM's own argument validation on launches btacalc emitted (a check outside the test suite:
it needs a Megatron-LM source tree, which btacalc does not depend on).

    git clone https://github.com/NVIDIA/Megatron-LM /tmp/mlm && git -C /tmp/mlm checkout d98e8a64
    btacalc plan --hw h100 --devices 64 --tp 2 --ep 8 --emit megatron > launch.sh
    python tools/megatron_validate.py /tmp/mlm launch.sh [more.sh ...]

For each launch it builds Megatron's parser (`add_megatron_arguments`), parses the flags after
pretrain_gpt.py with the launch's exported environment and torchrun's world size, and calls `validate_args`
and `core_transformer_config_from_args` (TransformerConfig.__post_init__), printing OK or the first error.
Megatron's optional GPU packages (Transformer Engine, triton, apex, ...) are replaced by empty stand-ins so
the parser imports on a CPU machine, and the device reports compute capability 9.0 (Hopper), where
Megatron's CUDA_DEVICE_MAX_CONNECTIONS assertion applies. What runs is Megatron's validation code itself.
On 2026-12-01 the 22 plans of tests/test_megatron_launch.py, the issue's combinations and 43 sampled
layouts (70 launches) all passed at d98e8a64.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import io
import os
import shlex
import sys
import types
from pathlib import Path
from typing import Any

OPTIONAL = {"triton", "transformer_engine", "apex", "einops", "flash_attn", "nvidia_resiliency_ext", "tensorstore",
            "zarr", "mamba_ssm", "causal_conv1d", "flashinfer", "nv_one_logger", "modelopt", "wandb", "tqdm",
            "multistorageclient", "emerging_optimizers", "deep_ep", "nvtx", "onnx"}


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


class _Stand(types.ModuleType):
    """An optional package that is not installed: every attribute is a further stand-in."""

    def __getattr__(self, name: str) -> Any:
        if name == "__version__":
            return "99.0.0"
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper() or name.startswith("_"):
            cls = _Meta(name, (object,), {"__init__": lambda self, *a, **k: None,
                                          "__call__": lambda self, *a, **k: self})
            setattr(self, name, cls)
            return cls
        module = _Stand(f"{self.__name__}.{name}")
        sys.modules[module.__name__] = module
        return module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else self

    def __mro_entries__(self, bases: Any) -> tuple[type, ...]:
        return (object,)

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in OPTIONAL:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = _Stand(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        pass


def _megatron(root: Path) -> Any:
    import typing

    if not hasattr(typing, "override"):  # Megatron imports typing.override (Python 3.12); older: typing_extensions
        import typing_extensions

        typing.override = typing_extensions.override  # type: ignore[attr-defined]
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, _Finder())
    import torch

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)  # Hopper
    import megatron.training.arguments as arguments

    arguments.get_device_arch_version = lambda: 9
    return arguments


def check(arguments: Any, text: str) -> None:
    import argparse

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from btacalc.config.megatron_launch import read_launch

    launch = read_launch(text, "launch")
    line = next(x for x in text.replace("\\\n", " ").splitlines() if "pretrain_gpt.py" in x)
    words = shlex.split(line)
    saved = {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "WORLD_SIZE", "RANK")}
    try:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update(launch.env, WORLD_SIZE=str(launch.devices), RANK="0")
        parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
        args = parser.parse_args(words[words.index("pretrain_gpt.py") + 1:])
        args.rank, args.world_size = 0, launch.devices
        with contextlib.redirect_stdout(io.StringIO()):
            arguments.validate_args(args)
            arguments.core_transformer_config_from_args(args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    arguments = _megatron(Path(argv[0]))
    failed = 0
    for name in argv[1:]:
        try:
            check(arguments, Path(name).read_text())
            print(f"OK   {name}")
        except BaseException as exc:  # Megatron asserts, raises ValueError, or exits
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {str(exc)[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
