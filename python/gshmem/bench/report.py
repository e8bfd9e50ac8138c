"""Results of the point-to-point suite: rows, the side-by-side table, JSON and ``&&&& PERF`` lines.

Pure Python (no GPU, no torch): the CPU tests exercise all of it.

A ``Row`` is one measurement. ``impl`` names who was measured (``gshmem`` or a baseline:
``copy_engine``, ``nccl``, ``nvshmem``); ``path`` is ``device`` (kernels issue the transfer),
``on_stream`` (host-issued on a CUDA stream: copy engines and stream memory operations) or
``host`` (NCCL, torch peer copies). ``value`` is in ``unit``: GB/s (1e9 bytes per second, bytes
moved by one PE), Mops/s, or us (one-way latency). A row whose ``value`` is None carries ``note``
instead (why it was not measured).

``&&&& PERF`` lines (the format the NVSHMEM comparison program prints too)::

    &&&& PERF <op> <value> <unit> impl=<impl> path=<path> scope=<scope> ctas=<c> threads=<t>
         dir=<uni|bidir> size=<bytes> sms=<n|?>        (one line)
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

GB = 1e9
BASELINES = ("copy_engine", "nccl", "nvshmem")
BASELINE_TITLES = {"copy_engine": "copy engine", "nccl": "NCCL", "nvshmem": "NVSHMEM"}
LOWER_IS_BETTER = {"us"}
PERF_PREFIX = "&&&& PERF"


@dataclass
class Row:
    """One measurement (or one that could not be made: ``value`` None, ``note`` says why)."""

    impl: str
    op: str  # put, get, p, g, fetch_add, add, pingpong (put_signal + wait), pingpong_packets
    #          (put_packets + wait_packets), put_signal_wait
    path: str  # device, on_stream, host
    unit: str  # GB/s, Mops/s, us
    value: float | None
    size: int = 0  # bytes per transfer (0 for message rates)
    scope: str = "-"  # thread, warp, block, or "-" (host-issued)
    ctas: int = 0
    threads: int = 0
    direction: str = "uni"  # uni, bidir
    sms: int | None = None  # SMs the path occupies (0: copy engine / stream memory ops)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def config(self) -> str:
        """``CTAs x threads`` for device rows, ``-`` otherwise."""
        return f"{self.ctas}x{self.threads}" if self.ctas else "-"


# -- arithmetic -----------------------------------------------------------------------------------


def bandwidth_gbps(nbytes: float, seconds: float) -> float:
    """Bytes moved by one PE over the time, in GB/s (GB = 1e9 bytes)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return nbytes / seconds / GB


def rate_mops(ops: float, seconds: float) -> float:
    """Operations per second, in millions."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return ops / seconds / 1e6


def bus_bandwidth(algbw: float, collective: str, nranks: int) -> float:
    """nccl-tests' bus bandwidth from algorithm bandwidth (for the collective suites)."""
    n = nranks
    factors = {
        "sendrecv": 1.0,
        "broadcast": 1.0,
        "reduce": 1.0,
        "all_reduce": 2.0 * (n - 1) / n,
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_to_all": (n - 1) / n,
    }
    if collective not in factors:
        raise ValueError(f"unknown collective {collective!r}; one of {sorted(factors)}")
    return algbw * factors[collective]


def median(values: Sequence[float]) -> float:
    """Median of the repeats (the figure reported)."""
    if not values:
        raise ValueError("no values")
    return float(statistics.median(values))


# -- side by side ---------------------------------------------------------------------------------


def baseline_key(row: Row, impl: str) -> tuple | None:
    """What a gshmem row is compared with in baseline ``impl`` (None: nothing comparable).

    copy_engine and nccl: the same op (nccl: put = send/recv), direction and size, whatever the
    path (they are the ceilings every path is held to). nvshmem: the same op, path, scope, CTAs x
    threads, direction and size."""
    if impl in ("copy_engine", "nccl"):
        if row.unit != "GB/s" or (impl == "nccl" and row.op != "put"):
            return None
        return (impl, row.op, row.direction, row.size)
    if impl == "nvshmem":
        return (impl, row.op, row.path, row.scope, row.ctas, row.threads, row.direction, row.size)
    return None


def _own_key(row: Row) -> tuple | None:
    if row.impl in ("copy_engine", "nccl"):
        return (row.impl, row.op, row.direction, row.size)
    if row.impl == "nvshmem":
        return baseline_key(row, "nvshmem")
    return None


def ratio(gshmem_value: float | None, baseline_value: float | None) -> float | None:
    """gshmem / baseline (None when either is missing or the baseline is 0)."""
    if gshmem_value is None or baseline_value is None or baseline_value == 0:
        return None
    return gshmem_value / baseline_value


def compare(rows: Sequence[Row], baselines: Iterable[str]) -> list[dict[str, Any]]:
    """Every gshmem row with, for each requested baseline, the matching value and the ratio."""
    index: dict[tuple, Row] = {}
    for r in rows:
        k = _own_key(r)
        if k is not None and r.value is not None:
            index[k] = r
    out = []
    wanted = list(baselines)
    for r in rows:
        if r.impl != "gshmem":
            continue
        entry: dict[str, Any] = {"row": r}
        for b in wanted:
            k = baseline_key(r, b)
            base = index.get(k) if k is not None else None
            entry[b] = None if base is None else (base.value, ratio(r.value, base.value))
        out.append(entry)
    return out


