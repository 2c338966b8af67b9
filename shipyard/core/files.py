"""Filesystem helpers: outputs appear whole or not at all, with normal modes, and a failed
write (read-only folder, disk full) is one line naming the path and the fix.

A step that fails keeps the logs a user needs (``vllm.log``, ``guidellm.log``, ``lm-eval.log``)
in ``<output>.failed-logs/`` beside the output it did not write (:func:`atomic_dir`'s
``keep_on_failure``, :func:`keep_failed_logs`), and its one-line error names that folder."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from shipyard.core.errors import FileError, ShipyardError, file_error

#: ``<output>.failed-logs``: where a failed step's logs are kept, beside the output it did not write.
FAILED_LOGS_SUFFIX = ".failed-logs"


def _umask() -> int:
    """The process umask, read without changing it (``/proc``), else the usual 022."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _os_errors(target: Path, field: str, action: str = "write") -> contextlib.AbstractContextManager[None]:
    """Turn an :class:`OSError` raised inside the block into a one-line :class:`FileError`."""

    @contextlib.contextmanager
    def block() -> Iterator[None]:
        try:
            yield
        except FileError:
            raise
        except shutil.Error as err:
            raise _copy_error(err, target, field) from None
        except OSError as err:
            raise file_error(err, field, target, action) from None

    return block()


def _copy_error(err: shutil.Error, target: Path, field: str) -> FileError:
    """``shutil.copytree``'s list of (src, dst, reason) as one line: the first reason, the count."""
    failures = [e for e in (err.args[0] if err.args and isinstance(err.args[0], list) else []) if len(e) == 3]
    if not failures:
        return FileError(field or str(target), f"cannot copy into {target}: {err}", "check the paths and free space")
    src, dst, why = failures[0]
    more = f" and {len(failures) - 1} more file(s)" if len(failures) > 1 else ""
    text = str(why)
    if "No space left" in text or f"[Errno {errno.ENOSPC}]" in text:
        return FileError(field or str(target), f"no space left on the device to write {target} (copying {src}{more})",
                         "free space on that filesystem or choose another folder", err_no=errno.ENOSPC,
                         filename=str(target))
    return FileError(field or str(target), f"cannot copy {src} to {dst}: {text}{more}", "check the paths and permissions",
                     filename=str(target))


def failed_logs_dir(target: str | os.PathLike[str]) -> Path:
    """Where the logs of a step that failed to write ``target`` are kept: ``<target>.failed-logs``."""
    target = Path(target)
    return target.with_name(target.name + FAILED_LOGS_SUFFIX)


def keep_failed_logs(src_dir: str | os.PathLike[str], target: str | os.PathLike[str],
                     names: Iterable[str]) -> Path | None:
    """Move the files ``names`` that exist in ``src_dir`` to :func:`failed_logs_dir` of ``target``.

    Returns that folder, or None when there was nothing to keep (or it cannot be written: keeping
    logs never hides the error that made the step fail).
    """
    src = Path(src_dir)
    found = [src / name for name in names if (src / name).is_file()]
    if not found:
        return None
    kept = failed_logs_dir(target)
    try:
        kept.mkdir(parents=True, exist_ok=True)
        for path in found:
            shutil.move(str(path), kept / path.name)
    except OSError:
        return None
    return kept


def point_at_kept_logs(err: BaseException, kept: Path | None) -> None:
    """Add "logs kept in DIR (files)" to a :class:`ShipyardError`'s fix, in place; for any other
    error (a bug, an interrupt) say it on stderr."""
    if kept is None:
        return
    try:
        names = ", ".join(sorted(p.name for p in kept.iterdir() if p.is_file()))
    except OSError:
        return
    note = f"logs kept in {kept}/ ({names})"
    if not isinstance(err, ShipyardError):
        print(f"shipyard: {note}", file=sys.stderr, flush=True)
    elif note not in err.fix:
        err.fix = f"{err.fix}; {note}" if err.fix else note
        err.args = (err.one_line(),)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike[str], field: str = "", keep_on_failure: Iterable[str] = ()) -> Iterator[Path]:
    """Yield a temporary sibling folder; rename it to ``target`` only if the block succeeds.

    On any exception the temporary folder is removed and ``target`` is left as it was,
    so a failed step never leaves a half-written model or report behind. A folder that cannot
    be created (read-only, disk full) raises a one-line :class:`~shipyard.core.errors.FileError`
    naming ``field`` (default: the path).

    ``keep_on_failure``: file names in the temporary folder (logs) that are moved to
    ``<target>.failed-logs/`` when the block fails; a :class:`ShipyardError` then names that
    folder. A later success removes a stale ``<target>.failed-logs/``.
    """
    target = Path(target)
    keep = list(keep_on_failure)
    with _os_errors(target, field, "create"):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        tmp.chmod(0o777 & ~_umask())
    try:
        yield tmp
    except BaseException as err:
        if keep:
            point_at_kept_logs(err, keep_failed_logs(tmp, target, keep))
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep:
        shutil.rmtree(failed_logs_dir(target), ignore_errors=True)
    try:
        with _os_errors(target, field):
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                if target.is_dir() and not target.is_symlink():
                    target.rename(old)
                    tmp.rename(target)
                    shutil.rmtree(old, ignore_errors=True)
                    return
                target.unlink()
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_through(path: str, text: str, append: bool) -> None:
    """Write ``text`` into an existing device, pipe or descriptor link without replacing it."""
    flags = os.O_WRONLY | (os.O_APPEND if append else 0)
    if stat.S_ISFIFO(os.stat(path).st_mode):
        flags |= os.O_NONBLOCK  # a pipe with no reader is an error (ENXIO), not a hang
    fd = os.open(path, flags)
    if flags & os.O_NONBLOCK:
        os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()


