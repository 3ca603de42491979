"""Divisors of a positive integer, built from its prime factorisation.

The batch-shape solver looks for the largest tile b dividing a global batch N. Trial division up to
sqrt(N) costs O(sqrt N) steps: 1e16 takes seconds and 2^70 never finishes. Factoring N first and
multiplying out its prime powers costs the factorisation plus O(d(N)) for the d(N) divisors (71 for
2^70, at most about 10^5 below 2^80).

`splits` counts the ways to write n as a product M*G*b without listing them.

Below `TRIAL_LIMIT` trial division is at most sqrt(2^32) = 65,536 steps (milliseconds); above it,
sympy's `factorint` (trial division, Pollard rho and p-1; well under a second for any N below 2^100)
is imported then, and only then, so the command line's start-up never imports sympy for this.
"""

from __future__ import annotations

TRIAL_LIMIT = 1 << 32


def factorise(n: int) -> dict[int, int]:
    """Prime -> exponent for a positive integer `n` (1 -> {})."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"factorise needs a positive integer, got {n!r}")
    if n >= TRIAL_LIMIT:
        from sympy.ntheory import factorint

        return {int(p): int(e) for p, e in factorint(n).items()}
    factors: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
        p += 1 if p == 2 else 2
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    return factors


def divisors(n: int) -> list[int]:
    """Every divisor of the positive integer `n`, ascending."""
    divs = [1]
    for p, e in factorise(n).items():
        divs = [d * p**k for d in divs for k in range(e + 1)]
    return sorted(divs)


def splits(n: int) -> int:
    """How many ordered triples (M, G, b) of positive integers have M*G*b = n: the product over the
    prime powers p^e of n of C(e + 2, 2)."""
    count = 1
    for e in factorise(n).values():
        count *= (e + 1) * (e + 2) // 2
    return count
