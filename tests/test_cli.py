"""`keras-attn-zoo translate`: one output line per input line, in order."""

import pytest

from keras_attn_zoo import cli

LINES = [
    "the cat sees the dog",
    "",
    "a small bird sleeps",
    "   ",
    "dog",
    "",
    "the big red house and the green tree and a dog runs and the cat sleeps",
    "tree",
]


@pytest.fixture(scope="module")
def exported(tiny_trained_export):
    # The CLI must reproduce the translator exactly.
    return tiny_trained_export


def test_translate_file_keeps_lines_and_order(exported, tmp_path):
    translator, base, _ = exported
    source = tmp_path / "input.txt"
    source.write_bytes(("\r\n".join(LINES[:3]) + "\n" + "\n".join(LINES[3:]) + "\n")
                       .encode("utf-8"))
    target = tmp_path / "output.txt"
    # `cli.main` in this process (its return value is the exit status); the CLI
    # as a process, exit status and all, is tests/test_bad_inputs.py's
    # test_cli_keeps_lines_and_names_the_bad_line.
    assert cli.main(["translate", "--model", str(base), "--input", str(source),
                     "--output", str(target), "--batch-size", "3", "--beam", "4",
                     "--length-penalty", "0.6"]) == 0
    output = target.read_bytes().decode("utf-8")
    assert output.endswith("\n")
    output_lines = output.split("\n")[:-1]
    assert len(output_lines) == len(LINES)
    expected = translator.translate_texts(LINES, beam_size=4, length_penalty=0.6)
    assert output_lines == expected
    for line, translated in zip(LINES, output_lines):
        assert (translated == "") == (line.strip() == "")
    assert not list(tmp_path.glob(".*.part"))


def test_undecodable_line_is_an_error_naming_it(exported, tmp_path, capsys):
    _, base, _ = exported
    source = tmp_path / "latin1.txt"
    source.write_bytes("dog\n\ncat\n".encode("utf-8")
                       + "Gr\u00fc\u00dfe\n".encode("latin-1"))
    target = tmp_path / "out.txt"
    code = cli.main(["translate", "--model", str(base), "--input", str(source),
                     "--output", str(target)])
    assert code == 2
    error = capsys.readouterr().err
    assert "line 4 is not valid UTF-8" in error and "0xfc" in error
    assert not target.exists()


def test_read_lines_and_model_resolution(exported, tmp_path):
    _, base, version_dir = exported
    assert cli.read_lines(b"") == []
    assert cli.read_lines(b"a\n\nb") == ["a", "", "b"]
    assert cli.read_lines(b"a\r\n \n") == ["a", " "]
    assert cli.resolve_model_dir(base) == version_dir
    assert cli.resolve_model_dir(version_dir) == version_dir
    (base / "7").mkdir()  # an incomplete version is skipped
    try:
        assert cli.resolve_model_dir(base) == version_dir
    finally:
        (base / "7").rmdir()
    with pytest.raises(FileNotFoundError):
        cli.resolve_model_dir(tmp_path)


def test_parser_requires_a_subcommand():
    with pytest.raises(SystemExit):
        cli.main([])


LONG_LINE = " ".join(["tree", "dogs", "cats", "bird"] * 375)  # 1,500 words, 7,499 chars


def _token_count(translator, text):
    from keras_attn_zoo.data.vocabulary import sentencepiece_processor

    vocabulary = sentencepiece_processor(translator.proto)
    return len(vocabulary.encode(text)) + 1  # pieces + EOS


def test_over_long_line_names_the_limit_and_the_count(exported, tmp_path, capsys):
    translator, base, _ = exported
    source = tmp_path / "long.txt"
    source.write_text(f"dog\n{LONG_LINE}\n", encoding="utf-8")
    code = cli.main(["translate", "--model", str(base), "--input", str(source),
                     "--no-progress"])
    assert code == 2
    printed = capsys.readouterr()
    assert printed.out == "", "a refused file must not be half translated"
    error = printed.err
    tokens = _token_count(translator, LONG_LINE)
    assert "line 2" in error and f"{tokens} tokens" in error
    assert "max_input_length=1024" in error and "Graph execution error" not in error


def test_python_translator_says_why(exported):
    import tensorflow as tf

    translator, _, _ = exported
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        translator.translate_texts(["dog", LONG_LINE, "cat"])
    message = str(raised.value.message)
    tokens = _token_count(translator, LONG_LINE)
    assert message.startswith("Input too long: sentence 1 has")  # the caller's index
    assert f"has {tokens} tokens" in message and "max_input_length=1024" in message


