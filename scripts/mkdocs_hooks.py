"""MkDocs hook: the pages show the committed result files where they lie.

The pages link the plots and result files as ``../benchmarks/results/...``, the
path that also works when GitHub renders ``docs/``. MkDocs only knows the files
under ``docs/``, so this hook adds each file of ``benchmarks/results/`` that a
page may link (images and JSON) under that source path
and copies it to ``benchmarks/results/...`` in the site. A link to a result
file that does not exist stays a broken link, which ``--strict`` refuses.
"""

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
    return files
