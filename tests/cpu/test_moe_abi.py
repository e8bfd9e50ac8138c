"""gshmem.moe's ctypes signatures against the C ABI in src/moe/*.cu: a missing or shifted argument
would pass the wrong pointer to a kernel (found only as an illegal address on a GPU)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from gshmem.moe import kernels

SOURCES = Path(__file__).resolve().parents[2] / "src" / "moe"
C_TYPES = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64}


def c_functions() -> dict[str, list[type]]:
    """Every ``int gshmem_moe_*(...)`` definition in the sources: its parameters as ctypes."""
    found = {}
    for path in sorted(SOURCES.glob("*.cu")):
        text = path.read_text()
        for name, params in re.findall(r"^int (gshmem_moe_\w+)\(([^)]*)\)", text, re.M):
            types = []
            for p in " ".join(params.split()).split(","):
                decl = p.strip().rsplit(" ", 1)[0]  # drop the parameter's name
                pointer = "*" in p or decl.endswith("cudaStream_t")
                types.append(ctypes.c_void_p if pointer else C_TYPES[decl.replace("const ", "")])
            found[name] = types
    return found


def test_every_c_function_has_a_signature() -> None:
    assert set(c_functions()) == set(kernels._SIGNATURES)


@pytest.mark.parametrize("name", sorted(kernels._SIGNATURES))
def test_signature_matches_the_c_definition(name) -> None:
    assert kernels._SIGNATURES[name] == c_functions()[name]
