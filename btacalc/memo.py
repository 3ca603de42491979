"""Memoising pure functions whose arguments are frozen dataclasses, pydantic models or plain numbers.

A key must tell apart values that Python treats as equal but that lead to different arithmetic: 4, 4.0,
True, Fraction(4) and numpy's int64(4) hash and compare equal, yet an int stays exact where a float
rounds and an int64 wraps. `plain_key` therefore keys every scalar on its type as well as its value and
gives up (None: do not cache) on anything but plain Python scalars, tuples of them and frozen dataclasses
of them. Unhashable configuration objects (a hardware profile holds lists) are keyed on their identity by
`Memo`, which keeps a reference to them so that the identity cannot be reused while the entry lives.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, Generic, Hashable, Optional, TypeVar

_SCALARS = frozenset({int, float, str, bool, type(None), Fraction})
_UNCACHEABLE = object()

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _types(value: Any) -> Any:
    """The types of `value`'s leaves in order (the value itself then tells the rest), or _UNCACHEABLE."""
    kind = type(value)
    if kind in _SCALARS:
        return kind
    if kind is tuple:
        items = value
    else:
        params = getattr(kind, "__dataclass_params__", None)
        if params is None or not params.frozen:
            return _UNCACHEABLE
        items = value.__dict__.values()
    out = [kind]
    for v in items:
        t = type(v)
        if t not in _SCALARS:
            t = _types(v)
            if t is _UNCACHEABLE:
                return _UNCACHEABLE
        out.append(t)
    return tuple(out)


def plain_key(value: Any) -> Optional[Hashable]:
    """A hashable key of `value` that differs wherever a type differs (module docstring): the value with
    the types of its leaves; None when the value holds anything else (numpy arrays or scalars, lists,
    dicts, mutable objects)."""
    types = _types(value)
    return None if types is _UNCACHEABLE else (value, types)


_CACHES: list[Any] = []  # every Memo and every `remembered` function: what `clear_caches` empties


def remembered(cached: F) -> F:
    """Register a functools.lru_cache'd function of per-layout invariants with `clear_caches`."""
    _CACHES.append(cached)
    return cached


def clear_caches() -> None:
    """Empty every registered cache: the next evaluation computes every layout invariant afresh (the
    benchmark's first evaluation of a layout, and the tests that compare warm answers with fresh ones)."""
    for cache in _CACHES:
        (cache.cache_clear if hasattr(cache, "cache_clear") else cache.clear)()


class Memo(Generic[T]):
    """A bounded cache of a pure function's results. `get(key, objects, compute)`: `key` hashable (values),
    `objects` compared by identity (unhashable configuration such as a hardware profile); at `size`
    entries the cache starts again (the callers' working sets are a few layouts)."""

    def __init__(self, size: int = 256):
        self.size = size
        self._entries: dict[Any, tuple[tuple[Any, ...], T]] = {}
        _CACHES.append(self)

    def get(self, key: Optional[Hashable], objects: tuple[Any, ...], compute: Callable[[], T]) -> T:
        if key is None:
            return compute()
        full = (key, tuple([id(o) for o in objects]))
        hit = self._entries.get(full)
        if hit is not None and all([a is b for a, b in zip(hit[0], objects)]):
            return hit[1]
        value = compute()
        if len(self._entries) >= self.size:
            self._entries.clear()
        self._entries[full] = (objects, value)
        return value

    def clear(self) -> None:
        self._entries.clear()
