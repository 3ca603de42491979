"""The busiest expert-parallel rank's load under Megatron's force-balanced benchmark routing.

Megatron-LM's `--moe-router-force-load-balancing` replaces the router's logits by fresh standard-normal
values on every forward (Megatron-LM @ d98e8a64 megatron/core/transformer/moe/router.py L861-863;
moe_utils.py L1258-1279 `RandomSTE`: `logits.clone().normal_()` under a per-rank seed), so each token's
top-k is k distinct experts drawn uniformly. NVIDIA's published MoE benchmarks run so: Megatron-Bridge's
performance scripts set it for every dropless run (Megatron-Bridge @ 067f987d scripts/performance/utils/
overrides.py L459-462; the performance summary: "we force-balance the token distribution among experts"),
and so do the Megatron-MoE-ModelZoo Qwen3 scripts (yanring/Megatron-MoE-ModelZoo @ 8017e112
examples/qwen3/run_235b.sh L26-40). The routing is balanced *in expectation*; what is left is the sampling
noise of a finite micro-batch, and a dropless layer waits for the busiest rank at its combine all-to-all.

Derivation. N tokens enter an expert-parallel group of n ranks with G = E/n local experts each. A token's
k experts are a uniform k-subset of E, so the number X that land on one rank is hypergeometric:

    E[X] = k/n,   Var[X] = k (1/n)(1 - 1/n)(E - k)/(E - 1)

and a rank's load L_j = sum of N independent such counts: mean mu = N k/n, variance sigma^2 = N Var[X]
(normal to within 1/sqrt(N); N is 10^4-10^5 here). The n loads sum to N k exactly, so they are n
exchangeable normals with correlation -1/(n - 1): L_j - mu = Z_j - Zbar for n i.i.d. N(0, s^2) with
s^2 = sigma^2 / (1 - 1/n). Hence

    E[max_j L_j] = mu + s e_n,        R = E[max_j L_j] / mu = 1 + e_n sigma / (mu sqrt(1 - 1/n))

with e_n the expected maximum of n standard normals (Tippett 1925; tabulated by Harter 1961, Biometrika
48: e_2 = 1/sqrt(pi) = 0.5642, e_4 = 1.0294, e_8 = 1.4236), computed here by quadrature of
e_n = integral of x n phi(x) Phi(x)^(n-1) dx.

Example: Qwen3-30B-A3B (E = 128, k = 8) at EP 8, micro-batch 1 x 4,096 tokens: N = 32,768, mu = 32,768,
sigma = 164.6, R = 1 + 1.4236 x 164.6 / (32,768 x 0.935) = 1.0076.
"""

from __future__ import annotations

import math

import numpy as np

# Quadrature grid for e_n: the integrand n phi(x) Phi(x)^(n-1) x is below 1e-20 outside [-12, 12] for any
# n up to 10^6 (its mode sits near sqrt(2 ln n) <= 5.3); 24,001 points give e_n to better than 1e-9.
_GRID = np.linspace(-12.0, 12.0, 24_001)
_PHI = np.exp(-0.5 * _GRID**2) / math.sqrt(2.0 * math.pi)
_CDF = np.array([0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in _GRID])


def expected_max_standard_normal(n: int) -> float:
    """e_n: the expected largest of n independent standard normal draws (e_1 = 0)."""
    if n < 1:
        raise ValueError(f"need at least one draw, got {n}")
    density = n * _PHI * _CDF ** (n - 1)
    return float(np.trapezoid(_GRID * density, _GRID))


def forced_balance_imbalance(tokens: int, experts: int, top_k: int, ranks: int) -> float:
    """R: the busiest of `ranks` expert-parallel ranks' expected routed tokens over the mean, when `tokens`
    tokens each pick `top_k` of `experts` experts uniformly (Megatron's force-balanced routing); 1 without
    expert parallelism. The module docstring derives it."""
    if ranks <= 1:
        return 1.0
    if experts % ranks or not 1 <= top_k <= experts or tokens < 1:
        raise ValueError(f"{tokens} tokens, top-{top_k} of {experts} experts over {ranks} ranks is not a layout")
    p = 1.0 / ranks
    per_token_var = top_k * p * (1.0 - p) * (experts - top_k) / (experts - 1) if experts > 1 else 0.0
    mean = tokens * top_k * p
    sigma = math.sqrt(tokens * per_token_var)
    return 1.0 + expected_max_standard_normal(ranks) * sigma / (mean * math.sqrt(1.0 - p))
