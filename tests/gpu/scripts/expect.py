"""What the GPU check scripts share for argument errors (imported from the scripts' folder)."""

from __future__ import annotations

import gshmem


def expect_usage(fn, *fragments: str) -> str:
    """Calls fn(); it must raise gshmem.UsageError whose message holds every fragment. Returns
    the message."""
    try:
        fn()
    except gshmem.UsageError as e:
        msg = str(e)
        for f in fragments:
            assert f in msg, f"UsageError without {f!r}: {msg}"
        return msg
    raise AssertionError(f"no UsageError (expected one mentioning {fragments})")
