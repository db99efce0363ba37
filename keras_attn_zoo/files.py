"""Writing files so that no reader ever sees half of one; JSON-lines records."""

import json
import os
import pathlib


def write_atomically(path, content):
    """Writes `content` (text, or bytes) under a temporary name and renames it, so
    that no reader ever sees a half-written file. The temporary name carries the
    process id: two processes writing the same file do not write into each other's.
    A failed write leaves no temporary file behind and raises."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(content, bytes):
            temporary.write_bytes(content)
        else:
            temporary.write_text(content, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def read_json_lines(path):
    """The records of a JSON-lines file, one per non-empty line (none when it
    does not exist)."""
    path = pathlib.Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def write_json_lines(path, records):
    """Writes `records` as a JSON-lines file, atomically (`write_atomically`)."""
    write_atomically(path, "".join(json.dumps(record) + "\n" for record in records))
