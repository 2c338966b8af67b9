"""Strict reading of JSON and YAML values and files: one-line errors, never a silent surprise.

* :func:`load_json` and :func:`load_yaml` refuse a key given twice (``{"dry_run": true,
  "dry_run": false}``: the last would win with no word), name the key, and turn too-deep nesting
  (100k ``[``), YAML alias bombs (a few hundred bytes that expand to millions of nodes) and
  non-finite JSON numbers (``NaN``, ``Infinity``) into one :class:`ShipyardError` line.
* :func:`read_text` reads a user's file: UTF-8 (a BOM is dropped), UTF-16 with a BOM (as
  PowerShell writes it); a binary file or another encoding is one line.
* :func:`json_object` reads the JSON-object parameters (eval_config, slo, deploy_config ...): a
  JSON object, or the same mapping written as YAML (``{ttft_p99_ms: 800}``), as the README shows.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from shipyard.core.errors import ShipyardError

#: nodes a YAML document may expand to through aliases (a 200-byte alias bomb expands to 10^9)
MAX_YAML_NODES = 200_000
#: nesting depth of a JSON or YAML value
MAX_DEPTH = 200


def _show_key(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 60 else text[:56] + "...'"


def _no_duplicates(field: str, where: str = "") -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ShipyardError(field, f"{where}key {_show_key(key)} is given twice",
                                    "give each key once (the later value would silently win)")
            out[key] = value
        return out

    return hook


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of a parsed value, without recursion (stops counting past ``limit``)."""
    deepest, stack, seen = 0, [(value, 1)], set()
    while stack:
        item, level = stack.pop()
        if level > limit:
            return level
        if isinstance(item, dict | list):
            if id(item) in seen:
                continue
            seen.add(id(item))
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _too_deep(field: str) -> ShipyardError:
    return ShipyardError(field, f"is nested more than {MAX_DEPTH} levels deep", "flatten the value")


def load_json(text: str | bytes, field: str, where: str = "") -> Any:
    """``text`` as JSON: duplicate keys, ``NaN``/``Infinity`` and too-deep nesting are one line."""
    def constant(name: str) -> float:
        raise ShipyardError(field, f"{where}{name} is not a finite number", "write a finite number")

    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates(field, where), parse_constant=constant)
    except RecursionError:
        raise _too_deep(field) from None
    if _depth(value) > MAX_DEPTH:
        raise _too_deep(field)
    if not finite(value):  # 1e999 reads as inf
        raise ShipyardError(field, f"{where}holds a number too large to be finite (e.g. 1e999)", "write a finite number")
    return value


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (its C parser where built) that refuses duplicate keys and bounds
    alias expansion."""

    field = "value"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if duplicate:
                line = key_node.start_mark.line + 1
                raise ShipyardError(self.field, f"key {_show_key(key)} is given twice (line {line})",
                                    "give each key once (the later value would silently win)")
        return super().construct_mapping(node, deep=deep)

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _check_size(node, self.field)
        return node


def _check_size(root: yaml.Node, field: str) -> None:
    """Refuse a document whose aliases expand it past :data:`MAX_YAML_NODES` nodes or
    :data:`MAX_DEPTH` levels (each distinct node is sized once, so this is cheap)."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # post-order without recursion: children are sized before their parent
        node, ready = stack.pop()
        if id(node) in sizes:
            continue
        kids = _children(node)
        if not ready:
            stack.append((node, True))
            stack.extend((kid, False) for kid in kids if id(kid) not in sizes)
            if len(stack) > MAX_YAML_NODES:
                raise _too_deep(field)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
        depths[id(node)] = 1 + max((depths.get(id(k), 1) for k in kids), default=0)
        if sizes[id(node)] > MAX_YAML_NODES:
            raise ShipyardError(field, f"expands to more than {MAX_YAML_NODES} values through YAML aliases "
                                "(an alias bomb?)", "write the value out without nested aliases")
        if depths[id(node)] > MAX_DEPTH:
            raise _too_deep(field)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str, field: str, *, all_documents: bool = False) -> Any:
    """``text`` as YAML (JSON too) with :class:`_StrictLoader`: duplicate keys, alias bombs and
    too-deep nesting are one line naming ``field``; a syntax error is left to the caller
    (:class:`yaml.YAMLError`). ``all_documents`` returns the list of every document."""
    loader_class = type("Loader", (_StrictLoader,), {"field": field})
    loader = loader_class(text)
    try:
        if all_documents:
            docs = []
            while loader.check_data():
                docs.append(loader.get_data())
            return docs
        return loader.get_single_data()
    except RecursionError:
        raise _too_deep(field) from None
    except yaml.YAMLError as err:
        if "maximum nesting depth" in str(err):  # libyaml's own bound (the C parser)
            raise _too_deep(field) from None
        raise
    finally:
        loader.dispose()


