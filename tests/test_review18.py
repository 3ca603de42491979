"""review18: a second engineer's review of the lead's fifth and sixth sessions (docs/story.md 'review18')."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64, np.uint32, np.uint16])
def test_the_memoised_group_walk_gives_each_groups_scalar_answer_for_any_integer_dtype(dtype):
    # _per_distinct_group keys (size, stride, devices) in one int64 and _distinct reads the key's bytes as int64: an
    # unsigned 64-bit array promoted the key to float64, and every group read back as another (local_members 1 for
    # groups of 2, 4 and 8 in one 8-GPU domain)
    from btacalc.model.gpu.collectives import domains_spanned, local_members

    size, stride, devices = (np.array(v, dtype=dtype) for v in ([2, 4, 8, 16, 4], [1, 2, 1, 1, 4], [16, 16, 16, 32, 64]))
    for walk in (local_members, domains_spanned):
        got = walk(size, stride, devices, 8)
        want = [walk(int(n), int(k), int(d), 8) for n, k, d in zip(size, stride, devices)]
        assert np.asarray(got).tolist() == want, walk.__name__
