"""The README is a front door: short, leading with the two commands, every link resolving to a file."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def local_links(page: Path) -> list[str]:
    """The page's markdown link targets that point into the repository (anchors dropped)."""
    targets = [t.split("#", 1)[0] for t in LINK.findall(page.read_text(encoding="utf-8"))]
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


def test_readme_is_short_and_leads_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= 12_000, f"README.md is {len(text):,} characters"
    first_block = text.split("```")[1]
    assert "make quickstart" in first_block and "make test" in first_block


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves_to_a_file(page):
    missing = [t for t in local_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("see [here](nowhere.md#x) and [web](https://example.org)", encoding="utf-8")
    assert local_links(page) == ["nowhere.md"] and not (tmp_path / "nowhere.md").exists()