#: the most a user's text file (params file, template, recipe, golden outputs) may hold: far above
#: any real one, and a bound on the work a wrong path (a log, a model file) can cause
MAX_TEXT_BYTES = 8 * 1024 * 1024


def _read_bounded(path: str | Path, field: str) -> bytes:
    """The bytes of a regular file (or of standard input for ``-``), at most :data:`MAX_TEXT_BYTES`.

    A pipe, device or socket is refused before it is opened (reading one can wait forever); a
    folder raises :class:`IsADirectoryError` and a missing path :class:`FileNotFoundError`, as
    reading it would, for the caller's own one-line message."""
    if str(path) == "-":
        data = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
    else:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise ShipyardError(field, f"{path} is not a regular file (a pipe, device or socket: reading it could "
                                "wait forever)", "give a regular file, or - to read standard input")
        if info.st_size > MAX_TEXT_BYTES:
            raise ShipyardError(field, f"{path} holds {info.st_size / 2**20:.0f} MiB, more than the "
                                f"{MAX_TEXT_BYTES // 2**20} MiB shipyard reads from a text file",
                                "give the right file (params files and templates are a few KB)")
        with open(path, "rb") as fh:
            data = fh.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise ShipyardError(field, f"{path} holds more than the {MAX_TEXT_BYTES // 2**20} MiB shipyard reads from a "
                            "text file", "give the right file (params files and templates are a few KB)")
    return data


def read_text(path: str | Path, field: str) -> str:
    """A user's text file (``-``: standard input): UTF-8 (BOM dropped) or UTF-16 with a BOM; a
    binary file, another encoding, a pipe or device, a file over :data:`MAX_TEXT_BYTES` or an
    unreadable path is one line naming ``field``."""
    return decode_text(_read_bounded(path, field), path, field)


def read_user_bytes(path: str | Path, field: str, thing: str) -> bytes:
    """The bytes of the user's file at ``path`` (:func:`read_text`'s bounds), a missing path, a folder
    or an unreadable file being one line naming ``field`` and what to give (``thing``, e.g.
    "YAML/JSON file")."""
    shown = str(path) if len(str(path)) <= 200 else str(path)[:197] + "..."
    try:
        return _read_bounded(path, field)
    except FileNotFoundError:
        raise ShipyardError(field, f"{shown} does not exist", f"give an existing {thing}") from None
    except IsADirectoryError:
        raise ShipyardError(field, f"{shown} is a folder", f"give a {thing}") from None
    except OSError as err:
        raise ShipyardError(field, f"cannot read {shown}: {err.strerror or err}", f"give a readable {thing}") from None


def read_user_file(path: str | Path, field: str, thing: str) -> str:
    """The user's text file at ``path`` (:func:`read_text`), every problem one line naming ``field``
    (:func:`read_user_bytes`)."""
    return decode_text(read_user_bytes(path, field, thing), path, field)


def decode_text(data: bytes, path: str | Path, field: str) -> str:
    """A user's file's bytes as text: UTF-8 (BOM dropped) or UTF-16 with a BOM; anything else is one line."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise ShipyardError(field, f"{path} starts like UTF-16 but does not decode as UTF-16",
                                "save it as UTF-8") from None
    if b"\0" in data:
        raise ShipyardError(field, f"{path} is a binary file, not text", "give a YAML or JSON text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ShipyardError(field, f"{path} is not UTF-8 text (byte {err.start})", "save it as UTF-8") from None


def load_mapping_file(path: str | Path, field: str) -> dict[str, Any]:
    """A YAML or JSON file holding one mapping (``--params-file``): strict (:func:`load_yaml`),
    decoded by :func:`read_text`; empty is ``{}``; every problem is one line naming ``field``."""
    text = read_user_file(path, field, "YAML/JSON file")
    try:
        data = load_yaml(text, field)
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ShipyardError(field, f"{path} is not valid YAML/JSON ({first})", "fix its syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ShipyardError(field, f"{path} is not a mapping of names to values", "write name: value lines")
    bad = next((k for k in data if not isinstance(k, str)), None)
    if bad is not None:
        raise ShipyardError(field, f"{path} has a key that is not a name ({_show_key(bad)})", "write name: value lines")
    return data


def finite(value: Any) -> bool:
    """Whether every number inside ``value`` (dicts, lists) is finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return True


