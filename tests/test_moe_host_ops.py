"""tools/moe_host_ops.py counts aten calls and splits them into kernel-launching and view-only calls (the
numbers in docs/host-time.md, "Per-op host cost of the eager MoE layer"). The Megatron-LM part of the tool needs a
Megatron checkout and runs by hand; its counter is checked here on calls whose aten decomposition is fixed."""

import pytest

from tests.loading import load_script

torch = pytest.importorskip("torch")

tool = load_script("tools/moe_host_ops.py")


def test_the_counter_splits_kernels_from_views():
    """x.view(-1) is one view (no kernel); * 2 and .sum() are one kernel each: (2 kernels, 1 view)."""
    x = torch.randn(4, 4, requires_grad=True)
    with tool._Count() as c:
        (x.view(-1) * 2).sum()
    assert tool.split_views(c.ops) == (2, 1)


def test_a_split_into_n_chunks_is_one_call_and_its_cat_one_kernel():
    """torch.split into n chunks is one aten call (split_with_sizes, a view) and torch.cat one kernel, whatever
    n: the forward of Megatron's unfused sort_chunks_by_idxs does not grow with the experts (its backward does,
    one slice per chunk and cat)."""
    x = torch.randn(12, 3)
    for n in (3, 6):
        with tool._Count() as c:
            torch.cat(list(torch.split(x, [12 // n] * n))[::-1])
        assert tool.split_views(c.ops) == (1, 1)
