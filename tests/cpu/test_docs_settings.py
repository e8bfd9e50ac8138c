"""Every GSHMEM_* setting the code names is documented: a variable the runtime, the device
headers or the Python package reads (or names in an error) appears in the README or docs/."""

from __future__ import annotations

import re
from pathlib import Path

from test_docs_links import PAGES, ROOT

SOURCES = (".py", ".cpp", ".h", ".hpp", ".cu", ".cuh")
NAME = re.compile(r"""["'](GSHMEM_[A-Z0-9_]*[A-Z0-9])["']""")  # a whole name, not a prefix
# the start of a name built from a variable: f"GSHMEM_JAX_{op}..." or "GSHMEM_COLL_" + op
PREFIX = re.compile(r"""["'](GSHMEM_[A-Z0-9_]*_)(?:\{|["']\s*\+)""")


def named_in_code(pattern: re.Pattern = NAME) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for top in ("src", "include", "python"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SOURCES and path.is_file():
                for name in pattern.findall(path.read_text(errors="replace")):
                    names.setdefault(name, path.relative_to(ROOT))
    return names


def test_every_family_of_settings_the_code_builds_is_documented():
    """A name the code builds from a variable is documented as the family it belongs to,
    ``GSHMEM_JAX_<OP>_BACKEND``: its prefix followed by ``<``."""
    prefixes = named_in_code(PREFIX)
    assert {"GSHMEM_JAX_", "GSHMEM_COLL_"} <= set(prefixes)
    docs = "\n".join(page.read_text() for page in PAGES)
    missing = {p: str(path) for p, path in prefixes.items() if f"{p}<" not in docs}
    assert not missing, f"families of settings built in the code but in no doc: {missing}"


def test_every_setting_the_code_names_is_documented():
    names = named_in_code()
    assert len(names) > 40  # the scan finds the settings (GSHMEM_TIMEOUT, GSHMEM_HEAP_RESERVE, ...)
    assert {"GSHMEM_TIMEOUT", "GSHMEM_HEAP_RESERVE", "GSHMEM_ATTENTION_KERNEL"} <= set(names)
    docs = "\n".join(page.read_text() for page in PAGES)
    missing = {name: str(path) for name, path in names.items() if name not in docs}
    assert not missing, f"settings named in the code but in no doc: {missing}"
