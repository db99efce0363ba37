"""Hostile and odd inputs against the exported signatures, the CLI and the server.

Each input gets a translation or a clear error; nothing crashes a process,
hangs, or silently truncates.
"""

import json
import pathlib
import subprocess
import sys

import pytest
import tensorflow as tf

from tests.test_server import free_port
from tests.test_server import request

REPO = pathlib.Path(__file__).resolve().parents[1]

LONG_WORDS = " ".join(["the big red house"] * 750)  # 3,000 words
ODD_INPUTS = {
    "empty": "",
    "whitespace": " \t  ",
    "nul_and_control": "the cat\x00 sees\x07 the\x1b dog",
    "emoji": "the dog 🐕 sees the cat 🐈",
    "other_scripts": "кошка 猫 القطة the cat",
    "html": "<b>the cat</b> &amp; <script>alert(1)</script>",
    "plain": "the cat sees the dog",
}
TOO_LONG = {
    "20000_characters": ("a" * 19_999 + " ")[:20_000],
    "3000_words": LONG_WORDS,
}


@pytest.fixture(scope="module")
def loaded(tiny_export):
    import tensorflow_text  # noqa: F401

    from keras_attn_zoo.export import latest_version

    return tf.saved_model.load(str(latest_version(tiny_export)))


def translate(loaded, texts):
    outputs = loaded.signatures["translate"](text=tf.constant(texts))
    return [t.decode("utf-8") for t in outputs["translation"].numpy()]


@pytest.mark.parametrize("name", sorted(ODD_INPUTS))
def test_signature_translates_odd_inputs(loaded, name):
    [translation] = translate(loaded, [ODD_INPUTS[name]])
    if name in ("empty", "whitespace"):
        assert translation == ""
    else:
        assert isinstance(translation, str)


def test_signature_replaces_undecodable_bytes(loaded):
    outputs = loaded.signatures["translate"](text=tf.constant([b"the cat \xff\xfe sees"]))
    assert outputs["translation"].shape == (1,)


@pytest.mark.parametrize("name", sorted(TOO_LONG))
def test_signature_refuses_too_long_inputs_naming_the_limit(loaded, name):
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_input_length"):
        translate(loaded, [TOO_LONG[name]])


def test_a_mixed_batch_translates_each_input_as_alone(loaded):
    texts = list(ODD_INPUTS.values())
    together = translate(loaded, texts)
    alone = [translate(loaded, [text])[0] for text in texts]
    assert together == alone


def test_cli_keeps_lines_and_names_the_bad_line(tiny_export, tmp_path, capsys):
    # The odd lines through a real process: it exits 0 with one line each.
    good = tmp_path / "good.txt"
    good.write_text("\n".join(ODD_INPUTS.values()) + "\n", encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "keras_attn_zoo.cli", "translate", "--model",
         str(tiny_export), "--input", str(good), "--no-progress"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("\n")[:-1]
    assert len(lines) == len(ODD_INPUTS)
    assert lines[0] == "" and lines[1] == ""

    # A refused file through `cli.main` in this process (its return value is the
    # exit status; a process each cost a TensorFlow import). An undecodable line
    # is refused before the model loads. A too-long line (refused after the
    # load, exit 2, "line 2", nothing on stdout) is tests/test_cli.py's
    # test_over_long_line_names_the_limit_and_the_count, which names the limit
    # and the count too.
    from keras_attn_zoo import cli

    path = tmp_path / "undecodable.txt"
    path.write_bytes(b"the cat\nthe \xff dog\n")
    code = cli.main(["translate", "--model", str(tiny_export), "--input", str(path),
                     "--no-progress"])
    printed = capsys.readouterr()
    assert code == 2, printed.err[-2000:]
    assert "line 2" in printed.err, printed.err[-2000:]
    assert printed.out == "", "a refused file must not be half translated"


def test_server_answers_every_odd_input_and_keeps_serving(tiny_export):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_attn_zoo.cli", "serve", "--model", str(tiny_export),
         "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    url = f"http://127.0.0.1:{port}/v1/models/{tiny_export.name}"
    try:
        import time

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if request(url, timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        table = []
        for name, text in {**ODD_INPUTS, **TOO_LONG}.items():
            status, body = request(url + ":translate", {"text": [text]})
            table.append((name, status, body.get("translations", body.get("error"))))
            if name in TOO_LONG:
                assert status == 400 and "limit" in body["error"], (name, body)
            else:
                assert status == 200, (name, body)
        status, body = request(url + ":translate", {"text": list(ODD_INPUTS.values())})
        assert status == 200 and len(body["translations"]) == len(ODD_INPUTS)
        status, body = request(url + ":translate", raw=b'{"text": ["the \xff cat"]}')
        assert status == 400 and "UTF-8" in body["error"]
        assert process.poll() is None, "the server died"
        print("\n" + "\n".join(f"{n:18} {s} {json.dumps(r)[:60]}" for n, s, r in table))
    finally:
        process.kill()
