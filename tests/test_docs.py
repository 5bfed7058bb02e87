"""The code explains itself from inside the repository: no reference to a specification file outside
it, every pointer into ``docs/design.md`` names a section (and an invariant) that exists, the map
of the code ("Where things live") names only modules that exist, every link of the README and the
docs pages lands on a file of the repository, and the README stays an introduction (its word and
sentence limits, its order).

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
SKIPPED_PARTS = {"__pycache__"}  # byte code
# benchmark outputs (measurements, not prose); docs/results is prose and is read
SKIPPED_FOLDERS = (("bench", "results"),)

# The outside specification's name, spelled in two parts so that this file does not match itself.
_OUTSIDE = "SP" + "EC"
# "<name>.md", "<name> §3", "<name>'s", "(<name>)": the word in capitals, not inside another word
# (SUSPECT, INSPECT) and not a lower-case "spec".
OUTSIDE_REFERENCE = re.compile(rf"(?<![A-Za-z_]){_OUTSIDE}(?![A-Za-z_])")
# "docs/design.md §4", "docs/design.md §5 and §8", "docs/design.md §4, §10 invariant 2"
DESIGN_POINTER = re.compile(r"docs/design\.md((?:(?:,| and)? ?§\d+(?:,? invariants? \d+(?: and \d+)?)?)+)")
SECTION = re.compile(r"§(\d+)(?:,? invariants? (\d+)(?: and (\d+))?)?")
DOC_PAGE = re.compile(r"\bdocs/((?:results/)?[\w-]+\.md)\b")


def scanned_files(root: Path = REPO) -> list[Path]:
    """Every text file under the scanned folders, and the README."""
    files = [root / "README.md"]
    for folder in SCANNED:
        files += [
            path
            for path in sorted((root / folder).rglob("*"))
            if path.is_file()
            and path.suffix in TEXT_SUFFIXES
            and not SKIPPED_PARTS & set(path.parts)
            and path.relative_to(root).parts[:2] not in SKIPPED_FOLDERS
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


# --- the README as an introduction and the links of every page ---------------------------------------

README = REPO / "README.md"
README_MAX_WORDS = 2000
MAX_SENTENCE_WORDS = 40
# The README opens with exactly these set-up commands, in this order (each line's command, before its
# comment).
SETUP_COMMANDS = ("make run", "make test")
OWN_DATA_HEADING = "## Run it on your own Databento files"
FENCE = re.compile(r"^```[^\n]*\n.*?^```[ \t]*$", flags=re.M | re.S)
COMMENT = re.compile(r"<!--.*?-->", flags=re.S)
# [text](target) and ![alt](target); the target up to a space (a title) or the closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def visible(markdown: str) -> str:
    """What a reader sees: the page without its HTML comments (slots left for later text)."""
    return COMMENT.sub("", markdown)


def word_count(markdown: str) -> int:
    """Every whitespace-separated word a reader sees, code blocks and tables included."""
    return len(visible(markdown).split())


def text_units(markdown: str) -> list[str]:
    """The prose of a page, without its code blocks: each paragraph, list item, heading and table cell
    as one unit (a table cell or a list item is read on its own, not as part of the next line)."""
    units: list[str] = []
    paragraph: list[str] = []

    def close() -> None:
        if paragraph:
            units.append(" ".join(paragraph))
            paragraph.clear()

    for line in FENCE.sub("", visible(markdown)).splitlines():
        s = line.strip()
        if s.startswith("|"):
            close()
            if not re.fullmatch(r"\|[\s|:-]+\|", s):  # a table's separator row
                units += [cell.strip() for cell in s.strip("|").split("|") if cell.strip()]
        elif not s or s.startswith(("#", "- ", "* ")) or re.match(r"\d+\. ", s):
            close()
            if s:
                paragraph.append(re.sub(r"^(#+|[-*]|\d+\.)\s+", "", s))
        else:
            paragraph.append(s)
    close()
    return units


def sentences(markdown: str) -> list[str]:
    """Every sentence of the prose: a unit split after ``.``, ``!`` or ``?`` and a space, link targets
    dropped (a reader does not read the address)."""
    out = []
    for unit in text_units(markdown):
        unit = re.sub(r"\]\([^)]*\)", "]", unit)
        out += [s for s in re.split(r"(?<=[.!?])\s+", unit) if s.strip()]
    return out


def long_sentences(markdown: str, limit: int = MAX_SENTENCE_WORDS) -> list[str]:
    return [s for s in sentences(markdown) if len(s.split()) > limit]


def first_commands(markdown: str) -> list[str]:
    """The commands of the page's first code block (each line before its ``#`` comment)."""
    block = FENCE.search(markdown)
    if not block:
        return []
    lines = block.group(0).splitlines()[1:-1]
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def links(markdown: str) -> list[str]:
    """The targets of every Markdown link and image outside code blocks and comments."""
    return LINK.findall(FENCE.sub("", visible(markdown)))


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """The relative links of ``page`` that do not land on a file or folder of the repository (web
    addresses and in-page anchors are not followed; a path leaving the repository is broken)."""
    bad = []
    for target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(root.resolve()) or not path.exists():
            bad.append(target)
    return bad


