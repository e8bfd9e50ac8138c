"""ppermute in two halves, so that a transfer overlaps the computation XLA runs meanwhile (the
ring attention's rotations, attention/ring.py).

``ppermute_start`` enqueues the exchange on a channel's own stream, after the work XLA enqueued
before it (copy engines and stream memory operations: no SMs); ``ppermute_done`` makes XLA's
stream wait for it and gives the received values. Contract:

- Collective like ``ppermute``: every device of the axis makes the same starts and dones in the
  same order, with the same channels.
- Channels: 1 .. CHANNELS - 1 (a pytree's leaves take consecutive channels from ``channel``).
  A channel's exchanges run one after another in the order their starts were enqueued, so
  every device must enqueue them in the same order (the compiled schedule of an SPMD program
  does); a done whose channel has a later start already enqueued waits for that one too.
- ``done(pending, *after)`` runs after everything that computes ``after``. Between start and
  done XLA keeps start's operands alive, and nothing may read ``pending.received``.
- XLA runs start before a computation only if that computation depends on it: compute on
  ``x`` from ``x, pending = pending.hold(x)`` (``x`` tied to the start) to keep the start ahead
  of it, and give done the Pending that hold returned (it carries the tie).
- Not differentiable by itself (the ring's custom VJP calls it in both of its rules). Under
  ``GSHMEM_JAX_PPERMUTE_BACKEND=xla`` (or ``GSHMEM_JAX_BACKEND=xla``) start is
  ``jax.lax.ppermute`` and done returns its result: the same values, no overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gshmem._errors import UsageError
from gshmem.jax import ops
from gshmem.jax.rules import check_perm, choose

CHANNELS = 5  # src/jax/registry.h kChannels; channel 0 is ppermute's


@dataclass(frozen=True)
class Pending:
    """An exchange between its start and its done."""

    received: Any  # start's results, as x's pytree: valid only through done
    sent: Any  # start's operands, kept alive until done
    channels: tuple[int, ...]  # one per leaf
    tokens: tuple[Any, ...]  # the starts' dataless outputs (none on XLA's collective)
    on_gshmem: bool

    def hold(self, x: Any) -> tuple[Any, Pending]:
        """(``x`` tied to this start, this exchange carrying the tie): what is computed from the
        returned ``x`` runs after the start has been enqueued; pass the returned Pending to done.
        The tie is an optimization barrier over ``x`` and the starts' dataless tokens (the
        received arrays stay out of it: XLA may not use them before done). Done takes the
        barrier's tokens: XLA's compiler drops a barrier's outputs that nothing uses, and with
        them the tie. Its GPU compiler removes barriers only after scheduling, so the schedule
        keeps the order (its CPU compiler removes them before)."""
        import jax

        if not self.tokens:
            return x, self
        x, tokens = jax.lax.optimization_barrier((x, self.tokens))
        return x, replace(self, tokens=tuple(tokens))


def ppermute_start(x: Any, axis_name: Any, perm, *, channel: int, mesh: Any = None) -> Pending:
    """Starts ``jax.lax.ppermute(x, axis_name, perm)`` on channels ``channel``, ``channel + 1``,
    ... (one per leaf of ``x``); see the module's contract."""
    import jax

    ax = ops._axis(axis_name, mesh)
    pairs = check_perm(perm, ax.size)
    leaves, tree = jax.tree.flatten(x)
    channels = tuple(range(channel, channel + len(leaves)))
    if channels and not (1 <= channels[0] and channels[-1] < CHANNELS):
        raise UsageError(f"ppermute_start: channels {channels[0]}..{channels[-1]} for "
                         f"{len(leaves)} arrays are not within 1..{CHANNELS - 1}")  # fmt: skip
    on_gshmem = all(choose("ppermute", ops._nbytes(a))[0] == "gshmem" for a in leaves)
    if not on_gshmem:
        got = [jax.lax.ppermute(a, axis_name, pairs) for a in leaves]
        return Pending(jax.tree.unflatten(tree, got), x, channels, (), False)
    started = [ops.wire.permute_start(a, ax, pairs, c)
               for a, c in zip(leaves, channels, strict=True)]  # fmt: skip
    got, tokens = [r for r, _ in started], tuple(t for _, t in started)
    return Pending(jax.tree.unflatten(tree, got), x, channels, tokens, True)


def ppermute_done(pending: Pending, *after: Any) -> Any:
    """The received values of ``pending`` (x's pytree), once every value in ``after`` is
    computed; see the module's contract."""
    import jax

    if not pending.on_gshmem:
        return pending.received
    leaves, tree = jax.tree.flatten(pending.received)
    keep = [*jax.tree.leaves(pending.sent), *pending.tokens, *jax.tree.leaves(after)]
    got = [ops.wire.permute_done(r, keep, c)
           for r, c in zip(leaves, pending.channels, strict=True)]  # fmt: skip
    return jax.tree.unflatten(tree, got)


def shift_start(x: Any, axis_name: Any, shift: int, *, channel: int, mesh: Any = None) -> Pending:
    """``ppermute_start`` of ``x`` to the member ``shift`` places on around the axis (negative:
    back)."""
    w = ops._axis(axis_name, mesh).size
    ring = [(i, (i + shift) % w) for i in range(w)]
    return ppermute_start(x, axis_name, ring, channel=channel, mesh=mesh)


def hold_all(x: Any, pendings) -> tuple[Any, list]:
    """(``x`` tied to every started exchange in ``pendings``, those exchanges carrying the
    ties; None entries stay None): what is computed from the returned ``x`` runs after all the
    starts, so their transfers overlap it (``Pending.hold``)."""
    tied = []
    for pending in pendings:
        if pending is not None:
            x, pending = pending.hold(x)
        tied.append(pending)
    return x, tied


__all__ = ["CHANNELS", "Pending", "hold_all", "ppermute_done", "ppermute_start", "shift_start"]
