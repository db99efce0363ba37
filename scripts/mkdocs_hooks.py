"""MkDocs hooks: the committed result files where the pages link them, and the
API reference generated from the docstrings (the second half of this file).

The pages link the plots and result files as ``../benchmarks/results/...``, the
path that also works when GitHub renders ``docs/``. MkDocs only knows the files
under ``docs/``, so this hook adds each file of ``benchmarks/results/`` that a
page may link (images and JSON) under that source path
and copies it to ``benchmarks/results/...`` in the site. A link to a result
file that does not exist stays a broken link, which ``--strict`` refuses.
"""

import ast
import logging
import pathlib

from mkdocs.structure.files import File
from mkdocs.structure.files import InclusionLevel

RESULTS = "benchmarks/results"
LINKED_SUFFIXES = (".png", ".svg", ".json")


def on_files(files, config):
    docs_dir = pathlib.Path(config["docs_dir"])
    results = docs_dir.parent / RESULTS
    for path in sorted(results.rglob("*")):
        if path.is_file() and path.suffix in LINKED_SUFFIXES:
            relative = path.relative_to(docs_dir.parent).as_posix()
            file = File("../" + relative, src_dir=str(docs_dir), dest_dir=config["site_dir"],
                        use_directory_urls=config["use_directory_urls"], dest_uri=relative)
            # MkDocs leaves out paths that start with a dot, as `../` does.
            file.inclusion = InclusionLevel.INCLUDED
            files.append(file)
    _generated_files(files, config)
    return files


# ---- the API reference, generated from the docstrings ------------------------
#
# One page per package or top-level module of `keras_attn_zoo`, in the order of
# `RANKS` in tests/test_layering.py (the layering's single source; read here, not
# copied), each rendered by mkdocstrings from the docstrings. A public object
# without a docstring would be left out of its page silently, so the build
# warns for each one (`undocumented_objects`) and `--strict` fails on it.

PACKAGE = "keras_attn_zoo"
RANKS_SOURCE = "tests/test_layering.py"
API_DIR = "api"
# Methods that override a framework's hook (Keras layers and callbacks,
# optimizers, http.server): the framework documents them.
FRAMEWORK_HOOKS = frozenset({
    "build", "call", "compute_mask", "compute_output_shape", "compute_output_spec",
    "from_config", "get_build_config", "build_from_config", "get_config",
    "inner_loop", "update_step", "do_GET", "do_POST", "log_message",
})

log = logging.getLogger("mkdocs.hooks.api_reference")


def package_ranks(repo):
    """`{name: rank}` as `RANKS` in tests/test_layering.py, in its order."""
    tree = ast.parse((pathlib.Path(repo) / RANKS_SOURCE).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "RANKS" for target in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"{RANKS_SOURCE} defines no RANKS")


def summary(docstring):
    """A docstring's first paragraph on one line ('' for none), for a table cell."""
    paragraph = (docstring or "").strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split()).replace("|", "\\|")


def api_pages(ranks, summaries=None):
    """`{page path: markdown}`: the index (the layout: each name's rank and
    `summaries[name]`) and one page per ranked name."""
    summaries = summaries or {}
    rows = [f"| [`{name}`]({name}.md) | {rank} | {summaries.get(name, '')} |"
            for name, rank in sorted(ranks.items(), key=lambda item: item[1])]
    index = "\n".join([
        "# API reference",
        "",
        "Generated from the docstrings. The package's layout is its architecture:",
        "a module imports modules of its own rank or a lower one, never a higher one",
        f"(`{RANKS_SOURCE}` holds the ranks and checks every import against them).",
        "",
        "| package or module | rank | what it holds |",
        "| --- | --- | --- |",
        *rows,
        "",
    ])
    pages = {f"{API_DIR}/index.md": index}
    for name in ranks:
        pages[f"{API_DIR}/{name}.md"] = f"# `{PACKAGE}.{name}`\n\n::: {PACKAGE}.{name}\n"
    return pages


def _documented_in_a_base(cls, name):
    for base in cls.mro():
        member = base.members.get(name)
        if member is not None and member.docstring:
            return True
    return False


def undocumented_objects(package):
    """Paths of the public modules, classes, functions and methods of a griffe
    `package` that have no docstring (`_private` names and imports left out;
    a method is documented by the base class it overrides, or by the
    framework for `FRAMEWORK_HOOKS` and callbacks' `on_*`)."""
    import griffe

    missing = []

    def visit(obj):
        for name, member in obj.members.items():
            if member.is_alias or name.startswith("_"):
                continue
            if member.is_module:
                if not member.docstring:
                    missing.append(member.path)
                visit(member)
            elif member.is_function and not member.docstring:
                if obj.is_class and (name in FRAMEWORK_HOOKS or name.startswith("on_")):
                    continue
                try:
                    if obj.is_class and _documented_in_a_base(obj, name):
                        continue
                except griffe.AliasResolutionError:
                    pass  # a base outside the package (Keras): no docstring to inherit
                missing.append(member.path)
            elif member.is_class:
                if not member.docstring:
                    missing.append(member.path)
                visit(member)

    if not package.docstring:
        missing.append(package.path)
    visit(package)
    return sorted(missing)


def on_config(config):
    ranks = package_ranks(pathlib.Path(config["config_file_path"]).parent)
    names = sorted(ranks, key=ranks.get)
    config["nav"].append({"API reference": [f"{API_DIR}/index.md"]
                          + [{name: f"{API_DIR}/{name}.md"} for name in names]})
    return config


def _generated_files(files, config):
    import griffe

    repo = pathlib.Path(config["config_file_path"]).parent
    package = griffe.load(PACKAGE, search_paths=[str(repo)], try_relative_path=False,
                          docstring_parser="google")
    ranks = package_ranks(repo)
    summaries = {name: summary(package.members[name].docstring.value)
                 for name in ranks if name in package.members
                 and package.members[name].docstring is not None}
    for path, markdown in api_pages(ranks, summaries).items():
        files.append(File.generated(config, path, content=markdown))
    for path in undocumented_objects(package):
        log.warning("%s has no docstring: the API reference would leave it out", path)
