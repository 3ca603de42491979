"""Divisors from the prime factorisation (btacalc.divisors), against trial division by hand,
and the solver's fixed global batch far beyond what trial division could reach."""

from __future__ import annotations

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from btacalc.divisors import TRIAL_LIMIT, divisors, factorise, splits


def _by_trial_division(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 5000))
def test_small_numbers_match_trial_division(n):
    assert divisors(n) == _by_trial_division(n)


def test_known_factorisations():
    assert factorise(1) == {} and divisors(1) == [1]
    assert factorise(360) == {2: 3, 3: 2, 5: 1}
    assert factorise(2**70) == {2: 70} and divisors(2**70) == [2**i for i in range(71)]
    p, q = 34359738421, 34359739423  # two 35-bit primes: trial division would need ~1.7e10 steps
    assert factorise(p * q) == {p: 1, q: 1} and divisors(p * q) == [1, p, q, p * q]
    n = 2**20 * 3**10 * 5**5 * 7**3 * 11 * 13
    divs = divisors(n)
    assert len(divs) == 21 * 11 * 6 * 4 * 2 * 2 and all(n % d == 0 for d in divs) and divs == sorted(set(divs))


def test_small_numbers_do_not_need_sympy(monkeypatch):
    monkeypatch.setitem(sys.modules, "sympy.ntheory", None)  # importing it would fail
    assert divisors(TRIAL_LIMIT - 1)[-1] == TRIAL_LIMIT - 1
    with pytest.raises(ImportError):
        divisors(TRIAL_LIMIT)


@pytest.mark.parametrize("bad", [0, -4, 2.0, True])
def test_not_a_positive_integer(bad):
    with pytest.raises(ValueError):
        factorise(bad)


def test_plan_with_a_global_batch_of_2_to_the_62(cli):
    """Trial division never answered this; the plan is solved at once: N = M x G x b on one GPU, every
    factor a power of two (M micro-batches of G*b that fit)."""
    n = 2**62
    code, out, err = cli("plan", "--hw", "a100-80gb", "--global-batch", str(n), "--json")
    plan = json.loads(out)["plan"]
    assert code in (0, 1) and err == ""
    assert plan["step_batch"] == n and plan["micro_batches"] * plan["tiles"] * plan["tile_batch"] == n
    assert all(math.log2(plan[k]).is_integer() for k in ("micro_batches", "tiles", "tile_batch"))


def test_a_batch_with_too_many_splits_is_one_line(cli):
    n = 2**9 * 3**5 * 5**3 * 7**2 * 11**2 * 13 * 17 * 19 * 23 * 29  # about 2.6e17, 1.0e8 splits M x G x b
    code, out, err = cli("plan", "--hw", "a100-80gb", "--global-batch", str(n))
    assert code == 2 and "ways into M x G x b" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("n", [1, 2, 12, 36, 97, 360, 1024, 30030])
def test_splits_counts_ordered_triples(n):
    # M*G*b = n: count by brute force over M and G (b = n / (M G)); C(e + 2, 2) per prime power p^e
    brute = sum(1 for m in range(1, n + 1) if n % m == 0 for g in range(1, n // m + 1) if (n // m) % g == 0)
    assert splits(n) == brute


def test_splits_of_a_prime_power_is_a_binomial():
    assert splits(2**70) == 72 * 71 // 2  # C(72, 2)
    assert splits(12) == 6 * 3  # 2^2 * 3: C(4, 2) x C(3, 2)


@pytest.mark.parametrize("bad", [0, -3])
def test_factorise_refuses_what_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match=f"factorise needs a positive integer, got {bad}"):
        factorise(bad)
