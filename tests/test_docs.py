"""The documentation: the README stays a front door and the MkDocs site builds strictly.

``mkdocs build --strict`` fails on a broken link between pages, a missing anchor,
a page left out of ``mkdocs.yml``'s nav, a link to a result file that is not
in ``benchmarks/results/``, a public module, class, function or method without
a docstring, and a docstring whose ``Args:`` name a parameter the signature
lacks (``scripts/mkdocs_hooks.py`` and mkdocstrings' API reference); the
README's own links are checked here, since the README is not one of the
site's pages.
"""

import importlib.util
import pathlib
import re
import subprocess
import sys

import griffe
import pytest

from tests.test_layering import RANKS

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
    # The API reference: a page per ranked package, in RANKS' order on its index,
    # rendered from the docstrings, the layers' call arguments as a table.
    index = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    linked = re.findall(r'<a href="(\w+)/"><code>\w+</code></a>', index)
    assert linked == sorted(RANKS, key=RANKS.get)
    layers = (tmp_path / "api" / "layers" / "index.html").read_text(encoding="utf-8")
    assert "Position-wise" in layers  # FeedForward's docstring
    assert re.search(r"Call arguments:.*?<code>return_attention</code>", layers, re.DOTALL)
    # A layer whose docstring says "as `MultiHeadAttention`." shows that layer's entries.
    start = layers.index('id="keras_attn_zoo.layers.hard_coded_gaussian_attention.'
                         'HardCodedGaussianAttention"')
    section = layers[start:layers.index("doc doc-heading", start + 100)]
    assert re.findall(r"<b><code>(\w+)</code></b>", section.split("Call arguments:")[1]) == [
        "query", "context", "context_mask", "causal", "training", "return_attention"]


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


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_build_names_every_public_object_without_a_docstring(tmp_path):
    hooks = _load_script("mkdocs_hooks")
    package = tmp_path / "toy"
    package.mkdir()
    (package / "__init__.py").write_text('"""Toy."""\nfrom toy.shapes import Square\n')
    (package / "shapes.py").write_text(
        '"""Shapes."""\n\n'
        "class Shape:\n"
        '    """A shape."""\n'
        "    def area(self):\n"
        '        """Its area."""\n\n'
        "class Square(Shape):\n"
        '    """A square."""\n'
        "    def area(self):  # documented by Shape.area\n"
        "        return 1\n"
        "    def call(self):  # a Keras hook\n"
        "        return 1\n"
        "    def on_step_end(self, step):  # a callback hook\n"
        "        return step\n"
        "    def corners(self):\n"
        "        return 4\n"
        "    def _private(self):\n"
        "        return 0\n\n"
        "def _helper():\n    return 0\n\n"
        "def side(square):\n    return 1\n")
    (package / "bare.py").write_text("VALUE = 1\n")
    loaded = griffe.load("toy", search_paths=[str(tmp_path)], try_relative_path=False)
    assert hooks.undocumented_objects(loaded) == [
        "toy.bare", "toy.shapes.Square.corners", "toy.shapes.side"]
    assert hooks.undocumented_objects(griffe.load(
        "keras_attn_zoo", search_paths=[str(REPO)], try_relative_path=False)) == []


def test_the_api_pages_follow_the_ranks():
    hooks = _load_script("mkdocs_hooks")
    assert hooks.package_ranks(REPO) == RANKS
    summaries = {"a": hooks.summary("First | line\n  wrapped.\n\nMore.")}
    pages = hooks.api_pages({"b": 1, "a": 0}, summaries)
    assert list(pages) == ["api/index.md", "api/b.md", "api/a.md"]
    assert pages["api/index.md"].index("[`a`]") < pages["api/index.md"].index("[`b`]")
    assert "| [`a`](a.md) | 0 | First \\| line wrapped. |" in pages["api/index.md"]
    assert pages["api/a.md"].endswith("::: keras_attn_zoo.a\n")


def test_call_arguments_are_read_as_name_and_description():
    extension = _load_script("griffe_call_arguments")
    text = "query: `[B, T, d]`.\ncausal: mask keys after\n    each query.\n\ntraining: bool.\n"
    assert extension.call_arguments(text) == [
        ("query", "`[B, T, d]`."), ("causal", "mask keys after each query."),
        ("training", "bool.")]
    with pytest.raises(ValueError, match="as `MultiHeadAttention`"):
        extension.call_arguments("as `MultiHeadAttention` (query, context).\n")
    assert extension.referenced_class("as `layers.projected_gru.GRU`.") == "GRU"
    assert extension.referenced_class("as `MultiHeadAttention`") == "MultiHeadAttention"
    assert extension.referenced_class("query: as `MultiHeadAttention`.") is None
