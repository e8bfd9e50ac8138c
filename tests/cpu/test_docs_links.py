"""The README and docs link only inside the repository, and every link lands: its file exists and
its anchor is a heading there (GitHub's anchors: the heading in lower case, punctuation dropped,
spaces to hyphens, repeats numbered)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading's text (markdown emphasis and code marks dropped)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return "".join(c for c in text if c.isalnum() or c in "_- ").replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            base = anchor(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    text, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            text.append(re.sub(r"`[^`]*`", "", line))  # code spans hold no links
    return LINK.findall("\n".join(text))


def test_anchor_follows_github():
    assert anchor("The GPU check at four GPUs (issues 15 and 16)") == (
        "the-gpu-check-at-four-gpus-issues-15-and-16"
    )
    assert anchor("Packets: small messages at NVLink latency") == (
        "packets-small-messages-at-nvlink-latency"
    )
    assert anchor("all_reduce × 2 PEs, `comm.permute`") == "all_reduce--2-pes-commpermute"


def test_repeated_headings_are_numbered(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Results\n## Results\n```\n# not a heading\n```\n## Results\n")
    assert anchors(page) == {"results", "results-1", "results-2"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands_inside_the_repository(page):
    assert links(page) or page.name != "README.md"  # the README links its docs
    broken = []
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if "://" in path or (ROOT not in dest.parents and dest != ROOT):
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, broken
