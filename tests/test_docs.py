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


MAP_ENTRY = re.compile(r"[A-Za-z_][\w/]*\.py\b")


def design_map(text: str) -> dict[str, set[str]]:
    """docs/DESIGN.md's module map (its first code block): folder -> the .py names it names there
    (a name with a "/" is a path, from memfs/ or else from the repository's root). Indentation
    says which folder a line is in: a line whose first word ends in "/" opens a folder."""
    block = text.split("```", 2)[1]
    named: dict[str, set[str]] = {}
    stack: list[tuple[int, str]] = []  # (indent, folder from the repo root)
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        first = line.split()[0]
        while stack and indent <= stack[-1][0]:
            stack.pop()
        folder = stack[-1][1] if stack else ""
        if first.endswith("/"):
            folder = f"{folder}/{first.rstrip('/')}".lstrip("/")
            stack.append((indent, folder))
        for name in MAP_ENTRY.findall(line):
            if "/" in name:
                path = f"memfs/{name}" if (REPO / "memfs" / name).exists() else name
                where, _, base = path.rpartition("/")
                named.setdefault(where, set()).add(base)
            else:
                named.setdefault(folder, set()).add(name)
    return named


def map_problems(text: str) -> list[str]:
    """What the module map gets wrong about memfs/: modules it names that do not exist, and
    modules (but __init__.py) it does not name."""
    named = design_map(text)
    wrong = [
        f"names {folder}/{name}, which does not exist"
        for folder, names in sorted(named.items())
        if folder.startswith("memfs")
        for name in sorted(names)
        if not (REPO / folder / name).is_file()
    ]
    missing = [
        f"does not name {f.relative_to(REPO)}"
        for f in sorted((REPO / "memfs").rglob("*.py"))
        if f.name != "__init__.py" and f.name not in named.get(str(f.parent.relative_to(REPO)), set())
    ]
    return wrong + missing


def test_the_design_module_map_names_every_module_and_only_modules_that_exist():
    assert map_problems((DOCS / "DESIGN.md").read_text()) == []


def test_the_map_check_sees_a_missing_and_an_invented_module():
    design = (DOCS / "DESIGN.md").read_text()
    broken = design.replace("    feed.py ", "    fed.py ", 1)
    assert broken != design
    assert map_problems(broken) == [
        "names memfs/sync/fed.py, which does not exist",
        "does not name memfs/sync/feed.py",
    ]


def layers_problems(text: str) -> list[str]:
    """What docs/DESIGN.md's "Layers" diagram leaves out: each package of memfs/ (a folder with an
    __init__.py) and the command line must stand in it by name (tests/test_layers.py checks the arrows)."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    diagram = section.split("```", 2)[1]
    words = set(re.findall(r"\w+", diagram))
    packages = sorted(p.parent.name for p in (REPO / "memfs").glob("*/__init__.py"))
    return [f"the Layers diagram does not name {name}" for name in ["cli", *packages] if name not in words]


def test_the_layers_diagram_names_every_package():
    assert layers_problems((DOCS / "DESIGN.md").read_text()) == []


def test_the_layers_check_sees_a_missing_package():
    design = (DOCS / "DESIGN.md").read_text()
    section = design.split("## Layers", 1)[1].split("\n## ", 1)[0]
    broken = design.replace(section, section.replace("relay", "relya"))
    assert layers_problems(broken) == ["the Layers diagram does not name relay"]
