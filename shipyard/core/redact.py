"""One redaction for every message, log line and rendered object: credentials are never shown.

:func:`redact` replaces, in any text:

* the password of the userinfo of any URI or registry reference (``https://user:pass@host``,
  ``s3://KEY:SECRET@bucket/m``, ``registry=user:pass@quay.io``), including a password that holds
  ``/``, ``@`` or ``:`` (everything up to the last ``@`` of the word is userinfo);
* ``Bearer``/``Basic`` credentials and ``Authorization:`` header values;
* ``Cookie:``/``Set-Cookie:`` values and ``--cookie``/``--token`` option values;
* AWS access key ids (``AKIA...``/``ASIA...``), and the value of any ``password=``, ``secret=``,
  ``token=``, ``aws_secret_access_key=`` ... pair (also as ``"key": "value"`` in JSON/YAML), and
  presigned-URL signatures (``X-Amz-Signature=``).

:func:`redact_obj` does the same for a rendered object (dicts, lists, strings), and
:class:`RedactingFilter` for log records. (:func:`shipyard.core.errors.header_value` checks a
token or cookie before it becomes an HTTP header.)

Pure Python with no shipyard imports, so every layer can use it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# The userinfo of a URI: after ``scheme://`` or at the start of a word (``registry=bob:pw@host``).
# The password runs to the LAST ``@`` of the word, so ``/``, ``@`` and ``:`` inside it stay hidden.
_USERINFO = re.compile(
    r"(?P<pre>[A-Za-z][\w+.-]*://|(?<![^\s'\"(=,<\[{]))"
    r"(?P<user>[^\s/:@'\"(),=<>\[\]{}]*):(?!//)(?P<pw>[^\s'\"<>]*)@(?P<rest>[^\s'\"@<>]*)"
)
# ``host:5000/repo@sha256:...`` is a port and a path, not a password
_PORT_PATH = re.compile(r"\d{1,5}(/|$)")
_HOSTLIKE = re.compile(r"^(localhost|[\w-]+(\.[\w-]+)+|\[[0-9a-fA-F:]+\])$")
_AUTH_SCHEME = re.compile(r"\b((?i:bearer)|Basic|Digest)(\s+)([A-Za-z0-9._~+/=:-]{4,})")
_HEADER = re.compile(r"(?i)\b(authorization|proxy-authorization|cookie|set-cookie|x-api-key|x-auth-token)"
                     r"(\s*[:=]\s*)([^\r\n'\"]+)")
_OPTION = re.compile(r"(?i)(--(?:token|cookie|password|secret[\w-]*))(\s+|=)(?![(\[])(?!(?:or|and|to|is|the|a|with|FILE|TOKEN|COOKIE)\b)(\S+)")
_AWS_KEY_ID = re.compile(r"\b(AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,}\b")
_SECRET_KEYS = (r"password|passwd|pwd|secret|secret[_-]?key|secret[_-]?access[_-]?key|aws[_-]?secret[_-]?access[_-]?key|"
                r"aws[_-]?session[_-]?token|session[_-]?token|access[_-]?token|refresh[_-]?token|id[_-]?token|api[_-]?key|"
                r"apikey|token|auth|client[_-]?secret|x-amz-signature|x-amz-credential|x-amz-security-token|signature")
_PAIR = re.compile(rf"(?i)(?<![\w-])([\"']?)({_SECRET_KEYS})\1(\s*[:=]\s*)([\"']?)([^\s\"'&,;}}\]]+)")
_SECRET_FIELD = re.compile(rf"(?i)^({_SECRET_KEYS}|cookie|authorization)$")


def _userinfo(match: re.Match[str]) -> str:
    user, pw = match.group("user"), match.group("pw")
    if _PORT_PATH.match(pw) and _HOSTLIKE.match(user) and "@" not in pw.split("/", 1)[0]:
        # ``quay.io:5000/org/m@sha256:...``: a host, a port and a path, nothing secret
        return match.group(0)
    return f"{match.group('pre')}{user}:{MASK}@{match.group('rest')}"


def redact(text: str) -> str:
    """``text`` with every credential it holds replaced by ``***`` (see the module docstring)."""
    if not text:
        return text
    text = _USERINFO.sub(_userinfo, text)
    text = _HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _OPTION.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _AWS_KEY_ID.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return _PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{MASK}", text)


def redact_obj(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, strings) with every credential replaced: values under a
    secret-sounding key (``password``, ``token``, ``cookie``...) entirely, other strings by :func:`redact`."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {k: (MASK if isinstance(k, str) and _SECRET_FIELD.match(k) and obj[k] not in (None, "")
                    else redact_obj(obj[k])) for k in obj}
    if isinstance(obj, list | tuple):
        return [redact_obj(v) for v in obj]
    return obj


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record's message through :func:`redact`."""

    def filter(self, record: logging.LogRecord) -> bool:
        _clean(record)
        return True


def _clean(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed record: logging's own error path reports it
        return
    cleaned = redact(message)
    if cleaned != message:
        record.msg, record.args = cleaned, None


_installed = False


def install_log_redaction() -> None:
    """Redact every log record this process creates, whichever logger or handler takes it (the
    record factory is wrapped once), so a library's log line never shows a credential."""
    global _installed
    if _installed:
        return
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        _clean(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
