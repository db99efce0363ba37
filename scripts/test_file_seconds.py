"""Writes tests/file_seconds.json, the suite's seconds per test file, from a
pytest log run with `--durations=0` (setup, call and teardown summed).

`tests/conftest.py` sends the files to pytest-xdist's workers slowest first
(longest-processing-time-first scheduling), so that no long file starts last
while the other worker idles. Regenerate after a file's cost changes a lot:

    make test TEST_ARGS="--durations=0" > /tmp/suite.log
    python scripts/test_file_seconds.py /tmp/suite.log
"""

import collections
import json
import pathlib
import re
import sys

OUTPUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "file_seconds.json"
DURATION = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(tests/[^:]+\.py)::")


def file_seconds(lines):
    """`{test file: seconds}` summed over the log's duration lines, slowest first."""
    seconds = collections.Counter()
    for line in lines:
        match = DURATION.match(line)
        if match:
            seconds[match.group(2)] += float(match.group(1))
    if not seconds:
        raise SystemExit("no duration lines: run pytest with --durations=0")
    return {name: round(value, 1) for name, value in seconds.most_common()}


def main(log_path):
    text = pathlib.Path(log_path).read_text(encoding="utf-8", errors="replace")
    seconds = file_seconds(text.splitlines())
    OUTPUT.write_text(json.dumps(seconds, indent=1) + "\n", encoding="utf-8")
    print(f"{len(seconds)} files, {sum(seconds.values()):.0f} s in all -> {OUTPUT}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
