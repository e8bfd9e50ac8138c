"""Checks of scalar arguments shared by the Python surface (counts, unsigned 64-bit values)."""

from __future__ import annotations

from gshmem._errors import UsageError

U64_LIMIT = 1 << 64


def as_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an int, got {type(value).__name__}")
    return value


def u64(value: object, name: str) -> int:
    value = as_count(value, name)
    if not 0 <= value < U64_LIMIT:
        raise UsageError(
            f"{name} must be an unsigned 64-bit value (0 <= value < 2**64), got {value}"
        )
    return value


__all__ = ["U64_LIMIT", "as_count", "u64"]
