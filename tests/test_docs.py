"""The docs are the contract: every reference to them lands on a section that exists, and nothing
points at a document outside the repository (docs/SEMANTICS.md, "Decisions the code relies on")."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
SCANNED = ("memfs", "docs", "scripts", "tests", "benchmarks", "docker", "README.md", "pyproject.toml")
OUTSIDE = re.compile(
    r"SPEC §|(?<!OPERATIONS.md )§[0-9]+\.[0-9]|\bSPEC\b|[Dd]ecision [0-9]|\b[Ii]ssue [0-9]+|FIELD-NOTES"
)
DOC_REF = re.compile(
    r"(?:docs/)?\b(SEMANTICS|DESIGN|API|OPERATIONS|PERFORMANCE)\.md#([A-Za-z0-9_-]+)((?:,? #[a-z0-9-]+)*)"
)
LOCAL_REF = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")


def _files() -> list[Path]:
    out = []
    for rel in SCANNED:
        p = REPO / rel
        if p.is_dir():
            out += [
                f
                for f in sorted(p.rglob("*"))
                if f.is_file()
                and f.suffix in ("", ".py", ".md", ".sh", ".toml")
                and "__pycache__" not in f.parts
            ]
        elif p.exists():
            out.append(p)
    return [f for f in out if f != Path(__file__).resolve()]


def anchors(doc: Path) -> set[str]:
    text = doc.read_text()
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):  # GitHub's slugs of the headings
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_every_doc_reference_lands():
    known = {p.stem: anchors(p) for p in DOCS.glob("*.md")}
    missing = []
    for f in _files():
        text = f.read_text(errors="replace")
        for m in DOC_REF.finditer(text):
            names = [m.group(2)] + re.findall(r"#([a-z0-9-]+)", m.group(3) or "")
            missing += [
                f"{f.relative_to(REPO)}: {m.group(1)}.md#{n}" for n in names if n not in known[m.group(1)]
            ]
        if f.parent == DOCS:
            missing += [
                f"{f.relative_to(REPO)}: #{a}" for a in LOCAL_REF.findall(text) if a not in known[f.stem]
            ]
    assert missing == []


def test_nothing_points_outside_the_repository():
    found = []
    for f in _files():
        rel = str(f.relative_to(REPO))
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert found == []
