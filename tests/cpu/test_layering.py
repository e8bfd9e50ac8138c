"""The Python package's layering (docs/architecture.md): arrows point down only. comm.py sits on
top of the core modules, so only the package's __init__ may import it (applications take Comm
from ``gshmem``), and no core module imports an application, even for type checking."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "gshmem"
APPLICATIONS = ("attention", "moe", "jax", "torch", "train", "bench", "demo")


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (TYPE_CHECKING and function bodies too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


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
