"""Collectives: the collective part of Comm (docs/collectives.md): all_reduce, all_gather,
reduce_scatter, broadcast, all_to_all(v) enqueued on a stream, the backend choice, and the packet
permute (point to point, as small ppermutes need)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gshmem import _C
from gshmem._coll_args import (
    checked_counts,
    checked_displs,
    coll_out,
    coll_tensor,
    redop_code,
    team_arg,
    team_checked,
)
from gshmem._errors import UsageError
from gshmem._scalars import as_count

if TYPE_CHECKING:
    from gshmem.team import Team


class Collectives:
    """Mixin of Comm: needs ``_handle`` (the native comm), ``nranks``, ``device`` and ``_stream``
    (a stream argument as a cudaStream_t)."""

    _handle: Any
    nranks: int
    device: int
    _stream: Callable[[Any], int]

    # -- backend choice (gshmem/coll_select.py) --
    def enable_nccl(self) -> None:
        """Collective: loads NCCL at run time and creates its communicator over this comm, so
        collectives on the world team may choose it where it is faster. Raises the same
        ``UsageError`` on every PE when NCCL cannot be loaded (gshmem's own keep working)."""
        from gshmem import coll_select

        coll_select.enable_nccl(self)

    def explain(
        self,
        op: str,
        nbytes: int,
        npes: int | None = None,
        symmetric: bool = False,
        symmetric_input: bool = False,
    ) -> str:
        """The backend and algorithm collective ``op`` ("all_reduce", "all_gather", ...) would
        use for ``nbytes`` of input per PE over ``npes`` PEs (default all), and why.
        ``symmetric``: the output is a symmetric tensor (``empty``/``zeros``; for all_to_all,
        not the input), which lets large calls write it directly and stay on gshmem longer;
        ``symmetric_input``: the input is one too, which lets a two-shot all_reduce read the
        inputs in place ("two_shot pull"). Not collective; runs nothing."""
        from gshmem import coll_select

        return coll_select.explain(self, op, nbytes, npes, symmetric, symmetric_input)

    # Collective over ``team`` (a gshmem.Team of this comm; None: every PE): every member makes
    # the same call (same element count, dtype, op and root) in the same order relative to its
    # other collectives on that team (docs/collectives.md). Each enqueues on ``stream`` (as for
    # the on-stream operations above) and returns at once; results are in ``out`` when the stream
    # gets there. Capturable in CUDA graphs. Tensors: contiguous, on this comm's GPU, float32,
    # bfloat16, float16, int32 or int64, symmetric (``empty``/``zeros``) or ordinary (staged
    # through the comm's scratch). Collectives on teams that share two or more PEs must be
    # ordered on each PE (one stream, or events between streams). The backend and algorithm are
    # chosen per call; GSHMEM_COLL_BACKEND, GSHMEM_COLL_<OP>_BACKEND and GSHMEM_COLL_<OP>_ALGO
    # override the choice.

    def all_reduce(
        self, t: Any, op: str = "sum", out: Any = None, team: Team | None = None, stream: Any = None
    ) -> Any:
        """Collective over ``team``; stream-ordered: returns once enqueued on ``stream``.
        ``out[i] = op`` over the members' ``t[i]`` (``op``: "sum", "prod", "min", "max";
        16-bit floats accumulate in fp32). In place into ``t`` when ``out`` is None. Returns
        ``out``."""
        out = t if out is None else out
        code, count, in_ptr = coll_tensor(t, "all_reduce: t", self.device)
        coll_out(out, t, count, "all_reduce")
        _C.all_reduce_on_stream(
            self._handle,
            team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            redop_code(op),
            self._stream(stream),
        )
        return out

    def all_gather(
        self, t: Any, out: Any = None, team: Team | None = None, stream: Any = None
    ) -> Any:
        """Collective over ``team``; stream-ordered: returns once enqueued on ``stream``.
        ``out[m]`` = member ``m``'s ``t``; ``out`` holds team-size times ``t``'s elements
        (new, of shape ``(team size, *t.shape)``, when None). ``t`` may be ``out``'s own block
        (in place). Returns ``out``."""
        code, count, in_ptr = coll_tensor(t, "all_gather: t", self.device)
        n = self._team_size(team)
        out = t.new_empty((n, *t.shape)) if out is None else out
        coll_out(out, t, count * n, "all_gather")
        _C.all_gather_on_stream(
            self._handle,
            team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            self._stream(stream),
        )
        return out

    def reduce_scatter(
        self,
        t: Any,
        out: Any = None,
        op: str = "sum",
        team: Team | None = None,
        stream: Any = None,
    ) -> Any:
        """Collective over ``team``; stream-ordered: returns once enqueued on ``stream``.
        ``out[i] = op`` over the members' ``t[me * k + i]``, ``k = t.numel() // team size``
        (which must divide). ``out`` is new when None (``t.shape[0] // size`` rows when that
        divides, else flat). Returns ``out``."""
        code, total, in_ptr = coll_tensor(t, "reduce_scatter: t", self.device)
        n = self._team_size(team)
        if total % n:
            raise UsageError(
                f"reduce_scatter: t has {total} elements, not a multiple of the team size {n}"
            )
        count = total // n
        if out is None:
            rows = t.dim() >= 1 and t.shape[0] % n == 0
            out = t.new_empty((t.shape[0] // n, *t.shape[1:]) if rows else (count,))
        coll_out(out, t, count, "reduce_scatter")
        _C.reduce_scatter_on_stream(
            self._handle,
            team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            redop_code(op),
            self._stream(stream),
        )
        return out

    def broadcast(
        self,
        t: Any,
        root: int,
        out: Any = None,
        team: Team | None = None,
        stream: Any = None,
    ) -> Any:
        """Collective over ``team``; stream-ordered: returns once enqueued on ``stream``.
        ``out`` = team member ``root``'s ``t`` (``t`` is read on the root only). In place
        into ``t`` when ``out`` is None. Returns ``out``."""
        out = t if out is None else out
        code, count, in_ptr = coll_tensor(t, "broadcast: t", self.device)
        coll_out(out, t, count, "broadcast")
        _C.broadcast_on_stream(
            self._handle,
            team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            as_count(root, "root"),
            self._stream(stream),
        )
        return out

    def all_to_all(
        self, t: Any, out: Any = None, team: Team | None = None, stream: Any = None
    ) -> Any:
        """Collective over ``team``; stream-ordered: returns once enqueued on ``stream``.
        Block ``m`` of ``t`` (``t.numel() // team size`` elements) goes to member ``m``;
        block ``m`` of ``out`` comes from member ``m``. ``out`` is new when None; ``out`` may be
        ``t`` (in place). Returns ``out``."""
        code, total, in_ptr = coll_tensor(t, "all_to_all: t", self.device)
        n = self._team_size(team)
        if total % n:
            raise UsageError(
                f"all_to_all: t has {total} elements, not a multiple of the team size {n}"
            )
        out = t.new_empty(t.shape) if out is None else out
        coll_out(out, t, total, "all_to_all")
        _C.all_to_all_on_stream(
            self._handle,
            team_arg(team),
            in_ptr,
            out.data_ptr(),
            total // n,
            code,
            self._stream(stream),
        )
        return out

    def all_to_allv(
        self,
        t: Any,
        send_counts: Sequence[int],
        out: Any,
        recv_counts: Sequence[int],
        send_displs: Sequence[int] | None = None,
        recv_displs: Sequence[int] | None = None,
        team: Team | None = None,
        stream: Any = None,
    ) -> Any:
        """Collective over ``team``; stream-ordered: returns once enqueued on ``stream``.
        Member ``m`` receives ``send_counts[m]`` elements of ``t`` from ``send_displs[m]``,
        placed in its ``out`` at ``recv_displs[me]``; ``recv_counts[m]`` must be what member
        ``m`` sends here. Displacements default to the running sums of the counts (packed).
        Each count is at most one staging slot (GSHMEM_COLL_SCRATCH_BYTES / (2 x PEs)).
        ``t`` and ``out`` must not overlap. Returns ``out``."""
        code, total, in_ptr = coll_tensor(t, "all_to_allv: t", self.device)
        out_code, out_total, out_ptr = coll_tensor(out, "all_to_allv: out", self.device)
        if out_code != code:
            raise UsageError(f"all_to_allv: out is {out.dtype} but t is {t.dtype}; they must match")
        n = self._team_size(team)
        sc = checked_counts(send_counts, n, "send_counts")
        rc = checked_counts(recv_counts, n, "recv_counts")
        sd = checked_displs(send_displs, sc, "send_displs")
        rd = checked_displs(recv_displs, rc, "recv_displs")
        for counts, displs, have, what in ((sc, sd, total, "t"), (rc, rd, out_total, "out")):
            end = max((d + c for c, d in zip(counts, displs, strict=True) if c), default=0)
            if end > have:
                raise UsageError(
                    f"all_to_allv: the counts and displacements reach element {end} of {what}, "
                    f"which has {have}"
                )
        _C.all_to_allv_on_stream(
            self._handle,
            team_arg(team),
            in_ptr,
            sc,
            sd,
            out_ptr,
            rc,
            rd,
            code,
            self._stream(stream),
        )
        return out

    def permute(self, t: Any, dst: int, src: int, out: Any = None, stream: Any = None) -> Any:
        """Point to point (the step of ``jax.lax.ppermute``): sends ``t`` to PE ``dst`` and
        receives PE ``src``'s ``t`` into ``out`` (new if None); -1 for none (nothing received
        leaves zeros); ``dst == src == rank`` copies. Not collective over a team: the n-th call
        in which PE p sends to q pairs with the n-th in which q receives from p, so every PE
        makes its permutes in one order, and a PE's permutes are ordered among themselves (one
        stream, or stream dependencies). One kernel storing into the receiver: LL packets below
        GSHMEM_PERMUTE_BULK_MIN bytes (default 512 KiB), plain stores with a flag per chunk from
        it (docs/collectives.md gives the rates); or, for an ``out`` from ``comm.empty`` (the
        same on every PE), not ``t``, of at least GSHMEM_PERMUTE_COPY_MIN bytes (default 16
        MiB), the copy engine straight into the receiver's ``out``. On a comm with a proxy path
        (peers on other hosts) such an ``out`` takes that path at any size, through the proxy to
        those peers, and they accept no other ``out``. Enqueued on ``stream``; capturable.
        Returns ``out``."""
        code, total, in_ptr = coll_tensor(t, "permute: t", self.device)
        out = t.new_empty(t.shape) if out is None else out
        coll_out(out, t, total, "permute")
        dst, src = as_count(dst, "permute: dst"), as_count(src, "permute: src")
        _C.permute_on_stream(self._handle, in_ptr, out.data_ptr(), total * t.element_size(),
                             dst, src, self._stream(stream))  # fmt: skip
        return out

    def _team_size(self, team: Team | None) -> int:
        return self.nranks if team is None else team_checked(team).size


__all__ = ["Collectives"]
