"""The code explains itself from inside the repository: no reference to a specification file outside
it, every pointer into ``docs/design.md`` names a section (and an invariant) that exists, and the map
of the code ("Where things live") names only modules that exist.

A pointer such as ``docs/design.md §6`` is how a comment says where the reasoning behind the code is
written down; a dangling one (a section renumbered, a page renamed) sends the reader nowhere, so it
fails here rather than in a reader's head."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DESIGN = REPO / "docs" / "design.md"
# Where the code, its tests, benchmarks, tools and documentation live: every reader-facing text.
SCANNED = ("src", "tests", "bench", "tools", "docs", "examples")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".ipynb", ".txt", ".sh", ".cfg", ".ini", ".yaml", ".yml"}
SKIPPED_PARTS = {"__pycache__", "results"}  # byte code; benchmark outputs (measurements, not prose)

# The outside specification's name, spelled in two parts so that this file does not match itself.
_OUTSIDE = "SP" + "EC"
# "<name>.md", "<name> §3", "<name>'s", "(<name>)": the word in capitals, not inside another word
# (SUSPECT, INSPECT) and not a lower-case "spec".
OUTSIDE_REFERENCE = re.compile(rf"(?<![A-Za-z_]){_OUTSIDE}(?![A-Za-z_])")
# "docs/design.md §4", "docs/design.md §5 and §8", "docs/design.md §4, §10 invariant 2"
DESIGN_POINTER = re.compile(r"docs/design\.md((?:(?:,| and)? ?§\d+(?:,? invariants? \d+(?: and \d+)?)?)+)")
SECTION = re.compile(r"§(\d+)(?:,? invariants? (\d+)(?: and (\d+))?)?")
DOC_PAGE = re.compile(r"\bdocs/([\w-]+\.md)\b")


def scanned_files(root: Path = REPO) -> list[Path]:
    """Every text file under the scanned folders, and the README."""
    files = [root / "README.md"]
    for folder in SCANNED:
        files += [
            path
            for path in sorted((root / folder).rglob("*"))
            if path.is_file() and path.suffix in TEXT_SUFFIXES and not SKIPPED_PARTS & set(path.parts)
        ]
    return [f for f in files if f.exists() and ".egg-info" not in str(f)]


def outside_references(text: str) -> list[int]:
    """1-based line numbers of ``text`` that name the outside specification."""
    return [i for i, line in enumerate(text.splitlines(), 1) if OUTSIDE_REFERENCE.search(line)]


def design_pointers(text: str) -> list[tuple[int, int | None]]:
    """Every (section, invariant or None) that ``text`` points at in docs/design.md."""
    out: list[tuple[int, int | None]] = []
    for tail in DESIGN_POINTER.findall(text.replace("\n", " ")):
        for section, inv, inv2 in SECTION.findall(tail):
            out.append((int(section), int(inv) if inv else None))
            if inv2:
                out.append((int(section), int(inv2)))
    return out


def design_sections(design: str) -> dict[int, str]:
    """Numbered sections of docs/design.md (``## 5. The trading environment``): number -> body (the
    text under the heading line)."""
    out = {}
    for part in re.split(r"^## ", design, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        m = re.match(r"(\d+)\. ", heading)
        if m:
            out[int(m.group(1))] = body
    return out


def invariants(section_body: str) -> set[int]:
    """The numbers of a section's numbered list (``1. No feature row changes ...``)."""
    return {int(n) for n in re.findall(r"^(\d+)\. ", section_body, flags=re.M)}


def where_things_live(design: str) -> str:
    """The body of the "Where things live" section of docs/design.md ("" when absent)."""
    m = re.search(r"^## (?:0\. )?Where things live\n(.*?)(?=^## )", design, flags=re.M | re.S)
    return m.group(1) if m else ""


def named_modules(text: str) -> set[str]:
    """Backticked module names and paths of the package: ``foxhunt.domain``, ``agent/loss.py``,
    ``env/``, ``config/models.py``, ``bench/env.py``."""
    names = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        if re.fullmatch(r"foxhunt(\.\w+)+", token) or re.fullmatch(r"[\w/]+(\.py|/)", token):
            names.add(token)
    return names


def module_exists(name: str, root: Path = REPO) -> bool:
    """Whether a dotted name (a module, or a function or class defined at a module's top level) or a
    path names something of the package or the repository."""
    if name.startswith("foxhunt."):
        parts = name.split(".")
        for cut in (len(parts), len(parts) - 1):
            base = root / "src" / Path(*parts[:cut])
            source = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            if source.exists():
                attr = parts[cut:]
                return not attr or bool(
                    re.search(rf"^(?:def|class) {attr[0]}\b|^{attr[0]}\b.*=", source.read_text(), flags=re.M)
                )
        return False
    if (root / "src" / "foxhunt" / name).exists() or (root / name).exists():
        return True
    # a bare file or folder name (``base.py`` in a sentence about config/): some module of that name
    bare = name.rstrip("/")
    return "/" not in bare and any(p.name == bare for p in (root / "src" / "foxhunt").rglob(bare))


