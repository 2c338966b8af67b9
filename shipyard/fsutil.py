"""Filesystem helpers: outputs appear whole or not at all."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling folder; rename it to ``target`` only if the block succeeds.

    On any exception the temporary folder is removed and ``target`` is left as it was,
    so a failed step never leaves a half-written model or report behind.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        if target.is_dir() and not target.is_symlink():
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
            return
        target.unlink()
    tmp.rename(target)


def atomic_write_text(target: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``target`` through a temporary file and a rename."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def dir_size(path: str | os.PathLike[str]) -> int:
    """Total bytes of the regular files under ``path`` (a file's own size if it is one)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def copy_tree(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Copy a folder (or a single file) to ``dst``, replacing ``dst`` atomically."""
    src = Path(src)
    with atomic_dir(dst) as tmp:
        if src.is_dir():
            shutil.copytree(src, tmp, dirs_exist_ok=True, symlinks=False)
        else:
            shutil.copy2(src, tmp / src.name)
