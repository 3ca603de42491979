"""tools/te_grouped_ops.py counts and times TransformerEngine GroupedLinear's per-expert host work (docs/host-time.md,
section tegrouped). The TE part needs a TE and a Megatron-LM tree and runs by hand; what is checked here is what the
numbers rest on: the line that separates the per-expert slope from the per-call intercept, the Python-call counter,
and the stand-in GEMM, which must compute what TE's grouped GEMM computes in each of its three layouts."""
import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

_PATH = Path(__file__).resolve().parents[1] / "tools" / "te_grouped_ops.py"
_SPEC = importlib.util.spec_from_file_location("te_grouped_ops", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tool)


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
