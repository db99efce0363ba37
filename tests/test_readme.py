"""The ```python blocks of the README and of docs/ run as documented, and so does the package face.

Every distinct block runs (a block shown on two pages runs once) as a script in a fresh interpreter, in a temporary working
directory, so a documented line that fails is a failing test. What a block needs
from outside is made here, cheaply:

* a path ``saved_models/...`` in a string literal: the shared tiny exported
  Transformer (``tiny_trained_export`` of ``conftest.py``) is copied there, since the README shows a
  real run's export name;
* the Ding dictionary: the block is skipped, like the real-dictionary tests of
  ``test_data_ding.py``, only where no local copy exists (``make test`` installs it).

A block whose first line starts with ``# not run by tests:`` (followed by the
reason) is skipped with that reason; keep such blocks rare.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# The README and the MkDocs pages: every documented block is a test.
DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md"))]
SKIP_MARKER = "# not run by tests:"
TIMEOUT_S = 300

_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SAVED_MODEL_PATH = re.compile(r"""["'](saved_models/[^"']+)["']""")


def python_blocks(text):
    """``[(line, code)]`` of every ```python block; ``line`` is its first code line."""
    return [(text.count("\n", 0, match.start()) + 2, match.group(1))
            for match in _BLOCK.finditer(text)]


def run_script(code, cwd, name="script.py"):
    """Runs ``code`` as a script in a fresh interpreter (this checkout's package first)."""
    script = pathlib.Path(cwd) / name  # tracebacks name it
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def failure(completed, code):
    """What a failing script printed, for the assertion message."""
    return (f"exit {completed.returncode}\n--- code ---\n{code}\n--- stderr (tail) ---\n"
            f"{completed.stderr[-4000:]}\n--- stdout (tail) ---\n{completed.stdout[-2000:]}")


def documented_blocks(documents):
    """``[(place, code)]`` of every distinct ```python block; ``place`` is ``file:line``
    of its first appearance."""
    blocks = {}
    for path in documents:
        for line, code in python_blocks(path.read_text(encoding="utf-8")):
            blocks.setdefault(code, f"{path.relative_to(REPO).as_posix()}:{line}")
    return [(place, code) for code, place in blocks.items()]


BLOCKS = documented_blocks(DOCUMENTS)


def test_readme_has_python_blocks():
    # Guards the extraction itself: a changed fence style must not silently test nothing.
    assert len(BLOCKS) >= 3
    assert any(place.startswith("README.md:") for place, _ in BLOCKS)


@pytest.fixture(scope="module")
def readme_export(tiny_trained_export):
    """``(base, version_dir)`` of the shared tiny exported Transformer."""
    _, base, version_dir = tiny_trained_export
    return pathlib.Path(base), pathlib.Path(version_dir)


def _ding_available():
    from keras_attn_zoo.data.ding import ensure_ding_file

    try:
        ensure_ding_file()
    except FileNotFoundError:
        return False
    return True


@pytest.mark.parametrize(
    "place, code", BLOCKS, ids=[place for place, _ in BLOCKS])
def test_readme_python_block(place, code, tmp_path, request):
    first_line = code.lstrip().splitlines()[0] if code.strip() else ""
    if first_line.startswith(SKIP_MARKER):
        pytest.skip(f"{place}: {first_line}")
    if "ding_corpus" in code and not _ding_available():
        pytest.skip("Ding dictionary not installed (apt-get install trans-de-en)")
    for relative in sorted(set(_SAVED_MODEL_PATH.findall(code))):
        base, version_dir = request.getfixturevalue("readme_export")
        # A path ending in a version number names a version; otherwise a model's base.
        source = version_dir if pathlib.PurePath(relative).name.isdigit() else base
        shutil.copytree(source, tmp_path / relative)
    name = re.sub(r"\W", "_", place)  # docs/data.md:12 -> docs_data_md_12
    completed = run_script(code, tmp_path, name=f"block_{name}.py")
    assert completed.returncode == 0, failure(completed, code)


def test_package_face_in_a_fresh_interpreter(tmp_path):
    # The usage line of issue 14 and the PEP 562 face: cheap import, lazy subpackages,
    # every name of __all__ resolving, and the usual AttributeError otherwise.
    script = textwrap.dedent("""
        import sys
        import keras_attn_zoo

        assert "tensorflow" not in sys.modules, "import keras_attn_zoo imported TensorFlow"
        assert "keras_attn_zoo.models" not in sys.modules
        assert set(keras_attn_zoo.__all__) <= set(dir(keras_attn_zoo))

        model = keras_attn_zoo.models.ran_transformer(8000, preset="tiny")
        assert model.count_params() > 0
        assert keras_attn_zoo.models is sys.modules["keras_attn_zoo.models"]

        for name in keras_attn_zoo.__all__:
            value = getattr(keras_attn_zoo, name)
            if name != "__version__":
                assert value is sys.modules["keras_attn_zoo." + name], name
        namespace = {}
        exec("from keras_attn_zoo import *", namespace)
        assert set(keras_attn_zoo.__all__) <= set(namespace)

        try:
            keras_attn_zoo.no_such_name
        except AttributeError as error:
            assert str(error) == "module 'keras_attn_zoo' has no attribute 'no_such_name'", error
        else:
            raise AssertionError("no AttributeError")
        print("ok")
        """)
    completed = run_script(script, tmp_path)
    assert completed.returncode == 0, failure(completed, script)
    assert completed.stdout.strip().endswith("ok")
