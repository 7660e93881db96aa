"""Links between the documents land on a heading, and the long pages' contents list each of their sections, so
renaming a heading cannot leave a reader at the top of a 900-line page."""

from __future__ import annotations

import functools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^(#{2,3}) (.+)$", re.MULTILINE)
LINK = re.compile(r"\]\(([\w./-]*)#([\w-]+)\)")
WITH_CONTENTS = ("docs/results.md", "docs/pipeline.md")
CONTENTS_ITEM = re.compile(r"^( *)- \[(.+)\]\(#([\w-]+)\)$", re.MULTILINE)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped but hyphens, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


@functools.cache  # a page is read once, not once for every link into it
def anchors(path: Path) -> set[str]:
    return {anchor(title) for _, title in HEADING.findall(path.read_text())}


def test_the_anchor_rule_is_githubs():
    assert anchor("Issue 37's rerun and replication, written before they run") == (
        "issue-37s-rerun-and-replication-written-before-they-run"
    )
    assert anchor("Two decades further: synthetic pretraining (issue 38)") == (
        "two-decades-further-synthetic-pretraining-issue-38"
    )


def test_every_link_to_a_section_lands_on_a_heading():
    for source in (REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))):
        for target, fragment in LINK.findall(source.read_text()):
            path = (source.parent / target).resolve() if target else source
            assert fragment in anchors(path), f"{source.name} links to {target}#{fragment}, which has no heading"


def test_the_long_pages_list_every_section_in_order():
    for name in WITH_CONTENTS:
        text = (REPO / name).read_text()
        listed = [(len(indent) // 2 + 2, title, link) for indent, title, link in CONTENTS_ITEM.findall(text)]
        sections = [(len(hashes), title, anchor(title)) for hashes, title in HEADING.findall(text)]
        assert listed == sections, f"{name}'s contents should list its sections as they are"
