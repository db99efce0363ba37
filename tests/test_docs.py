"""The documentation: the README stays a front door and the MkDocs site builds strictly.

``mkdocs build --strict`` fails on a broken link between pages, a missing anchor,
a page left out of ``mkdocs.yml``'s nav and a link to a result file that is not
in ``benchmarks/results/`` (``scripts/mkdocs_hooks.py``); the README's own links
are checked here, since the README is not one of the site's pages.
"""

import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_MAX_LINES = 250
# [text](target) of markdown links and images, without the inline code spans.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`]*`")


def test_mkdocs_builds_strictly(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    # The generated leaderboard's plots are in the site where its page links them.
    page = (tmp_path / "leaderboard" / "index.html").read_text(encoding="utf-8")
    images = re.findall(r'src="\.\./(benchmarks/results/[^"]+\.png)"', page)
    assert images, "the leaderboard page shows its plots"
    for image in images:
        assert (tmp_path / image).read_bytes() == (REPO / image).read_bytes()


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; move the details into a docs/ page")


def relative_links(path):
    """The relative link targets of a markdown file (no URLs, no anchors alone)."""
    text = _CODE_SPAN.sub("", path.read_text(encoding="utf-8"))
    return [target.split("#", 1)[0] for target in _LINK.findall(text)
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")]


def test_the_readme_links_only_files_that_exist():
    links = relative_links(README)
    assert any(link.startswith("docs/") for link in links), "the README points into docs/"
    missing = [link for link in links if not (REPO / link).exists()]
    assert missing == []


def test_relative_links_finds_links_and_images_but_not_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](docs/a.md#x) ![b](b.png) `[c](c.md)` [d](https://e.org) [f](#g)\n",
                    encoding="utf-8")
    assert relative_links(page) == ["docs/a.md", "b.png"]