# -- formatting -----------------------------------------------------------------------------------


def fmt_size(nbytes: int) -> str:
    """1024 -> '1K', 3 << 20 -> '3M', 1000 -> '1000' (binary units, exact only)."""
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{suffix}"
    return str(nbytes)


def fmt_value(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 10:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _cell(pair: tuple[float | None, float | None] | None) -> str:
    if pair is None:
        return "-"
    value, r = pair
    return f"{fmt_value(value)} ({r:.2f}x)" if r is not None else fmt_value(value)


def format_table(rows: Sequence[Row], baselines: Sequence[str] = (), title: str = "") -> str:
    """The table of gshmem rows, each with the requested baselines' values and gshmem/baseline
    ratios side by side; then the baselines' skip reasons. Returns the text (no trailing newline).
    """
    header = ["op", "path", "scope", "CTAsxthr", "SMs", "dir", "size", "gshmem", "unit"]
    header += [BASELINE_TITLES.get(b, b) for b in baselines]
    header.append("note")
    lines: list[list[str]] = []
    for entry in compare(rows, baselines):
        r: Row = entry["row"]
        size = fmt_size(r.size) if r.size else "-"
        sms = "?" if r.sms is None else str(r.sms)
        cells = [r.op, r.path, r.scope, r.config(), sms, r.direction, size, fmt_value(r.value)]
        cells.append(r.unit)
        cells += [_cell(entry[b]) for b in baselines]
        cells.append(r.note)
        lines.append(cells)
    widths = [
        max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(header)
    ]
    out = []
    if title:
        out.append(title)
    out.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    out.append("  ".join("-" * w for w in widths))
    for cells in lines:
        out.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    if baselines:
        out.append(
            "baseline cells: value (gshmem/baseline); > 1 is better for GB/s and Mops/s, "
            "< 1 is better for us"
        )
    for r in rows:
        if r.impl != "gshmem" and r.value is None and r.note:
            out.append(f"{BASELINE_TITLES.get(r.impl, r.impl)}: {r.note}")
    return "\n".join(out)


def perf_line(row: Row) -> str:
    """One ``&&&& PERF`` line for a measured row (rows without a value give '')."""
    if row.value is None:
        return ""
    sms = "?" if row.sms is None else str(row.sms)
    return (
        f"{PERF_PREFIX} {row.op} {row.value:.4f} {row.unit} impl={row.impl} path={row.path} "
        f"scope={row.scope} ctas={row.ctas} threads={row.threads} dir={row.direction} "
        f"size={row.size} sms={sms}"
    )


def parse_perf_lines(text: str, impl: str | None = None) -> list[Row]:
    """Rows from every ``&&&& PERF`` line in ``text`` (other lines are ignored; a malformed PERF
    line raises ValueError naming it). ``impl`` overrides the lines' impl= field."""
    rows = []
    for line in text.splitlines():
        at = line.find(PERF_PREFIX)
        if at < 0:
            continue
        parts = line[at + len(PERF_PREFIX) :].split()
        try:
            op, value, unit = parts[0], float(parts[1]), parts[2]
            fields = dict(p.split("=", 1) for p in parts[3:])
            sms = fields.get("sms", "?")
            rows.append(
                Row(
                    impl=impl or fields.get("impl", "unknown"),
                    op=op,
                    path=fields.get("path", "device"),
                    unit=unit,
                    value=value,
                    size=int(fields.get("size", 0)),
                    scope=fields.get("scope", "-"),
                    ctas=int(fields.get("ctas", 0)),
                    threads=int(fields.get("threads", 0)),
                    direction=fields.get("dir", "uni"),
                    sms=None if sms == "?" else int(sms),
                )
            )
        except (IndexError, ValueError) as e:
            raise ValueError(f"malformed PERF line {line.strip()!r}: {e}") from None
    return rows


def to_json(
    rows: Sequence[Row], meta: dict[str, Any], baselines: Sequence[str] = (), suite: str = "p2p"
) -> str:
    """The JSON document: ``meta`` (machine, options, command), every row, and per gshmem row
    the ratios to each baseline."""
    ratios = []
    for entry in compare(rows, baselines):
        r: Row = entry["row"]
        ratios.append(
            {
                "key": [r.op, r.path, r.scope, r.ctas, r.threads, r.direction, r.size],
                **{b: (None if entry[b] is None else entry[b][1]) for b in baselines},
            }
        )
    doc = {"suite": suite, "meta": meta, "rows": [asdict(r) for r in rows], "ratios": ratios}
    return json.dumps(doc, indent=1, sort_keys=False)


def rows_from_json(text: str) -> list[Row]:
    """The rows of a document written by ``to_json``."""
    return [Row(**r) for r in json.loads(text)["rows"]]


__all__ = [
    "BASELINES",
    "GB",
    "Row",
    "bandwidth_gbps",
    "baseline_key",
    "bus_bandwidth",
    "compare",
    "fmt_size",
    "format_table",
    "median",
    "parse_perf_lines",
    "perf_line",
    "rate_mops",
    "ratio",
    "rows_from_json",
    "to_json",
]
