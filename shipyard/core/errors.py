"""One error type for bad input and faults: a single line naming the field and the fix.

The command line maps errors to these exit codes (README, "CLI"):

==== ===========================================================================
code meaning
==== ===========================================================================
0    success
1    the command ran and said no: a run or gate failed, a plan does not fit, a
     manifest is invalid
2    bad input or usage: a :class:`ShipyardError`, an unknown flag, a file that
     cannot be read or written
3    an external service is unreachable (the KFP host, the Kubernetes API, a
     registry): a :class:`UnreachableError`
4    ``shipyard watch --requalify``: drifted, and the re-qualification run could
     not be submitted to KFP (the verdict is printed; the error is one line)
70   an internal error (a bug): one line; ``SHIPYARD_DEBUG=1`` shows the traceback
130  interrupted (Ctrl-C)
141  stdout was closed early (``shipyard plan -o json | head -1``), as a process
     killed by SIGPIPE reports it in a shell
==== ===========================================================================
"""

from __future__ import annotations

import errno
import os
from typing import Any

from shipyard.core.redact import has_credentials, looks_like_token, redact

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_SUBMITTED = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

#: the longest error line printed: a 10 MB value never becomes a 10 MB line
MAX_LINE = 1000


def cap_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` cut to ``limit`` characters, keeping its start and its end (the fix)."""
    if len(text) <= limit:
        return text
    keep = limit - 40
    return f"{text[: keep * 2 // 3]} ...[{len(text) - keep} characters cut]... {text[-(keep // 3):]}"


def header_value(value: str | None, field: str) -> str | None:
    """A token or cookie made ready for an HTTP header: surrounding whitespace (the trailing
    ``\\r\\n`` of a token file saved on Windows) stripped; empty is None; a control character or
    text HTTP headers cannot carry inside it is one line naming ``field``, never the value."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    bad = next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7F or ord(c) > 0xFF), None)
    if bad is not None:
        what = f"a control character (U+{ord(bad):04X})" if ord(bad) <= 0x7F else "a character HTTP headers cannot carry"
        raise ShipyardError(field, f"holds {what} (the value is not shown)",
                            "save the token or cookie as one line of plain text, e.g. with `tr -d '\\r\\n'`")
    return text


#: the fix a credential in a URI-like field gets when its field has no more precise one
CREDENTIALS_FIX = ("drop the user name, password or token from it and give them through a Kubernetes Secret or "
                   "an environment variable")


def refuse_credentials(value: Any, field: str, fix: str = CREDENTIALS_FIX) -> None:
    """The one up-front check of a URI-like value (a URL, a model or adapter URI, an image reference,
    a dataset source): a credential in it -- a userinfo, with or without a password
    (``https://TOKEN@host``), a token or signature in the query, a known API token -- is refused as
    one line naming ``field`` and the fix, never showing the value (see
    :func:`shipyard.core.redact.has_credentials`: the same rule the redaction of every output uses)."""
    if not isinstance(value, str) or not has_credentials(value.strip()):
        return
    text = value.strip()
    scheme, sep, _ = text.partition("://")
    what = f"{scheme}://..." if sep and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum() \
        and len(scheme) <= 20 else "the value"
    raise ShipyardError(field, f"{what} carries credentials (not shown)", fix)


def shown(value: Any, limit: int = 120) -> str:
    """``value`` as an error line quotes it (``repr``, cut to ``limit`` characters), or "(a value that
    looks like a credential, not shown)": for a field that holds a *name* (a Secret's, a
    ServiceAccount's, an environment variable's), where a pasted token must not be echoed."""
    if isinstance(value, str) and looks_like_token(value):
        return "(a value that looks like a credential, not shown)"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ShipyardError(Exception):
    """An error a user can act on.

    ``field`` names the parameter, file or service at fault and ``fix`` says what to do.
    The CLI and the KFP step wrappers print ``str(err)`` as one line, never a traceback.
    Credentials (URI userinfo, tokens, cookies, keys) are never echoed: the line goes through
    :func:`shipyard.core.redact.redact`, and it is capped at :data:`MAX_LINE` characters.
    """

    #: the CLI's exit status for this error (see the module docstring)
    exit_code = EXIT_USAGE

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    @classmethod
    def from_line(cls, line: str) -> ShipyardError:
        """Rebuild an error from its one-line form (as it crossed a process boundary)."""
        field, _, rest = line.partition(": ")
        problem, _, fix = rest.partition(" (fix: ")
        return cls(field, problem, fix[:-1] if fix.endswith(")") else fix)

    def one_line(self) -> str:
        text = f"{self.field}: {self.problem}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return cap_line(redact(" ".join(text.split())))


class UnreachableError(ShipyardError):
    """An external service (KFP, a registry, MLflow, the Kubernetes API) cannot be reached: exit 3."""

    exit_code = EXIT_UNREACHABLE


class FileError(ShipyardError, OSError):
    """A file or folder that cannot be read or written, as one line.

    It is also an :class:`OSError` (with ``errno`` and ``filename``), so code that catches
    ``OSError`` around a write keeps working.
    """

    def __init__(self, field: str, problem: str, fix: str = "", *, err_no: int | None = None,
                 filename: str | None = None) -> None:
        super().__init__(field, problem, fix)
        self.errno = err_no
        self.filename = filename

    def __str__(self) -> str:
        return self.one_line()


_FIXES = {
    errno.ENOSPC: "free space on that filesystem or choose another folder",
    errno.EDQUOT: "free space within your quota or choose another folder",
    errno.EROFS: "the filesystem is read-only: choose a writable folder",
    errno.EACCES: "choose a folder you can write to, or fix its permissions",
    errno.EPERM: "choose a folder you can write to, or fix its permissions",
    errno.ENOENT: "create the parent folder first or fix the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: fix the path",
    errno.EISDIR: "the path is a folder: give a file name",
    errno.EEXIST: "remove it or choose another path",
    errno.ENAMETOOLONG: "use a shorter path",
}


def file_error(err: OSError, field: str = "", path: str | os.PathLike[str] | None = None,
               action: str = "write") -> FileError:
    """An :class:`OSError` from the filesystem as a one-line :class:`FileError`.

    ``field`` names the option or parameter that gave the path (``--out-file``); by default the
    path itself is the field. Disk full (``ENOSPC``) and read-only filesystems say so plainly.
    """
    target = str(path if path is not None else (err.filename or ""))
    reason = os.strerror(err.errno) if err.errno else (str(err) or type(err).__name__)
    if not target:
        problem = (reason or "error").lower() if err.errno else f"cannot {action} a file: {reason}"
        if err.errno == errno.ENOSPC:
            problem = "no space left on the device"
    elif err.errno == errno.ENOSPC:
        problem = f"no space left on the device to {action} {target}"
    elif err.errno == errno.EROFS:
        problem = f"cannot {action} {target}: read-only file system"
    else:
        problem = f"cannot {action} {target}: {reason.lower() if reason else 'error'}"
        failing = err.filename and str(err.filename) != target
        if failing:
            problem += f" ({err.filename})"
    return FileError(field or target or "file", problem, _FIXES.get(err.errno or 0, "check the path"),
                     err_no=err.errno, filename=target or None)
