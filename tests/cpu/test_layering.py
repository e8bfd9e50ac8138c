"""The Python package's layering (docs/architecture.md): arrows point down only. comm.py sits on
top of the core modules, so only the package's __init__ may import it (applications take Comm
from ``gshmem``), and no core module imports an application, even for type checking."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "gshmem"
APPLICATIONS = ("attention", "moe", "jax", "torch", "train", "bench", "demo")


def absolute(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an import-from names (``from .comm import Comm`` in gshmem/x.py is
    gshmem.comm), so relative imports cannot slip past the checks."""
    if node.level == 0:
        return node.module or ""
    parts = ["gshmem", *path.relative_to(PACKAGE).parent.parts]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(path: Path, source: str | None = None) -> set[str]:
    """Every module `path` (or `source`, as if written there) imports, at any depth
    (TYPE_CHECKING and function bodies too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = absolute(path, node)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_relative_imports_resolve_to_the_package():
    """``from .comm import Comm`` counts as importing gshmem.comm wherever it is written."""
    for where, line in [("buffer.py", "from .comm import Comm"),
                        ("moe/buffer.py", "from ..comm import Comm"),
                        ("moe/buffer.py", "from .. import comm")]:  # fmt: skip
        assert "gshmem.comm" in imported_modules(PACKAGE / where, line), (where, line)


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_only_the_package_imports_comm():
    importers = [
        str(p.relative_to(PACKAGE))
        for p in sources()
        if "gshmem.comm" in imported_modules(p) and p != PACKAGE / "__init__.py"
    ]
    assert not importers, f"these modules import gshmem.comm; take Comm from gshmem: {importers}"


def test_core_modules_import_no_application():
    core = list(PACKAGE.glob("*.py"))
    assert len(core) > 10, "the core modules were not found"
    offenders = {}
    for p in core:
        apps = sorted(
            m for m in imported_modules(p)
            if m.startswith("gshmem.") and m.split(".")[1] in APPLICATIONS
        )  # fmt: skip
        if apps:
            offenders[p.name] = apps
    assert not offenders, f"core modules importing applications: {offenders}"