def atomic_write_text(target: str | os.PathLike[str], text: str, field: str = "", mode: int | None = None) -> None:
    """Write ``text`` to ``target`` through a temporary file and a rename.

    The file gets ``mode`` (default: an existing target's mode, else 0666 less the umask, so
    0644 usually; never the 0600 of a temporary file). A failure (read-only folder, disk full,
    a path through a file) raises a one-line :class:`~shipyard.core.errors.FileError` naming
    ``field`` (default: the path) and leaves nothing behind.

    Only regular files are replaced. A symlink is followed: the file it points to is replaced
    atomically and the link stays. A character device (``/dev/null``, ``/dev/full``), a named
    pipe or a descriptor link (``/dev/stdout``, ``/proc/self/fd/N``) is written through, as a
    shell's ``>`` does, never replaced (``/dev/full`` is a one-line "no space left" error). Any
    other existing non-regular file (a block device, a socket) is refused.
    """
    target = Path(target)
    with _os_errors(target, field):
        real = Path(os.path.realpath(target))
        try:
            info = os.stat(target)
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
        through_fd = str(real).startswith("/proc/") or str(target).startswith(("/dev/fd/", "/proc/"))
        if info is not None and (through_fd or stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
            _write_through(str(target), text, append=through_fd and stat.S_ISREG(info.st_mode))
            return
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise FileError(field or str(target), f"{target} is not a regular file (a block device or socket)",
                            "give a file path, or - for stdout", err_no=errno.EINVAL, filename=str(target))
        if mode is None:
            mode = info.st_mode & 0o7777 if info is not None else 0o666 & ~_umask()
        real.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", dir=real.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, real)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def ensure_writable_dir(path: str | os.PathLike[str], field: str) -> Path:
    """Check that ``path`` is (or can become) a folder this process can write, before any work.

    Nothing is left behind: an existing folder gets a probe file that is removed at once; a
    missing one is checked through its nearest existing parent (created and removed again).
    Read-only filesystems are caught too, where permission bits say nothing (root).
    """
    target = Path(path).expanduser().absolute()
    if target.exists() and not target.is_dir():
        raise FileError(field, f"{target} is a file, not a folder", "give a folder path", err_no=errno.ENOTDIR,
                        filename=str(target))
    created: list[Path] = []
    probe_dir = target
    with _os_errors(target, field):
        missing = []
        while not probe_dir.exists():
            missing.append(probe_dir)
            probe_dir = probe_dir.parent
        if not probe_dir.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(probe_dir))
        try:
            for folder in reversed(missing):
                folder.mkdir()
                created.append(folder)
            fd, probe = tempfile.mkstemp(prefix=".shipyard-write-probe-", dir=target)
            os.close(fd)
            os.unlink(probe)
        finally:
            for folder in reversed(created):
                with contextlib.suppress(OSError):
                    folder.rmdir()
    return target


def path_kind(path: str | os.PathLike[str]) -> str:
    """``"dir"``, ``"file"``, ``"other"`` or ``""`` (missing) for a user-given path; a name the
    filesystem refuses (too long, a NUL byte) counts as missing instead of raising."""
    try:
        info = os.stat(Path(path).expanduser())
    except (OSError, ValueError):
        return ""
    return "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other"


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


def copy_tree(src: str | os.PathLike[str], dst: str | os.PathLike[str], field: str = "") -> None:
    """Copy a folder (or a single file) to ``dst``, replacing ``dst`` atomically.

    Disk full, a read-only destination or an unreadable source is one line naming the path
    (``shutil``'s list of per-file errors is summarised), and ``dst`` is left as it was.
    """
    src = Path(src)
    dst = Path(dst)
    with atomic_dir(dst, field) as tmp, _os_errors(dst, field):
        if src.is_dir():
            shutil.copytree(src, tmp, dirs_exist_ok=True, symlinks=False)
        else:
            shutil.copy2(src, tmp / src.name)


def package_dir(package: str) -> Path:
    """The folder of an installed package (``shipyard.serving.kserve``...): where its data files are.

    Through :mod:`importlib.resources`, so a checkout, an editable install and a wheel agree.
    """
    from importlib.resources import files

    return Path(str(files(package)))


def cache_dir() -> Path:
    """shipyard's cache (``SHIPYARD_CACHE``, default ``~/.cache/shipyard``)."""
    return Path(os.environ.get("SHIPYARD_CACHE", Path.home() / ".cache" / "shipyard"))


def tree_files(root: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """Sorted ``(relative posix path, path)`` of the files that make a model folder's content.

    Regular files, symlinks followed (a Hugging Face cache snapshot is a folder of links); hidden
    names (``.cache/``, ``.gitattributes``: download bookkeeping, not the model) are left out.
    """
    root = Path(root)
    return sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))


def tree_digest(files: Iterable[tuple[str, Path]]) -> tuple[str, dict[str, str]]:
    """The one content identity of a model: ``sha256:<hex>`` over the canonical JSON of
    ``{relative path: sha256 of the file}``, and those per-file hashes.

    The evaluation cache key, the benchmark cache key and the modelcar's
    ``io.shipyard.model.digest`` annotation are all this digest of :func:`tree_files`.
    """
    import json

    hashes = {rel: sha256_file(path) for rel, path in files}
    text = json.dumps(hashes, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest(), hashes
