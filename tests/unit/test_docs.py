"""The documentation as a reader meets it (issue 37): every relative link of README.md,
CHANGELOG.md and docs/ leads to a file, and its #anchor to a heading there; the reference
pages under docs/reference are what `make docs` generates from the code today; and every
flag and key they name exists in the code, checked against the parsers and tables the
programs themselves use (not against the generator)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from tcluster.cli import refdocs
from testkit.readme_examples import Invocation, unknown_flags

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
REFERENCE = DOCS / "reference"
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside ``` blocks: links inside code are code."""
    out, fenced = [], False
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a page's headings, a repeated one numbered as GitHub does (-1, -2)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text()):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            out.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return out


def relative_links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(path.read_text()):
        for match in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = match.group(1) or match.group(2)
            if not re.match(r"[a-z]+:", target):      # https:, mailto:
                found.append((number, target))
    return found


def broken(path: Path, target: str) -> str | None:
    file_part, _, fragment = target.partition("#")
    dest = (path.parent / file_part).resolve() if file_part else path
    if REPO not in dest.parents and dest != REPO:
        return "outside the repository"
    if not dest.exists():
        return f"no file {file_part}"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"no heading #{fragment} in {dest.relative_to(REPO)}"
    return None


def test_the_pages_and_their_links_are_found() -> None:
    """The check must not pass by checking nothing."""
    assert len(PAGES) >= 20
    assert sum(len(relative_links(page)) for page in PAGES) >= 60
    assert len(Path(REPO / "README.md").read_text().split("\n")) <= 250, "README.md: a short entry page"


def test_every_relative_link_and_anchor_exists() -> None:
    wrong = [f"{page.relative_to(REPO)}:{number}: {target}: {why}" for page in PAGES
             for number, target in relative_links(page) if (why := broken(page, target)) is not None]
    assert wrong == []


@pytest.mark.parametrize("target, why", [
    ("using-tcl.md", None), ("using-tcl.md#placement", None), ("#getting-started", None),
    ("no-such.md", "no file no-such.md"), ("using-tcl.md#no-such", "no heading #no-such in docs/using-tcl.md"),
    ("../../../etc/passwd", "outside the repository"),
])
def test_the_link_check_catches_what_is_wrong(target: str, why: str | None) -> None:
    assert broken(DOCS / "getting-started.md", target) == why


def test_the_docs_name_no_page_outside_the_repository() -> None:
    """`../shared/DESIGN.md`, `HOST.md`, `notes/megha.md`: pages a reader of the repository
    does not have (issue 37)."""
    outside = [f"{page.relative_to(REPO)}:{n}" for page in PAGES for n, line in enumerate(page.read_text().split("\n"), 1)
               if re.search(r"\.\./shared/|\bHOST\.md\b|\bnotes/\w+\.md\b|DESIGN\.md", line)]
    assert outside == []


# The CLI page holds argparse's usage lines, laid out differently across Python versions
# (as the help snapshots of tests/unit/test_cli_help.py): it is Python 3.11's.
LAYOUT_PYTHON = (3, 11)


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.skipif(
        name == "cli.md" and sys.version_info[:2] != LAYOUT_PYTHON, reason="docs/reference/cli.md holds Python "
        "3.11's argparse usage layout"))
    for name in refdocs.PAGES])
def test_the_reference_pages_are_up_to_date(name: str) -> None:
    assert (REFERENCE / name).read_text() == refdocs.PAGES[name](), \
        f"docs/reference/{name} differs from the code: run `make docs`"


def test_the_reference_holds_only_generated_pages() -> None:
    assert {path.name for path in REFERENCE.glob("*.md")} == set(refdocs.PAGES)


def reference_sections(page: str) -> dict[str, str]:
    """'## HEADING' -> its text, of a reference page."""
    text = (REFERENCE / page).read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def first_column(text: str) -> list[str]:
    """The `code` of each table row's first cell (flags: every spelling in it)."""
    rows = [line.split(" | ")[0] for line in text.split("\n") if line.startswith("| `")]
    return [word for row in rows for word in re.findall(r"`([^`]+)`", row)]


def test_every_flag_of_the_cli_reference_is_a_flag_of_its_command() -> None:
    sections = reference_sections("cli.md")
    assert {"tcl submit", "tcl-master", "tcl-agent join", "tcl-gm queues"} <= sections.keys()
    wrong = []
    for command, text in sections.items():
        for flag in (f for f in first_column(text) if f.startswith("-")):
            words = (*command.split(), flag)
            wrong += unknown_flags(Invocation(0, " ".join(words), words, True))
    assert wrong == []
    assert sum(len(first_column(text)) for text in sections.values()) >= 200


def test_every_job_file_key_is_read_by_tcl_submit_f() -> None:
    """Each key, given a value of the wrong type, is refused naming it: `tcl submit -f` reads it."""
    from tcluster.cli.jobfile import parse_job_file
    from tcluster.domain.errors import InvalidArgument
    keys = first_column((REFERENCE / "job-file.md").read_text())
    keys = [k for k in keys if not k.startswith("-")]
    assert {"name", "queue", "resources", "command", "gpus"} <= set(keys)
    for key in keys:
        with pytest.raises(InvalidArgument) as refused:
            parse_job_file(f"{key}: [[1], {{a: 1}}]\n")
        assert key in str(refused.value), key


def test_every_queue_file_key_is_accepted_by_the_queue_parser() -> None:
    from tcluster.scheduler.queues import _QUEUE_KEYS
    keys = first_column((REFERENCE / "queue-file.md").read_text())
    assert set(keys) == set(_QUEUE_KEYS) and len(keys) >= 10


def test_every_config_key_is_a_key_of_its_daemons_config_file() -> None:
    """Each key, in a --config file of its daemon, passes the file's key check."""
    from tcluster.daemonkit.configfile import options
    from tcluster.cli.refdocs_tables import _daemon_parsers
    sections = reference_sections("config.md")
    for program, _path, parser, structured, _model in _daemon_parsers():
        keys = first_column(sections[program])
        known = options(parser, structured)
        assert keys and [k for k in keys if k not in known] == [], program
        assert isinstance(parser, argparse.ArgumentParser)
    assert {"listen", "data_dir", "queues"} <= set(first_column(sections["tcl-master"]))


def test_every_metric_of_the_reference_is_served() -> None:
    from tcluster.cli.refdocs_tables import _exposition_of_a_busy_master
    served = set(re.findall(r"^# TYPE (\S+)", _exposition_of_a_busy_master(), flags=re.M))
    names = {name.removesuffix("_total") for name in first_column((REFERENCE / "metrics.md").read_text())
             if name.startswith(("tcluster_", "DCGM_"))}
    served = {name.removesuffix("_total") for name in served}
    assert names and names <= served
    assert {"tcluster_node_up", "tcluster_task_cpu_usage_seconds", "tcluster_jobs"} <= names
