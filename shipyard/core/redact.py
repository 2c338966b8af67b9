"""One redaction for every message, log line and rendered object: credentials are never shown.

:func:`redact` replaces, in any text:

* the whole userinfo of any URI or registry reference, user name included (a token is often the
  user name: ``https://TOKEN@host``, ``https://TOKEN:x-oauth-basic@host``), in every scheme
  (``http``, ``https``, ``s3``, ``oci``, ``hf``, MLflow's ``postgresql`` ...) and in the scheme-less
  ``registry=user:pass@quay.io`` form: ``https://***@host``. Every character RFC 3986 allows in a
  userinfo counts (``'``, ``%``-escapes, ``!$&()*+,;=``, ``:``), and so do the raw ``/``, ``@``,
  ``?`` and ``#`` people paste into passwords;
* ``Bearer``/``Basic`` credentials and ``Authorization:`` header values;
* ``Cookie:``/``Set-Cookie:`` values and ``--cookie``/``--token`` option values;
* AWS access key ids (``AKIA...``/``ASIA...``), well-known API token formats (``hf_...``,
  ``ghp_...``, ``glpat-...``, JWTs ...: :func:`looks_like_token`), and the value of any
  ``password=``, ``secret=``, ``token=``, ``aws_secret_access_key=`` ... pair (also as
  ``"key": "value"`` in JSON/YAML), and presigned-URL signatures (``X-Amz-Signature=``).

Linear in the length of the text, by construction: the text is searched with ``str.find`` /
``bytes.find`` for the few fixed strings a credential starts with (``@``, ``token``, ``Bearer``,
``AKIA`` ...), and each pattern is tried only where one is found, anchored there; an attempt
reads a bounded keyword and then only characters it consumes (a value, a word), and the next
attempt starts after them. There is no search that restarts at every character, so no work grows
with the square of a word's length: a 32,000-character word takes milliseconds and 10 MB of text
a fraction of a second (``tests/test_properties.py`` holds both); text dense with credentials costs a
few microseconds more per credential.

:func:`redact_obj` does the same for a rendered object (dicts, lists, strings), and
:class:`RedactingFilter` for log records. :func:`has_credentials` says whether a value would be
changed (:func:`shipyard.core.errors.refuse_credentials`, the up-front refusal of a credential in a
URI-like field, asks it) and :func:`looks_like_token` whether a value given for a *name* looks like
a credential. (:func:`shipyard.core.errors.header_value` checks a token or cookie before it becomes
an HTTP header.)

Pure Python with no shipyard imports, so every layer can use it.
"""

from __future__ import annotations

import heapq
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MASK = "***"

# --- the userinfo of a URI or a registry reference -------------------------------------------------
# A word ends at whitespace or at a character no URI holds ("<>" and the quote JSON strings end with).
_WORD_END = re.compile(r'[\s"<>]')
# where a scheme-less userinfo can start: after one of these (``registry=bob:pw@q``, ``(bob:pw@q``)
_USER_START = re.compile(r"['(),=\[\]{}/?&;|]")
_PATH_START = re.compile(r"[/?#]")
_DIGEST_AT = ("sha256:", "sha384:", "sha512:")
_HOSTLIKE = re.compile(r"(localhost|[\w-]+(\.[\w-]+)+|\[[0-9a-fA-F:.]+\])")

# --- keyed patterns: each is tried only where one of its keys (lowercase) is found --------------------
_HEADER = re.compile(r"(?i)\b(authorization|cookie|x-api-key|x-auth-token)(\s*[:=]\s*)([^\r\n'\"]+)")
_AUTH_SCHEME = re.compile(r"\b((?i:bearer)|Basic|Digest)(\s+)([A-Za-z0-9._~+/=:-]{4,})")
_OPTION = re.compile(r"(?i)(--(?:token|cookie|password|secret[\w-]{0,40}))(\s+|=)(?![(\[])"
                     r"(?!(?:or|and|to|is|the|a|with|FILE|TOKEN|COOKIE)\b)(\S+)")
_AWS_KEY_ID = re.compile(r"\b(AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,}\b")
# well-known API token formats (Hugging Face, GitHub, GitLab, Slack, OpenAI; a JWT): a prefix, 20
# letters or digits, the rest of the run
_TOKEN = re.compile(r"(?<![\w-])(?:(hf_|gh[oprsu]_|github_pat_|glpat-|xox[abprs]-|sk-(?:proj-|svcacct-)?)"
                    r"[A-Za-z0-9]{20}[A-Za-z0-9_-]*|(eyJ)[\w-]{10,}\.[\w-]{10,}\.[\w-]+)")
