"""Every GSHMEM_* setting the code names is documented: a variable the runtime, the device
headers or the Python package reads (or names in an error) appears in the README or docs/."""

from __future__ import annotations

import re
from pathlib import Path

from test_docs_links import PAGES, ROOT

SOURCES = (".py", ".cpp", ".h", ".hpp", ".cu", ".cuh")
NAME = re.compile(r"""["'](GSHMEM_[A-Z0-9_]*[A-Z0-9])["']""")  # a whole name, not a prefix


def named_in_code() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for top in ("src", "include", "python"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SOURCES and path.is_file():
                for name in NAME.findall(path.read_text(errors="replace")):
                    names.setdefault(name, path.relative_to(ROOT))
    return names


def test_every_setting_the_code_names_is_documented():
    names = named_in_code()
    assert len(names) > 40  # the scan finds the settings (GSHMEM_TIMEOUT, GSHMEM_HEAP_RESERVE, ...)
    assert {"GSHMEM_TIMEOUT", "GSHMEM_HEAP_RESERVE", "GSHMEM_ATTENTION_KERNEL"} <= set(names)
    docs = "\n".join(page.read_text() for page in PAGES)
    missing = {name: str(path) for name, path in names.items() if name not in docs}
    assert not missing, f"settings named in the code but in no doc: {missing}"
