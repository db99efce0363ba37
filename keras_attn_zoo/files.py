"""Writing files so that no reader ever sees half of one."""

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
