"""tools/moe_layer_ops.py counts the operators of Megatron-Core's own MoELayer per stage (forward) and per autograd
node (backward) (docs/host-time.md, section moehost). The Megatron part needs a Megatron-LM tree and runs by hand;
its counting mode is checked here on calls whose aten decomposition and autograd formula are fixed by PyTorch."""
from collections import Counter, defaultdict

import pytest

from tests.loading import load_script

torch = pytest.importorskip("torch")

tool = load_script("tools/moe_layer_ops.py")


def _forward_and_backward(fn, x):
    stages = tool.Stages()
    fwd, bwd = defaultdict(Counter), defaultdict(Counter)
    calls = []
    with tool.counting_mode(torch, stages, fwd, False, calls):
        out = fn(x, stages)
    with tool.counting_mode(torch, stages, bwd, True, calls):
        out.sum().backward()
    return fwd, bwd, calls


@pytest.mark.parametrize("chunks", [3, 6])
def test_the_backward_of_a_cat_of_n_chunks_is_n_slices_under_its_node(chunks):
    """cat's gradient formula slices the output gradient once per input (PyTorch derivatives.yaml, cat:
    cat_tensors_backward), so Megatron's unfused chunk sort costs one view per chunk backward: n view-only calls
    attributed to CatBackward0, no kernel. The forward's split is one view call and the cat one kernel, under the
    stage that ran them."""
    def sort_chunks(x, stages):
        with stages.at("sort"):
            return torch.cat(list(torch.split(x, [12 // chunks] * chunks))[::-1])

    fwd, bwd, _ = _forward_and_backward(sort_chunks, torch.randn(12, 3, requires_grad=True))
    assert tool.split_views(fwd["sort"]) == (1, 1)
    assert tool.split_views(bwd["CatBackward0"]) == (0, chunks)


def test_a_call_outside_every_stage_counts_under_the_layer_and_is_recorded_for_the_replay():
    """x * 2 outside a stage is the MoELayer's own (the stack's root); inside `at("a")` x + 1 is a's; each call is
    recorded once with its arguments, forward (2) then backward."""
    def two_ops(x, stages):
        y = x * 2
        with stages.at("a"):
            return y + 1

    fwd, _, calls = _forward_and_backward(two_ops, torch.randn(3, requires_grad=True))
    assert dict(fwd) == {"moe_layer": {"mul": 1}, "a": {"add": 1}}
    assert [str(f.overloadpacket.__name__) for f, _, _ in calls[:2]] == ["mul", "add"]
