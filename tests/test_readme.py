"""The README is a front door: short, leading with the two commands, every link resolving to a file and heading; every
docs page short enough to read in one sitting, and every page and heading the code cites there."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGE_LIMIT = 20_000  # characters; docs/results.md is generated and exempt
GENERATED = {"results.md"}
# where the code, configs and generated tables cite docs pages (`docs/claims.md#the-claims-file`)
CITING = ["mbexp/**/*.py", "scripts/*.py", "tests/*.py", "conf/**/*.yaml", "results/claims.yaml",
          "results/tables/*.md", "notebooks/*.ipynb", "Makefile"]
CITATION = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")


def local_links(page: Path) -> list[str]:
    """The page's markdown link targets that point into the repository (anchors dropped)."""
    return [path for t in local_targets(page) if (path := t.split("#", 1)[0])]


def local_targets(page: Path) -> list[str]:
    """The page's markdown link targets that point into the repository, anchors kept ('#x' for its own headings)."""
    targets = LINK.findall(page.read_text(encoding="utf-8"))
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as hyphens, -1, -2 on
    repeats; lines in fenced code blocks are not headings."""
    found, repeats, fenced = set(), {}, False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} (.+)", line)):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading[1].strip())  # a link reads as its text
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            found.add(f"{slug}-{repeats[slug]}" if slug in repeats else slug)
            repeats[slug] = repeats.get(slug, 0) + 1
    return found


def missing(file: Path, anchor: str, target: str) -> str | None:
    """Why the target (the file, and the anchor when given) does not resolve, or None."""
    if not file.exists():
        return f"{target}: no such file"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{target}: no heading #{anchor} in {file.name}"
    return None


def broken(page: Path, target: str) -> str | None:
    """Why a link target written in the page does not resolve, or None."""
    path, _, anchor = target.partition("#")
    return missing(page.parent / path if path else page, anchor, target)


def test_readme_is_short_and_leads_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= 12_000, f"README.md is {len(text):,} characters"
    first_block = text.split("```")[1]
    assert "make quickstart" in first_block and "make test" in first_block


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves_to_a_file_and_heading(page):
    wrong = [why for t in local_targets(page) if (why := broken(page, t))]
    assert not wrong, f"{page.name} has broken links: {wrong}"


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent.name == "docs" and p.name not in GENERATED],
                         ids=lambda p: p.name)
def test_every_docs_page_reads_in_one_sitting(page):
    size = len(page.read_text(encoding="utf-8"))
    assert size <= PAGE_LIMIT, f"{page.name} is {size:,} characters (at most {PAGE_LIMIT:,}): split it by subject"


def test_every_docs_citation_in_the_code_names_a_page_and_heading():
    files = sorted({f for pattern in CITING for f in ROOT.glob(pattern)})
    cited = [(f, page, anchor) for f in files for page, anchor in CITATION.findall(f.read_text(encoding="utf-8"))]
    assert len(cited) > 50  # the pattern still finds the citations
    wrong = sorted({f"{f.relative_to(ROOT)}: {why}" for f, page, anchor in cited
                    if (why := missing(ROOT / "docs" / page, anchor, f"docs/{page}#{anchor}".rstrip("#")))})
    assert not wrong, "\n".join(wrong)


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n\nsee [here](nowhere.md#x), [web](https://example.org), [there](other.md#gone), "
                    "[up](#top) and [down](#missing)\n\n```\n# gone\n```\n", encoding="utf-8")
    (tmp_path / "other.md").write_text("# Other — `page` (v2)\n\n## Gone?\n", encoding="utf-8")
    assert local_links(page) == ["nowhere.md", "other.md"] and not (tmp_path / "nowhere.md").exists()
    assert anchors(tmp_path / "other.md") == {"other--page-v2", "gone"} and anchors(page) == {"top"}
    assert [broken(page, t) for t in local_targets(page)] == [
        "nowhere.md#x: no such file", None, None, "#missing: no heading #missing in page.md"]
