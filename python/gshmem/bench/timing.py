"""How many calls a bench times: enough chained calls per repeat that the host's launches overlap
the GPU's work (as in a training loop), few enough that a long call is not timed for minutes."""

from __future__ import annotations

TARGET_REPEAT_S, REPEAT_BUDGET_S = 0.5, 10.0


def schedule(est_s: float, iters: int, warmup: int, repeats: int) -> tuple[int, int, int]:
    """(warm-up calls, calls per repeat, repeats) for a call of about ``est_s`` seconds: a repeat
    lasts about TARGET_REPEAT_S (at most ``iters`` calls, at least one), the repeats together
    about REPEAT_BUDGET_S (at most ``repeats``, at least one), at least one warm-up call."""
    n = max(1, min(iters, int(TARGET_REPEAT_S / est_s) if est_s > 0 else iters))
    r = max(1, min(repeats, int(REPEAT_BUDGET_S / (est_s * n)) if est_s > 0 else repeats))
    return max(1, min(warmup, n)), n, r


__all__ = ["REPEAT_BUDGET_S", "TARGET_REPEAT_S", "schedule"]