_SECRET_KEYS = (r"password|passwd|pwd|secret|secret[_-]?key|secret[_-]?access[_-]?key|aws[_-]?secret[_-]?access[_-]?key|"
                r"aws[_-]?session[_-]?token|session[_-]?token|access[_-]?token|refresh[_-]?token|id[_-]?token|api[_-]?key|"
                r"apikey|token|auth|client[_-]?secret|x-amz-signature|x-amz-credential|x-amz-security-token|signature")
# ``password=x``, ``"token": "x"``: a quoted value ends at its quote (at most 512 characters, so an
# unclosed quote is not read to the end); an unquoted one runs to a separator, a ``'`` included
# (``password=pa'ss``)
_PAIR = re.compile(rf"(?i)(?<![\w-])({_SECRET_KEYS})([\"']?)(\s*[:=]\s*)"
                   r"(?:(['\"])[^\r\n'\"]{1,512}(?=['\"])|([^\s\"&,;}\]]+))")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=_.-]+")
_SECRET_FIELD = re.compile(rf"(?i)^({_SECRET_KEYS}|cookie|authorization)$")


def _keep(*groups: int, quote: int = 0) -> Callable[[re.Match[str]], str]:
    """A replacement: the given groups, the optional ``quote`` group, then the mask."""
    return lambda m: "".join(m.group(g) or "" for g in (*groups, quote) if g) + MASK


#: (keys, pattern, replacement, whole word): the keys are lowercase; the pattern is tried where a
#: key starts or, with ``whole word``, where the word (letters, digits, ``_``, ``-``) holding it starts
#: (every secret key name holds one of the keys: ``aws_secret_access_key``, ``x-amz-signature``)
_KEYED: tuple[tuple[tuple[str, ...], re.Pattern[str], Callable[[re.Match[str]], str], bool], ...] = (
    (("authorization", "cookie", "x-api-key", "x-auth-token"), _HEADER, _keep(1, 2), False),
    (("bearer", "basic", "digest"), _AUTH_SCHEME, _keep(1, 2), False),
    (("--",), _OPTION, _keep(1, 2), False),
    (("akia", "asia", "aida", "aroa"), _AWS_KEY_ID, _keep(1), False),
    (("hf_", "gh", "glpat-", "xox", "sk-", "eyj"), _TOKEN, lambda m: f"{m.group(1) or m.group(2)}{MASK}", False),
    (("pass", "pwd", "secret", "token", "auth", "key", "signature", "credential"), _PAIR, _keep(1, 2, 3, quote=4),
     True),
)
#: the longest secret key name (``aws_secret_access_key``) and the bytes a key name is made of
_LONGEST_KEY = 24
_KEY_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")


def _last_at(text: str, end: int) -> int:
    """The last ``@`` before ``end`` that does not start an image digest (``@sha256:``), or -1."""
    at = text.rfind("@", 0, end)
    while at >= 0 and text.startswith(_DIGEST_AT, at + 1):
        at = text.rfind("@", 0, at)
    return at


def _path(text: str) -> int:
    """Where the path (``/``, ``?`` or ``#``) of ``text`` starts (``len(text)`` when none)."""
    found = _PATH_START.search(text)
    return found.start() if found else len(text)


def _port_path(user: str, after_colon: str) -> bool:
    """``quay.io:5000/org/m@sha256:...``: a host, a port and a path, nothing secret."""
    port, slash, _ = after_colon.partition("/")
    return bool(slash or not after_colon) and port.isascii() and port.isdigit() and len(port) <= 5 \
        and _HOSTLIKE.fullmatch(user) is not None


def _bare(text: str) -> str:
    """A scheme-less ``user:password@host`` (``registry=bob:pw@quay.io``): from the start of the
    user name to the last ``@``, when a ``:`` comes before it."""
    at = _last_at(text, len(text))
    colon = text.find(":", 0, at) if at > 0 else -1
    if colon < 0:
        return text
    before = _USER_START.search(text[colon - 1::-1]) if colon else None
    start = colon - before.start() if before else 0
    if start < colon and text[start] in "'\"":
        start += 1
    if at <= start or _port_path(text[start:colon], text[colon + 1:at]):
        return text
    return f"{text[:start]}{MASK}{text[at:]}"


