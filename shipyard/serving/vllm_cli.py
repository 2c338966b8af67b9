"""vLLM's own command line as data: every flag ``vllm serve`` reads, whether it takes a value, and
the values it allows where vLLM lists them, so a user's vLLM arguments are checked at the
pre-flight and in the CLI by vLLM's rules without importing vLLM.

Importing vLLM's parser costs seconds (45 s wall on a loaded 2-core machine) and the base image,
where the pre-flight runs, has no vLLM. So the table (``vllm_cli.json`` beside this module) is
written from vLLM's parser itself in the vllm runtime (``python -m shipyard.serving.vllm_cli``:
the parser of ``vllm serve``, EngineArgs' flags and the OpenAI server's), and
``tests/test_vllm_cli.py`` builds it again there and fails when it differs (a new vLLM). Reading
it costs milliseconds.

:func:`check_vllm_args` refuses, with one line naming the field, what vLLM's parser would refuse
at start-up after the GPU work: a flag vLLM does not have (in any spelling it reads: ``_`` for
``-``, ``--flag=value``, an abbreviation, a short alias with its value attached, a JSON flag's
``.key``), an abbreviation that matches several flags, a flag without its value, a value to a flag
that takes none, and a value outside a flag's choices (``--kv-cache-dtype fp9``). Values vLLM
converts with its own functions (numbers, JSON) are left to vLLM.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from functools import cache
from typing import Any

from shipyard.core.errors import ShipyardError, shown
from shipyard.core.files import package_dir

TABLE = "vllm_cli.json"
_NUMBER = re.compile(r"-\.?\d")


def parser_table() -> dict[str, Any]:
    """The table from vLLM's parser of ``vllm serve`` (run in the vllm runtime)."""
    import vllm
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:  # argparse keeps no public list of its options
        for option in action.option_strings:
            takes = action.nargs != 0
            entry: dict[str, Any] = {"value": takes if action.nargs in (None, 1) or not takes else str(action.nargs)}
            if takes and action.choices is not None and all(isinstance(c, str) for c in action.choices):
                entry["choices"] = sorted(action.choices)
            flags[option] = entry
    return {"vllm": vllm.__version__, "allow_abbrev": bool(parser.allow_abbrev), "flags": dict(sorted(flags.items()))}


@cache
def table() -> dict[str, Any]:
    """The table shipped with shipyard (:data:`TABLE`)."""
    return json.loads((package_dir("shipyard.serving") / TABLE).read_text())  # type: ignore[no-any-return]


def _resolve(name: str, flags: dict[str, Any], abbrev: bool) -> tuple[str | None, str | None, list[str]]:
    """(the flag, a value attached to a short alias, the flags an abbreviation matches)."""
    if name in flags:
        return name, None, []
    if name.startswith("--"):
        hits = sorted(f for f in flags if f.startswith(name)) if abbrev else []
        return (hits[0], None, []) if len(hits) == 1 else (None, None, hits)
    if name[:2] in flags and flags[name[:2]]["value"] is True:  # -qfp8: a one-letter alias and its value
        return name[:2], name[2:], []
    hits = sorted(f for f in flags if not f.startswith("--") and f.startswith(name)) if abbrev else []
    return (hits[0], None, []) if len(hits) == 1 else (None, None, hits)


def check_vllm_args(args: Iterable[Any], field: str) -> None:
    """Raise one line naming ``field`` for the first argument of ``args`` (a command line's words)
    that vLLM's parser would refuse (see the module docstring)."""
    data = table()
    flags: dict[str, Any] = data["flags"]
    words = [str(a).strip() for a in args]
    version = f"vLLM {data['vllm']}"
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if len(word) < 2 or not word.startswith("-") or _NUMBER.match(word):
            raise ShipyardError(field, f"{shown(word, 60)} is neither a flag of {version} nor the value of one "
                                "(vLLM would stop on it: unrecognized arguments)",
                                "drop it, or give the flag it belongs to (a flag like --enforce-eager takes no value)")
        if word.startswith("-O") and word != "-O":  # vLLM's own spelling: -O3, -O=3, -Odecode
            word = "--optimization-level=" + (word[3:] if word[2] == "=" else word[2:])
        elif word == "-O" and i < len(words) and words[i] in ("0", "1", "2", "3"):
            word = "--optimization-level"
        name, eq, attached = word.partition("=")
        dotted = "." in name
        name = name.split(".", 1)[0]
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        flag, glued, hits = _resolve(name, flags, data["allow_abbrev"])
        if flag is None:
            problem = (f"{shown(word, 60)} is ambiguous in {version}: it could be {', '.join(hits[:4])}" if hits
                       else f"{shown(word, 60)} is not a flag of {version}")
            raise ShipyardError(field, problem, "write the flag as `vllm serve --help` lists it")
        spec = flags[flag]
        if dotted:  # a key of a JSON flag (--compilation-config.mode 3): its value is vLLM's to read
            if not eq and i < len(words) and not (words[i].startswith("-") and not _NUMBER.match(words[i])):
                i += 1
            continue
        if spec["value"] is False:
            if eq:
                raise ShipyardError(field, f"{shown(word, 60)}: {flag} takes no value in {version}",
                                    f"write {flag} alone (or leave it out)")
            continue
        value: str | None = attached if eq else glued
        if value is None and spec["value"] is True:
            if i >= len(words) or (words[i].startswith("-") and not _NUMBER.match(words[i])):
                raise ShipyardError(field, f"{flag} needs a value in {version}", f"write {flag} VALUE")
            value = words[i]
            i += 1
        elif value is None:  # nargs ?, *, +: the values up to the next flag
            while i < len(words) and not (words[i].startswith("-") and not _NUMBER.match(words[i])):
                i += 1
        choices = spec.get("choices")
        if choices and value is not None and value not in choices:
            raise ShipyardError(field, f"{flag} {shown(value, 60)} is not one of {version}'s values",
                                f"use one of {', '.join(choices)}")


def parser_verdicts(lines: list[list[str]]) -> list[str]:
    """What vLLM's parser of ``vllm serve`` makes of each command line (run in the vllm runtime):
    ``"ok"``, or ``"error: "`` and its message. The slow test compares :func:`check_vllm_args` with it."""
    import contextlib
    import io

    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    out: list[str] = []
    for line in lines:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_args(["model", *line])
            out.append("ok")
        except BaseException as exc:  # noqa: BLE001 - argparse exits on a bad argument
            out.append("error: " + (err.getvalue().strip().splitlines() or [repr(exc)])[-1])
    return out


def mapping_words(flags: dict[str, Any]) -> list[str]:
    """A ``{flag: value}`` mapping (``deploy_config.vllm_args``) as the words the deployment passes
    (:func:`shipyard.serving.kserve.render.vllm_arguments`: ``--flag value``, ``True`` a bare flag,
    ``False``/``None`` left out, a mapping or a list as JSON)."""
    words: list[str] = []
    for flag, value in flags.items():
        if value is False or value is None:
            continue
        words.append("--" + str(flag).strip().lstrip("-").replace("_", "-"))
        if value is not True:
            words.append(json.dumps(value, separators=(",", ":")) if isinstance(value, dict | list) else str(value))
    return words


def main() -> int:
    """``python -m shipyard.serving.vllm_cli [PATH]``: write the table from vLLM's parser (the
    vllm runtime), to the package's :data:`TABLE` by default."""
    target = sys.argv[1] if len(sys.argv) > 1 else str(package_dir("shipyard.serving") / TABLE)
    text = json.dumps(parser_table(), indent=1) + "\n"
    with open(target, "w") as fh:
        fh.write(text)
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