def json_object(value: str | Mapping[str, Any] | None, field: str, example: str) -> dict[str, Any]:
    """``value`` as a dict: empty or None is ``{}``, a mapping is copied, a string must be a JSON
    object, or the same mapping written as YAML (``{ttft_p99_ms: 800}``). A key given twice is an
    error. ``example`` goes into the fix of the error, e.g. ``{"min_recovery": 0.99}``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str):
        raise ShipyardError(field, f"must be a JSON object, got {type(value).__name__}", f"pass e.g. {example}")
    try:
        data = load_json(value, field)
    except json.JSONDecodeError as err:
        try:
            data = load_yaml(value, field) if value.lstrip().startswith("{") else None
        except yaml.YAMLError:
            data = None
        if not isinstance(data, dict):
            raise ShipyardError(field, f"is not valid JSON ({err.msg} at char {err.pos})",
                                f"pass a JSON object, e.g. {example}") from None
    if not isinstance(data, dict):
        raise ShipyardError(field, f"must be a JSON object, got {type(data).__name__}", f"pass e.g. {example}")
    if not finite(data):
        raise ShipyardError(field, "holds a number that is not finite (.inf, .nan, 1e999)", "write finite numbers")
    return data


#: the names pydantic puts in an error's location for the members of a union, not fields
_UNION_TAGS = frozenset({"function-before", "function-after", "function-wrap", "function-plain", "int", "float", "str",
                         "bool", "none", "list", "dict", "constrained-str", "constrained-int", "constrained-float"})


def validation_error(field: str, err: Any, example: str = "") -> ShipyardError:
    """A pydantic ``ValidationError`` (duck-typed: anything with ``errors()``) as one line: the
    field path (``eval_config.limit``), the problem and the fix. Unknown keys are listed together;
    a validator may give its own fix after a ``|`` in its message."""
    errors = err.errors()
    extra = [e for e in errors if e.get("type") == "extra_forbidden"]

    def where(loc: tuple[Any, ...]) -> str:
        parts = [field]
        for part in loc:
            if isinstance(part, int):
                parts[-1] += f"[{part}]"
            elif part not in _UNION_TAGS and "[" not in str(part):
                parts.append(str(part))
        return ".".join(parts)

    if extra:
        parent = tuple(extra[0]["loc"][:-1])
        names = sorted(str(e["loc"][-1]) for e in extra if tuple(e["loc"][:-1]) == parent)
        return ShipyardError(where(parent), f"unknown key(s) {names}", f"see the parameter's description; e.g. {example}")
    first = errors[0]
    shown = repr(first.get("input"))
    shown = shown if len(shown) <= 60 else shown[:56] + "..."
    kind = str(first.get("type", ""))
    msg = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
    problem, _, fix = msg.partition("|")
    if kind == "finite_number":
        problem = f"must be a finite number, got {shown}"
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        problem = f"must be a whole number, got {shown}"
    elif kind in ("float_type", "float_parsing"):
        problem = f"must be a number, got {shown}"
    elif kind in ("bool_type", "bool_parsing"):
        problem, fix = f"must be true or false, got {shown}", fix or "use a JSON boolean"
    elif kind in ("string_type",):
        problem = f"must be text, got {shown}"
    elif kind in ("list_type",):
        problem = f"must be a list, got {shown}"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        problem = f"must be an object, got {shown}"
    elif kind.startswith(("greater_than", "less_than")):
        problem = f"{msg.replace('Input should be', 'must be')}, got {shown}"
    elif kind == "literal_error":
        problem = f"must be {first.get('ctx', {}).get('expected', 'one of the listed values')}, got {shown}"
    return ShipyardError(where(tuple(first.get("loc", ()))), problem, fix or (f"e.g. {example}" if example else "fix the value"))