def _authority(rest: str) -> str:
    """What follows a ``scheme://`` (up to the next one) with its userinfo, if any, masked."""
    first_at = rest.find("@")
    if first_at < 0:
        return rest
    path = _path(rest)
    if first_at < path:  # a userinfo before the host; a raw "@" in the password runs to the last one
        end = rest.rfind("@", 0, path)
    else:  # "@" only after a "/": a password with a raw "/" ("s3://KEY:SE/CRET@bucket"), or a path
        host_end = rest.find("]") + 1 if rest.startswith("[") else 0
        colon = rest.find(":", host_end, path)
        if colon < 0 or _port_path(rest[:colon], rest[colon + 1:path + 1]):
            return rest[:path] + _bare(rest[path:])
        end = _last_at(rest, len(rest))
    if end <= 0:  # "http://@host", or only a digest: nothing to hide
        return rest[:path] + _bare(rest[path:])
    tail = rest[end:]
    cut = _path(tail)
    return MASK + tail[:cut] + _bare(tail[cut:])


def _word(word: str) -> str:
    """One word (no whitespace) with every userinfo in it masked."""
    parts = word.split("://")
    return "://".join([_bare(parts[0]), *map(_authority, parts[1:])])


def _userinfo(text: str) -> str:
    """Every word holding an ``@``, with its userinfo masked; the other words are not read twice."""
    out: list[str] = []
    done = 0
    at = text.find("@")
    while at >= 0:
        before = _WORD_END.search(text[at - 1:done - 1 if done else None:-1]) if at > done else None
        start = at - before.start() if before else done
        found = _WORD_END.search(text, at)
        end = found.start() if found else len(text)
        out += [text[done:start], _word(text[start:end])]
        done = end
        at = text.find("@", end)
    return "".join(out) + text[done:] if out else text


def _starts(low: bytes, keys: Iterable[str]) -> Iterable[int]:
    """Where any of ``keys`` starts in ``low``, in order (one ``find`` scan per key, then merged)."""
    def each(key: bytes) -> Iterable[int]:
        i = low.find(key)
        while i >= 0:
            yield i
            i = low.find(key, i + 1)
    return heapq.merge(*(each(k.encode()) for k in keys))


def _word_start(low: bytes, i: int, done: int) -> int:
    """The start of the key name around ``low[i]`` (-1 when it is longer than any secret key's)."""
    j, lowest = i, max(done, i - _LONGEST_KEY)
    while j > lowest and low[j - 1] in _KEY_BYTES:
        j -= 1
    return -1 if j == lowest and j > done and low[j - 1] in _KEY_BYTES else j


def _keyed(text: str, low: bytes, keys: Iterable[str], pattern: re.Pattern[str],
           replace: Callable[[re.Match[str]], str], whole_word: bool) -> str:
    """``pattern`` replaced where it matches at the start of one of ``keys`` (after the last match)."""
    out: list[str] = []
    done, tried = 0, -1
    for i in _starts(low, keys):
        if i < done:
            continue
        if whole_word:
            i = _word_start(low, i, done)
            if i < 0 or i == tried:
                continue
            tried = i
        m = pattern.match(text, i)
        if m is None:
            continue
        out += [text[done:i], replace(m)]
        done = m.end()
    return "".join(out) + text[done:] if out else text


def _lower(text: str) -> bytes:
    """``text`` with ASCII letters lowercased, one byte per character (so indexes stay the same)."""
    return text.encode("latin-1", "replace").lower()


def looks_like_token(text: str) -> bool:
    """Whether ``text`` looks like a credential: anything :func:`redact` hides (a userinfo, an AWS
    key id, a well-known API token such as ``hf_...``, ``ghp_...``, ``glpat-...``, a JWT), or one run
    of 32 or more base64 characters mixing upper case, lower case and digits (a Secret or variable
    name is not random; a hex digest has one case). For the fields that hold a *name* (a Secret's, an
    environment variable's) and plain-text values: such a value is refused without being shown."""
    word = (text or "").strip()
    if has_credentials(word):
        return True
    return len(word) >= 32 and _BASE64_RUN.fullmatch(word) is not None and any(c.isdigit() for c in word) \
        and any(c.islower() for c in word) and any(c.isupper() for c in word)


def has_credentials(text: str) -> bool:
    """Whether :func:`redact` would hide anything in ``text``."""
    return bool(text) and redact(text) != text


def redact(text: str) -> str:
    """``text`` with every credential it holds replaced by ``***`` (see the module docstring):
    userinfo, header and option values, tokens and secret pairs. Linear in ``len(text)``."""
    if not text:
        return text
    if "@" in text:
        text = _userinfo(text)
    low = _lower(text)
    for keys, pattern, replace, whole_word in _KEYED:
        shown = _keyed(text, low, keys, pattern, replace, whole_word)
        if shown is not text:
            text, low = shown, _lower(shown)
    return text


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
