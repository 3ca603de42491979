"""Which buffers torch.compile allocates for the backward step of Megatron's native fused cross-entropy
(docs/memory.md "cenative"), measured on this machine's PyTorch (inductor, CPU).

Megatron-LM @ d98e8a64 megatron/core/fusions/fused_cross_entropy.py L63-L84 wraps the vocab-parallel
cross-entropy's gradient step in jit_fuser (torch.compile from torch 2.2, core/jit.py L16-L33): it takes the saved
fp32 softmax [s, b, V/t], subtracts 1 at each token's target column (an index_put on its 2-D view,
tensor_parallel/cross_entropy.py L111), scales each row by the token's output gradient in place (L114) and returns
the result cast to bf16 (fused_cross_entropy.py L82). This script compiles a function doing those three things (its
own code, not Megatron's) and lists the buffers of the generated graph: a full-size fp32 one beside the bf16 output
is the out-of-place copy the catalogue's native_fused loss counts.

    python tools/compiled_ce_buffers.py        # prints the allocations; exit 1 if no full-size fp32 copy is made
"""

from __future__ import annotations

import math
import re
import sys

SEQ, BATCH, COLUMNS = 256, 2, 1024  # s, b, V/t (the sizes do not change what is allocated)
TOKENS = SEQ * BATCH


def generated_buffers() -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of every buffer the compiled gradient step allocates."""
    import torch
    from torch._inductor.utils import run_and_get_code

    def gradient_step(softmax, grad_output, masked, target):
        rows = softmax.view(-1, softmax.size(-1))  # [s*b, V/t]
        index = torch.arange(rows.size(0), device=rows.device)
        rows[index, target] -= 1.0 - masked.view(-1).float()
        softmax.mul_(grad_output.unsqueeze(-1))  # [s, b] per-token gradients
        return softmax.to(torch.bfloat16)

    softmax = torch.rand(SEQ, BATCH, COLUMNS).softmax(-1)
    target = torch.randint(0, COLUMNS, (TOKENS,))
    masked = torch.zeros(SEQ, BATCH, dtype=torch.bool)
    _, sources = run_and_get_code(torch.compile(gradient_step), softmax, torch.ones(SEQ, BATCH), masked, target)
    found = []
    for source in sources:
        for shape, dtype in re.findall(r"empty_strided_\w+\(\(([\d, ]+)\),\s*\([\d, ]+\),\s*torch\.(\w+)\)", source):
            found.append((tuple(int(x) for x in shape.replace(" ", "").split(",") if x), dtype))
    return found


def main() -> int:
    import torch
    buffers = generated_buffers()
    print(f"torch {torch.__version__}: the compiled gradient step allocates")
    for shape, dtype in buffers:
        print(f"  {dtype} {shape}")
    full = [(shape, dtype) for shape, dtype in buffers if dtype == "float32" and math.prod(shape) == TOKENS * COLUMNS]
    print("a full-size fp32 copy of the softmax:", "yes" if full else "no")
    return 0 if full else 1


if __name__ == "__main__":
    sys.exit(main())