def test_the_checkers_on_hand_made_text() -> None:
    page = (
        "# T\n\n```bash\nmake run    # one\nmake test   # two\n```\n\n"
        "One short sentence. A second one, with a [link](notes/x.md) in it!\n"
        "- a list item ends here\n\n| a | b |\n|---|---|\n| cell one | cell two. Next |\n\n"
        "<!-- a slot: " + "word " * 50 + "-->\n" + "many " * 41 + "words.\n"
    )
    assert first_commands(page) == ["make run", "make test"]
    assert "One short sentence." in sentences(page)
    assert "A second one, with a [link] in it!" in sentences(page)
    assert {"a list item ends here", "cell one", "cell two.", "Next"} <= set(sentences(page))
    assert long_sentences(page) == ["many " * 40 + "many words."]  # the comment is not read
    assert word_count(page) == len(page.split()) - 54  # the comment: its 52 words and two markers
    assert links(page) == ["notes/x.md"]


def test_broken_links_finds_missing_files_and_paths_out_of_the_repository(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text(
        "[here](b.md) [up](../README.md) [out](../../x.md) [web](https://x.y)"
    )
    (tmp_path / "notes" / "b.md").write_text("")
    (tmp_path / "README.md").write_text("[gone](notes/c.md#part) [anchor](#top) [folder](notes/)")
    assert broken_links(tmp_path / "notes" / "a.md", tmp_path) == ["../../x.md"]
    assert broken_links(tmp_path / "README.md", tmp_path) == ["notes/c.md#part"]


def test_the_readme_is_an_introduction() -> None:
    """At most 2,000 words and no sentence over 40; it opens with the two set-up commands; the own-data
    walk starts within its first third."""
    text = README.read_text()
    words = word_count(text)
    assert words <= README_MAX_WORDS, f"README: {words} words (at most {README_MAX_WORDS})"
    too_long = [f"{len(s.split())} words: {s[:80]}..." for s in long_sentences(text)]
    assert not too_long, f"README sentences over {MAX_SENTENCE_WORDS} words: {too_long}"
    assert text.startswith("# foxhunt\n\n```bash\n"), "the README opens with its set-up commands"
    assert first_commands(text) == list(SETUP_COMMANDS)
    seen = visible(text)
    assert OWN_DATA_HEADING in seen
    before = len(seen[: seen.index(OWN_DATA_HEADING)].split())
    assert before < words / 3, f"the own-data walk starts at word {before} of {words}"


def test_the_setup_commands_are_make_targets() -> None:
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M))
    assert {c.split()[1] for c in SETUP_COMMANDS} <= targets


def test_every_link_of_the_readme_and_the_docs_lands_in_the_repository() -> None:
    pages = [README, *sorted((REPO / "docs").rglob("*.md"))]
    broken = {str(p.relative_to(REPO)): b for p in pages if (b := broken_links(p))}
    assert not broken, broken


def test_every_results_page_is_dated_and_listed_in_the_index() -> None:
    """docs/results holds one page per study, named by its date, each listed in its index; docs/ itself
    holds no dated page (measured results live in docs/results)."""
    results = REPO / "docs" / "results"
    index = (results / "README.md").read_text()
    pages = sorted(p.name for p in results.glob("*.md") if p.name != "README.md")
    assert pages
    undated = [p for p in pages if not re.match(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", p)]
    assert not undated, undated
    unlisted = [p for p in pages if f"]({p})" not in index]
    assert not unlisted, f"not in docs/results/README.md: {unlisted}"
    dated_in_docs = [p.name for p in (REPO / "docs").glob("*.md") if re.match(r"\d{4}-", p.name)]
    assert not dated_in_docs, dated_in_docs


# --- reference pages hold no hardware timings -------------------------------------------------------

# A named accelerator and a duration in one sentence: "131 s on an H200", "34 us ... on an H100".
ACCELERATOR = re.compile(r"\b(?:[AHB]100|H200|GH200|B200)\b")
DURATION = re.compile(r"\d[\d,.]*\s?(?:s|ms|us|µs|ns|min|seconds|minutes|hours)\b")


def hardware_timings(markdown: str) -> list[str]:
    """The sentences of a page's prose (code blocks left out) that time something on a named GPU."""
    return [s for s in sentences(markdown) if ACCELERATOR.search(s) and DURATION.search(s)]


def test_hardware_timings_on_hand_made_text() -> None:
    page = (
        "The guard and the compiles took 131 s on a fresh H200. A share of an H100 is Ray's bookkeeping.\n"
        "Serving decides 200 us after the record. `cuda:0 (NVIDIA H200, GPU-<uuid>)` names the card.\n\n"
        "```bash\npython bench/env.py  # 34 us on an H200\n```\n"
    )
    assert hardware_timings(page) == ["The guard and the compiles took 131 s on a fresh H200."]


def test_reference_pages_quote_no_hardware_timings() -> None:
    """docs/ keeps reference pages; a time measured on a named GPU is a result, and goes to a dated
    page of docs/results (linked from the reference page) with its command."""
    pages = sorted((REPO / "docs").glob("*.md"))
    assert pages
    found = {p.name: t for p in pages if (t := hardware_timings(p.read_text()))}
    assert not found, f"move these to a dated page of docs/results: {found}"