# --- the helpers on hand-made text ------------------------------------------------------------------


def test_outside_references_finds_the_name_and_not_words_that_contain_it() -> None:
    text = "\n".join(
        [
            f"see {_OUTSIDE} §7",  # 1
            "SUSPECT and INSPECT are words",  # 2
            f"read ../shared/{_OUTSIDE}.md",  # 3
            f"the {_OUTSIDE}'s rule",  # 4
            "a spec of the format",  # 5
        ]
    )
    assert outside_references(text) == [1, 3, 4]


def test_design_pointers_reads_sections_lists_and_invariants() -> None:
    text = (
        "(docs/design.md §6) and docs/design.md §5 and §8; docs/design.md §4, §10 invariant 2;\n"
        "docs/design.md §10, invariants 12 and 13. Not a pointer: §3 alone, docs/tune.md."
    )
    assert design_pointers(text) == [(6, None), (5, None), (8, None), (4, None), (10, 2), (10, 12), (10, 13)]


def test_design_sections_and_invariants_on_a_small_page() -> None:
    page = "# T\n\n## 0. Where things live\nmap\n## 1. Data\ntext\n## 10. Invariants\n\n1. one\n2. two\n"
    sections = design_sections(page)
    assert sorted(sections) == [0, 1, 10]
    assert invariants(sections[10]) == {1, 2}
    assert where_things_live(page) == "map\n"


def test_named_modules_and_their_existence() -> None:
    text = (
        "`foxhunt.env` `agent/learner.py` `env/` `bench/env.py` `run.seed` `--set` `foxhunt.nowhere` "
        "`foxhunt.api.train` `foxhunt.api.no_such_function` `base.py` `profiles/` `no_such_module.py`"
    )
    names = named_modules(text)
    assert names == {
        "foxhunt.env",
        "agent/learner.py",
        "env/",
        "bench/env.py",
        "foxhunt.nowhere",
        "foxhunt.api.train",
        "foxhunt.api.no_such_function",
        "base.py",
        "profiles/",
        "no_such_module.py",
    }
    absent = {n for n in names if not module_exists(n)}
    assert absent == {"foxhunt.nowhere", "foxhunt.api.no_such_function", "no_such_module.py"}


# --- the repository --------------------------------------------------------------------------------


def test_nothing_refers_to_a_specification_outside_the_repository() -> None:
    """src, tests, bench, tools, docs, examples and the README explain the code through docs/, never
    through a file a reader of the repository does not have."""
    offenders = [
        f"{path.relative_to(REPO)}:{line}"
        for path in scanned_files()
        for line in outside_references(path.read_text(errors="replace"))
    ]
    assert not offenders, f"point to the docs/design.md section instead: {offenders}"


def test_every_pointer_into_the_design_page_names_a_section_that_exists() -> None:
    sections = design_sections(DESIGN.read_text())
    assert len(sections) >= 10, "docs/design.md lost its numbered sections"
    known_invariants = invariants(sections[10])
    dangling = []
    for path in scanned_files():
        for section, inv in design_pointers(path.read_text(errors="replace")):
            # an invariant is one of §10's numbered list
            bad_invariant = inv is not None and (section != 10 or inv not in known_invariants)
            if section not in sections or bad_invariant:
                where = f"{path.relative_to(REPO)}: §{section}"
                dangling.append(where + (f" invariant {inv}" if inv else ""))
    assert not dangling, dangling


def test_every_docs_page_named_in_the_code_exists() -> None:
    missing = sorted(
        f"{path.relative_to(REPO)}: docs/{page}"
        for path in scanned_files()
        for page in DOC_PAGE.findall(path.read_text(errors="replace"))
        if not (REPO / "docs" / page).exists()
    )
    assert not missing, missing


@pytest.mark.parametrize("part", ["Where things live", "all"])
def test_the_design_page_names_only_modules_that_exist(part: str) -> None:
    """The map of the code, and every module the design page names, is the code as it is."""
    design = DESIGN.read_text()
    text = where_things_live(design) if part == "Where things live" else design
    assert text, "docs/design.md has no 'Where things live' section"
    names = named_modules(text)
    assert names
    missing = sorted(n for n in names if not module_exists(n))
    assert not missing, f"named in docs/design.md but absent: {missing}"
