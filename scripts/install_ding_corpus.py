"""Set-up step for the Ding corpus (``make corpus`` runs it; library code never does).

``python scripts/install_ding_corpus.py [PATH]``: if ``keras_attn_zoo.data.ding`` already finds
the dictionary, nothing is installed. Otherwise, in this order: ``apt-get install -y trans-de-en``
when running as root with apt, then a download of the upstream ``de-en.txt.gz`` into the cache
that the reader searches, else a message that says how to get the file. Then the file's path
and counts are printed (``python -m keras_attn_zoo.data.ding``).
"""

from __future__ import annotations

import gzip
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import urllib.request

from keras_attn_zoo.data import ding


def try_apt_get_install() -> bool:
    """Installs the Debian package as root; returns whether the default path now exists."""
    install_command = ["apt-get", "install", "-y", ding.DING_APT_PACKAGE]
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"Installing {ding.DING_APT_PACKAGE} with apt-get ...", file=sys.stderr)
    result = subprocess.run(install_command, env=environment, check=False)
    if result.returncode != 0:
        # A fresh container often has empty package lists; refresh them once and retry.
        subprocess.run(["apt-get", "update"], env=environment, check=False)
        subprocess.run(install_command, env=environment, check=False)
    return pathlib.Path(ding.DEFAULT_DING_PATH).is_file()


def download_ding(url: str, destination: pathlib.Path) -> pathlib.Path:
    """Downloads and decompresses the gzipped dictionary; the rename makes it atomic."""
    from tqdm.auto import tqdm

    destination.parent.mkdir(parents=True, exist_ok=True)
    compressed_fd, compressed_name = tempfile.mkstemp(
        dir=destination.parent, prefix=".de-en.", suffix=".gz.part"
    )
    text_fd, text_name = tempfile.mkstemp(dir=destination.parent, prefix=".de-en.", suffix=".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, os.fdopen(
            compressed_fd, "wb"
        ) as compressed_file:
            total_bytes = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total_bytes, unit="B", unit_scale=True, desc="de-en.txt.gz") as bar:
                while chunk := response.read(1 << 16):
                    compressed_file.write(chunk)
                    bar.update(len(chunk))
        with gzip.open(compressed_name, "rb") as source, os.fdopen(text_fd, "wb") as target:
            shutil.copyfileobj(source, target)
        os.replace(text_name, destination)
    finally:
        for leftover in (compressed_name, text_name):
            if os.path.exists(leftover):
                os.remove(leftover)
    return destination


def install_ding_corpus(
    path: str | os.PathLike | None = None,
    *,
    allow_install: bool = True,
    allow_download: bool = True,
) -> pathlib.Path:
    """The dictionary's path, installed (apt) or downloaded first when the reader finds none.

    An explicit ``path`` (or ``$KERAS_ATTN_ZOO_DING``) must exist: nothing is installed for it.

    Raises:
        FileNotFoundError: the reader's message, plus why the download failed.
    """
    explicit = path is not None or os.environ.get(ding.DING_ENV_VAR)
    try:
        return ding.ensure_ding_file(path)
    except FileNotFoundError as error:
        if explicit:
            raise
        not_found = error
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if allow_install and is_root and shutil.which("apt-get"):
        if try_apt_get_install():
            return pathlib.Path(ding.DEFAULT_DING_PATH)
    if allow_download:
        try:
            return download_ding(ding.DING_DOWNLOAD_URL, ding.ding_cache_path())
        except Exception as error:  # noqa: BLE001 - any failure means "tell the user how"
            raise FileNotFoundError(
                f"{not_found}\n(The download from {ding.DING_DOWNLOAD_URL} failed: {error})"
            ) from error
    raise not_found


if __name__ == "__main__":
    sys.exit(ding.main(locate=install_ding_corpus))
