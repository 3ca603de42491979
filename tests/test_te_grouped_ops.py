"""tools/te_grouped_ops.py counts and times TransformerEngine GroupedLinear's per-expert host work (docs/host-time.md,
section tegrouped). The TE part needs a TE and a Megatron-LM tree and runs by hand; what is checked here is what the
numbers rest on: the line that separates the per-expert slope from the per-call intercept, the Python-call counter,
and the stand-in GEMM, which must compute what TE's grouped GEMM computes in each of its three layouts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loading import ROOT, load_script

torch = pytest.importorskip("torch")

_PATH = ROOT / "tools" / "te_grouped_ops.py"
tool = load_script("tools/te_grouped_ops.py")


def test_the_line_over_the_expert_count_separates_slope_and_intercept():
    """Counts that grow by 14 per expert from 122 per call at G = 1, 4, 8, 16 fit slope 14 and intercept 122; noisy
    points fit the least-squares line (1, 2), (2, 2), (3, 5): slope (sum (x - 2)(y - 3)) / (sum (x - 2)^2) =
    (-1 x -1 + 0 + 1 x 2) / 2 = 1.5, intercept 3 - 1.5 x 2 = 0. One point is no line."""
    assert tool.line_fit({g: 14 * g + 122 for g in (1, 4, 8, 16)}) == pytest.approx((14, 122))
    assert tool.line_fit({1: 2, 2: 2, 3: 5}) == pytest.approx((1.5, 0))
    with pytest.raises(ValueError):
        tool.line_fit({16: 100.0})


def test_the_counter_sees_each_python_call_and_builtin_call():
    """A Python function called 5 times is 5 'call' events under its name; its 5 calls of len() are builtin calls
    (sys.setprofile's c_call)."""
    def per_expert(x):
        return len(x)

    calls = tool.PythonCalls()
    with calls.active():
        for _ in range(5):
            per_expert([1, 2])
    assert calls.by_function[f"{Path(__file__).name}:per_expert"] == 5
    assert calls.kinds["builtin"] >= 5


def test_the_stand_in_gemm_computes_te_grouped_gemms_three_layouts():
    """TE's GroupedLinear calls its grouped GEMM as TN for the forward (y_i = x_i W_i^T), NN for the data gradient
    (dx_i = dy_i W_i) and NT for the weight gradient (dW_i = dy_i^T x_i, accumulated into main_grad under
    fuse_wgrad_accumulation), with the forward and dgrad outputs as row slices of one tensor split by m_splits
    (grouped_linear.py L202-213, L403-414, L416-444 at v2.12). The stand-in does the same per expert."""
    gemm = tool.standin_grouped_gemm(torch)
    splits = [2, 3]
    w = [torch.randn(4, 5) for _ in splits]  # out_features x in_features per expert
    x = torch.randn(sum(splits), 5)
    xs = list(torch.split(x, splits))
    y = torch.empty(sum(splits), 4)
    gemm(w, True, xs, False, [y], None, splits, [], None, True)
    assert torch.allclose(y, torch.cat([xi @ wi.T for xi, wi in zip(xs, w)]))
    dy = list(torch.split(torch.randn(sum(splits), 4), splits))
    dx = torch.empty(sum(splits), 5)
    gemm(w, False, dy, False, [dx], None, splits, [], None, True)
    assert torch.allclose(dx, torch.cat([d @ wi for d, wi in zip(dy, w)]))
    main = [torch.ones(4, 5) for _ in splits]
    #       A   transa  B  transb out   dtype splits bias  bias_dtype single gelu grad workspaces size accumulate
    gemm(xs, False, dy, True, main, None, splits, [], None, False, [], True, [], 0, True)
    for m, d, xi in zip(main, dy, xs):
        assert torch.allclose(m, 1 + d.T @ xi)


# TE and Megatron-LM trees for the counting test below (tools/te_grouped_ops.py's docstring says how to make them);
# without them it is skipped: the suite does not carry TE's source.
_TE_TREE = os.environ.get("BTACALC_TE_TREE", "/work/tetree212")
_MEGATRON_TREE = os.environ.get("BTACALC_MEGATRON_TREE", "/work/mlmtree")
_HAVE_TREES = (Path(_TE_TREE) / "transformer_engine" / "pytorch" / "module" / "grouped_linear.py").is_file() and (
    Path(_MEGATRON_TREE) / "megatron" / "core" / "distributed").is_dir()


def _per_expert(recipe, tmp_path):
    """The tool's Python calls per local expert under `recipe` (G = 16 less G = 8, over 8), in a fresh process (TE's
    global state is per process): the step's by function, the forward alone's by function, and the step's total."""
    out = tmp_path / f"{recipe}.json"
    subprocess.run([sys.executable, str(_PATH), _TE_TREE, _MEGATRON_TREE, "--recipe", recipe, "--experts", "8", "16",
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    counts = json.loads(out.read_text())["counts"]

    def per(key):
        a, b = counts["8"][key], counts["16"][key]
        return {k: (b.get(k, 0) - a.get(k, 0)) / 8 for k in set(a) | set(b) if b.get(k, 0) != a.get(k, 0)}

    return per("python_by_function"), per("forward_alone_python_by_function"), \
        (counts["16"]["python"] - counts["8"]["python"]) / 8


@pytest.mark.slow  # about 45 s: it runs the tool once per recipe
@pytest.mark.skipif(not _HAVE_TREES, reason="needs a TE v2.12 tree and a Megatron-LM tree (BTACALC_TE_TREE, "
                                            "BTACALC_MEGATRON_TREE)")
@pytest.mark.parametrize("recipe, storage, extra, total", [
    # recipe, its storage module, the calls beyond the 20 below that are the recipe's own, the step's total
    ("fp8", "float8_tensor_storage", 7, 41),
    ("fp8-current", "float8_tensor_storage", 7, 41),
    ("fp8-blockwise", "float8_blockwise_tensor_storage", 6, 40),
    ("mxfp8", "mxfp8_tensor_storage", 2, 36),
    ("nvfp4", "nvfp4_tensor_storage", 17, 51),
])
def test_each_recipe_runs_tes_per_expert_quantizer_python_once_per_line(recipe, storage, extra, total, tmp_path):
    """Per local expert, forward + backward, a low-precision recipe runs in TE v2.12 GroupedLinear (line numbers at
    5671fd36, module/grouped_linear.py unless said) beyond the 16-bit path's 14 Python calls:
      2 `set_usage` (the input quantizer L110-116, the weight quantizer L127-128);
      1 `get_weight_workspace` (L169-176), a cache hit: no `quantize` (base.py L1396-1398, L1410-1421 keep it);
      2 storages built by `split_quantize` (the input, L149-151; the output gradient, L358-362), each constructor
        copying its quantizer (tensor/storage/*_storage.py: `quantizer.copy()`): 2 `__new__`, 2 `copy`, 2 of the
        quantizer class's `__init__` and 2 of Quantizer's (quantized_tensor.py);
      2 `update_usage` (the input storage L236-238, the weight L400-402);
      1 `prepare_for_saving` and 1 `restore_from_saved`: the input storage only (L255-260, L314): the cached
        weight is TE's tensor class (get_weight_workspace clears `internal`, base.py L1444-1452; the C++ then
        builds the torch.Tensor subclass, csrc/quantizer.cpp), saved as a tensor (quantized_tensor.py L130-132);
      `clear_tensor_data` of the input storage (L483; utils.py L50-55): 1 `get_data_tensors`, 3 generator steps,
        1 `clear`;
    20 in all, less the 16-bit path's weight `cast_if_needed` (L180, not run) and the generator of the module's
    quantised-weight check (L916, short-circuited by `not self.fp8`), plus
    the stand-in's 2 `standin_storage` calls (their time subtracted) and the recipe's own: isinstance checks against
    TE's abstract classes (ABCMeta.__instancecheck__: 7 for FP8 per tensor, 5 block, 1 MXFP8, 3 NVFP4), the S4
    `_empty_tensor` of `clear` (block, MXFP8 1, NVFP4 2) and NVFP4's 4 `torch.cuda.current_device()` of its 2
    quantizer copies (tensor/nvfp4_tensor.py L155-158), 3 frames each (S8): 14 + 20 - 2 + 2 + extra = total.
    The forward alone (timed alone by --time, after a forward alone) finds the weights' cache valid: 1
    `get_weight_workspace` and no `standin_quantize` per expert, the stand-in defect S6 gone (it re-quantised
    every weight there)."""
    step, alone, python = _per_expert(recipe, tmp_path)
    assert 14 + 20 - 2 + 2 + extra == total
    assert python == pytest.approx(total, abs=0.2)  # 1/8 either way: an abc cache's subclass check (G = 8 vs 16)
    for name, count in [("quantized_tensor.py:set_usage", 2), ("base.py:get_weight_workspace", 1),
                        (f"{storage}.py:__new__", 2), (f"{storage}.py:update_usage", 2),
                        (f"{storage}.py:prepare_for_saving", 1), (f"{storage}.py:restore_from_saved", 1),
                        (f"{storage}.py:get_data_tensors", 1), (f"{storage}.py:clear", 1),
                        ("quantized_tensor.py:__init__", 2), ("te_grouped_ops.py:standin_storage", 2)]:
        assert step.get(name, 0) == count, name
    assert "te_grouped_ops.py:standin_quantize" not in step and "utils.py:cast_if_needed" not in step
    assert alone.get("base.py:get_weight_workspace", 0) == 1
    assert "te_grouped_ops.py:standin_quantize" not in alone
    assert alone.get(f"{storage}.py:prepare_for_saving", 0) == 1  # the input's; the weight is saved as a tensor


def test_the_recipes_are_megatrons_te_classes_on_their_rows_gpus():
    """Megatron-LM @ b0cc2706 builds DelayedScaling (its TEDelayedScaling), Float8CurrentScaling (tensorwise),
    Float8BlockScaling (blockwise), MXFP8BlockScaling (megatron/core/fp8_utils.py L555-573) and NVFP4BlockScaling
    (fp4_utils.py L94-99); the tool runs each on its rows' GPUs: Hopper (9, 0) for the FP8 recipes, Blackwell
    (10, 0) for MXFP8 and NVFP4 (TE's checks: quantization.py L48-87 at v2.12), every low-precision recipe of
    btacalc/data/precision.toml."""
    from btacalc.config.precision import recipe as precision_recipe

    assert tool.RECIPES == {"fp8": ("DelayedScaling", (9, 0)), "fp8-current": ("Float8CurrentScaling", (9, 0)),
                            "fp8-blockwise": ("Float8BlockScaling", (9, 0)), "mxfp8": ("MXFP8BlockScaling", (10, 0)),
                            "nvfp4": ("NVFP4BlockScaling", (10, 0))}
    for name in tool.RECIPES:
        assert precision_recipe(name).name == name