def test_a_paragraph_line_keeps_every_sentence_in_order_with_the_zoos_search(
        exported, tmp_path, capsys):
    """Also: without --beam/--length-penalty the CLI searches with the zoo's
    defaults (once test_translate_defaults_to_the_zoos_search, a load of its own)."""
    from keras_attn_zoo.decoding import DEFAULT_BEAM_SIZE
    from keras_attn_zoo.decoding import DEFAULT_LENGTH_PENALTY

    translator, base, _ = exported
    zoo_search = dict(beam_size=DEFAULT_BEAM_SIZE, length_penalty=DEFAULT_LENGTH_PENALTY)
    sentences = ["The cat sees the dog.", "A small bird sleeps.", "The dog runs."]
    source = tmp_path / "paragraph.txt"
    source.write_text(" ".join(sentences) + "\n" + "\n".join(LINES[:3]) + "\n",
                      encoding="utf-8")
    alone = translator.translate_texts(sentences + LINES[:3], **zoo_search)
    code = cli.main(["translate", "--model", str(base), "--input", str(source),
                     "--no-progress"])
    assert code == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert lines == [" ".join(t for t in alone[:3] if t.strip()), *alone[3:]]
    code = cli.main(["translate", "--model", str(base), "--input", str(source),
                     "--no-progress", "--no-split"])
    assert code == 0
    whole = capsys.readouterr().out.split("\n")[:-1]
    assert whole == translator.translate_texts([" ".join(sentences), *LINES[:3]],
                                               **zoo_search)


def _run_cli(*args):
    return cli.main([str(a) for a in args])


def test_n_best_writes_n_hypotheses_per_line_best_first(exported, tmp_path):
    translator, base, _ = exported
    source = tmp_path / "in.txt"
    source.write_text("the cat sees the dog\ndog\n", encoding="utf-8")
    one, three = tmp_path / "one.txt", tmp_path / "three.txt"
    assert _run_cli("translate", "--model", base, "--input", source, "--output", one,
                    "--n-best", 1, "--no-progress") == 0
    assert _run_cli("translate", "--model", base, "--input", source, "--output", three,
                    "--n-best", 3, "--no-progress") == 0
    rows = [line.split(" ||| ") for line in three.read_text(encoding="utf-8").splitlines()]
    assert [int(row[0]) for row in rows] == [0, 0, 0, 1, 1, 1]
    for line in (0, 1):
        scores = [float(row[2]) for row in rows if int(row[0]) == line]
        assert scores == sorted(scores, reverse=True)
    # N = 1 is the plain translation.
    plain = translator.translate_texts(["the cat sees the dog", "dog"])
    assert [line.split(" ||| ")[1] for line in one.read_text(encoding="utf-8").splitlines()
            ] == plain
    assert _run_cli("translate", "--model", base, "--input", source, "--n-best", 5,
                    "--beam", 4) == cli.EXIT_USAGE


def test_sampling_with_a_seed_repeats_and_top_1_is_greedy(exported, tmp_path):
    translator, base, _ = exported
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    outputs = []
    for seed, top_k in ((5, 0), (5, 0), (9, 1)):
        target = tmp_path / f"s{seed}-{top_k}.txt"
        assert _run_cli("translate", "--model", base, "--input", source, "--output", target,
                        "--sampling-topk", top_k, "--seed", seed, "--no-progress") == 0
        outputs.append(target.read_text(encoding="utf-8").splitlines())
    assert outputs[0] == outputs[1]
    assert outputs[2] == translator.translate_texts(LINES, beam_size=1, length_penalty=0.0)
    assert _run_cli("translate", "--model", base, "--input", source,
                    "--sampling-temperature", 0) == cli.EXIT_USAGE


def test_score_command_gives_the_searchs_score(exported, tmp_path, capsys):
    translator, base, _ = exported
    sources = ["the cat sees the dog", "a small bird sleeps"]
    import tensorflow as tf

    translations = translator.translate_texts(sources, length_penalty=0.0)
    # (That the search's own score comes back is tested in test_export on a
    # trained model; this one is untrained, so its pieces may not round-trip.)
    scores = translator.score(tf.constant(sources), tf.constant(translations))[
        "log_prob"].numpy()
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(translations) + "\n", encoding="utf-8")
    assert _run_cli("score", "--model", base, "--source", tmp_path / "src.txt",
                    "--target", tmp_path / "tgt.txt", "--output", tmp_path / "s.txt") == 0
    rows = (tmp_path / "s.txt").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 2
    for row, score in zip(rows, scores):
        total, per_token = row.split("\t")
        values = [float(v) for v in per_token.split()]
        assert float(total) == pytest.approx(sum(values), abs=1e-3)
        assert float(total) == pytest.approx(float(score), abs=1e-3)
    (tmp_path / "short.txt").write_text("one line\n", encoding="utf-8")
    assert _run_cli("score", "--model", base, "--source", tmp_path / "src.txt",
                    "--target", tmp_path / "short.txt") == cli.EXIT_USAGE
    assert "has 2 lines" in capsys.readouterr().err
