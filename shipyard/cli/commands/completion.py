"""``shipyard completion bash|zsh``: a shell completion script, generated from the CLI's own parser.

The script is data (subcommands, options, which options take a value and what values) read
from :func:`shipyard.cli.main.build_parser` when the command runs, so it cannot drift from the CLI.
zsh uses the same functions through ``bashcompinit``.

    source <(shipyard completion bash)        # or: shipyard completion bash > /etc/bash_completion.d/shipyard
    source <(shipyard completion zsh)         # in ~/.zshrc
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field

#: option destinations / metavars whose value is a path
_FILE_DESTS = {"out_file", "params_file", "cluster_config", "kubeconfig", "model", "files"}
_DIR_DESTS = {"out", "work_dir", "model_dir"}
_PATH_METAVARS = {"FILE": "@file", "PATH": "@file", "DIR": "@dir", "MODEL": "@file"}


@dataclass
class Node:
    """One (sub)command: its subcommands, options and what their values complete to."""

    subcommands: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)  # option string -> value spec
    positional: str = "@file"


def _value_spec(action: argparse.Action) -> str:
    if action.choices:
        return " ".join(str(c) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if action.dest in _DIR_DESTS or metavar == "DIR":
        return "@dir"
    if action.dest in _FILE_DESTS or metavar in _PATH_METAVARS:
        return _PATH_METAVARS.get(metavar, "@file")
    if action.dest == "pipeline":
        from shipyard.pipelines import PIPELINES

        return " ".join(sorted(PIPELINES)) + " @file"
    return "@none"


def walk(parser: argparse.ArgumentParser, path: str = "shipyard", tree: dict[str, Node] | None = None) -> dict[str, Node]:
    """Every command path (``"shipyard"``, ``"shipyard plan"``, ``"shipyard images build"``) of
    ``parser`` and its :class:`Node`."""
    tree = {} if tree is None else tree
    node = tree.setdefault(path, Node())
    positionals: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                node.subcommands.append(name)
                walk(sub, f"{path} {name}", tree)
            continue
        if action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            node.options += action.option_strings
            if action.nargs != 0:
                for opt in action.option_strings:
                    node.values[opt] = _value_spec(action)
        else:
            positionals.append(_value_spec(action))
    if positionals:
        node.positional = positionals[0]
    elif not node.subcommands:
        node.positional = "@none"
    return tree


def _assoc(name: str, items: dict[str, str]) -> str:
    body = "\n".join(f"    [{shlex.quote(k)}]={shlex.quote(v)}" for k, v in sorted(items.items()))
    return f"_shipyard_{name}=(\n{body}\n)"


#: the completion functions, the same for every parser: they read the arrays ``bash_script`` writes
_BASH_FUNCTIONS = r"""_shipyard_complete_values() {
    local spec="$1" cur="$2" w words=""
    for w in $spec; do
        case "$w" in
            @file) compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -f -- "$cur")) ;;
            @dir) compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -d -- "$cur")) ;;
            @none) ;;
            *) words="$words $w" ;;
        esac
    done
    if [ -n "$words" ]; then
        COMPREPLY+=($(compgen -W "$words" -- "$cur"))
    fi
}

_shipyard() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" path="shipyard" w i skip=0
    COMPREPLY=()
    if [ "$COMP_CWORD" -gt 0 ]; then prev="${COMP_WORDS[COMP_CWORD-1]}"; fi
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if [ "$skip" = 1 ]; then skip=0; continue; fi
        case "$w" in
            -*=*) continue ;;
            -*) if [ -n "${_shipyard_vals[$path|$w]+set}" ]; then skip=1; fi; continue ;;
        esac
        case " ${_shipyard_subs[$path]} " in
            *" $w "*) path="$path $w" ;;
        esac
    done
    if [ "$skip" = 1 ] && [ -n "${_shipyard_vals[$path|$prev]+set}" ]; then
        _shipyard_complete_values "${_shipyard_vals[$path|$prev]}" "$cur"
        return 0
    fi
    case "$cur" in
        --*=*)
            local opt="${cur%%=*}"
            if [ -n "${_shipyard_vals[$path|$opt]+set}" ]; then
                _shipyard_complete_values "${_shipyard_vals[$path|$opt]}" "${cur#*=}"
            fi
            return 0 ;;
        -*)
            COMPREPLY=($(compgen -W "${_shipyard_opts[$path]}" -- "$cur"))
            return 0 ;;
    esac
    if [ -n "${_shipyard_subs[$path]}" ]; then
        COMPREPLY=($(compgen -W "${_shipyard_subs[$path]}" -- "$cur"))
        return 0
    fi
    _shipyard_complete_values "${_shipyard_pos[$path]}" "$cur"
    return 0
}

complete -F _shipyard shipyard
"""


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion script for ``parser``."""
    tree = walk(parser)
    subs = {path: " ".join(n.subcommands) for path, n in tree.items() if n.subcommands}
    opts = {path: " ".join(n.options) for path, n in tree.items()}
    vals = {f"{path}|{opt}": spec for path, n in tree.items() for opt, spec in n.values.items()}
    pos = {path: n.positional for path, n in tree.items()}
    return f"""# shipyard completion for bash (and zsh through bashcompinit); generated by `shipyard completion`
# from the CLI's parser, so it lists exactly the commands and options this shipyard has.
typeset -A _shipyard_subs _shipyard_opts _shipyard_vals _shipyard_pos
{_assoc("subs", subs)}
{_assoc("opts", opts)}
{_assoc("vals", vals)}
{_assoc("pos", pos)}

""" + _BASH_FUNCTIONS


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """The zsh completion script: the bash one, through zsh's ``bashcompinit``."""
    return ("# shipyard completion for zsh (bash completion through bashcompinit)\n"
            "autoload -U +X compinit && compinit -u\n"
            "autoload -U +X bashcompinit && bashcompinit\n"
            + bash_script(parser))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                       description="bash: source <(shipyard completion bash)   zsh: source <(shipyard completion zsh)")
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell")
    p.set_defaults(func=_completion)


def _completion(args: argparse.Namespace) -> int:
    from shipyard.cli.main import build_parser

    parser = build_parser()
    print(bash_script(parser) if args.shell == "bash" else zsh_script(parser), end="")
    return 0
