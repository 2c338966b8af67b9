"""``shipyard alias``: show, set and roll back the aliases of a registered model in MLflow.

The pipelines move the aliases themselves: ``candidate`` when a package is registered,
``production`` (and ``previous``) once its deployment is Ready. This command is for people:

* ``shipyard alias show MODEL``: every alias and the version it names;
* ``shipyard alias set MODEL ALIAS VERSION``: point any alias at a version;
* ``shipyard alias rollback MODEL [--reason TEXT]``: move ``production`` back to the version
  before it (``previous`` moves one further back), as after a bad deployment.

``--tracking-uri``: the MLflow server (default ``MLFLOW_TRACKING_URI``; outside a cluster,
without it, the local file store of the current folder, as ``shipyard run --local`` writes it
with ``--work-dir .``). A model name, alias or version that cannot be right is refused before
MLflow is asked.
"""

from __future__ import annotations

import argparse

from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import ShipyardError, refuse_credentials
from shipyard.core.numbers import number
from shipyard.params.pipeline import BY_NAME

#: the largest version MLflow's registry stores (its model_versions.version column is an SQL Integer: an int32
#: in PostgreSQL and MySQL); a larger one made the server fail with 500s, retried for 35 s as 'cannot reach'
MAX_VERSION = 2**31 - 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alias", help="show, set or roll back the MLflow aliases of a registered model",
                       description="The MLflow aliases of a registered model: production (what serves), previous "
                                   "(the one before), candidate and dry-run (a champion only rendered, never served).")
    group = p.add_subparsers(dest="alias_command", metavar="SUBCOMMAND")

    show = group.add_parser("show", help="every alias of MODEL and the version it names")
    _common(show)
    show.set_defaults(func=_show)

    put = group.add_parser("set", help="point ALIAS of MODEL at VERSION",
                           description="Point ALIAS at VERSION (moving it if another version holds it).")
    _common(put)
    put.add_argument("alias", metavar="ALIAS", help="an alias such as candidate, production or staging")
    put.add_argument("version", metavar="VERSION", type=number(int, minimum=1, maximum=MAX_VERSION, example="3"),
                     help="a version number of MODEL")
    put.set_defaults(func=_set)

    back = group.add_parser("rollback", help="move production back to the version before it",
                            description="Move 'production' back to the version before it; 'previous' moves one "
                                        "further back. Fails when there is nothing to roll back to.")
    _common(back)
    back.add_argument("--reason", default="", help="why (recorded as a tag on the version rolled away from)")
    back.set_defaults(func=_rollback)
    p.set_defaults(func=_usage)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the registered model name")
    p.add_argument("--tracking-uri", default="", help="the MLflow server (default $MLFLOW_TRACKING_URI)")
    add_output_option(p, default_help="one line per alias")


def _usage(args: argparse.Namespace) -> int:
    raise ShipyardError("alias", "needs a subcommand", "run `shipyard alias show MODEL`; see `shipyard alias --help`")


def _tracking_uri(args: argparse.Namespace) -> str:
    """``--tracking-uri``, refused (not shown) when it carries credentials."""
    refuse_credentials(args.tracking_uri, "--tracking-uri", BY_NAME["tracking_uri"].credential_fix)
    return args.tracking_uri


def _model(name: str) -> str:
    text = (name or "").strip()
    if not text or "/" in text or len(text) > 256 or any(c.isspace() or not c.isprintable() for c in text):
        raise ShipyardError("MODEL", f"{name!r} is not a registered model name", "use a name such as tiny-w4a16")
    return text


def _alias(name: str) -> str:
    from shipyard.tracking.model_registry import check_alias

    return check_alias(name, "ALIAS")


def _print(aliases: dict[str, str], fmt: str | None, model: str) -> None:
    def text() -> str:
        if not aliases:
            return f"{model}: no aliases"
        width = max(len(a) for a in aliases)
        return "\n".join(f"{a:<{width}}  version {v}" for a, v in sorted(aliases.items()))

    emit(aliases, fmt, text)


def _show(args: argparse.Namespace) -> int:
    from shipyard.tracking.pipeline_runs import get_aliases

    model = _model(args.model)
    _print(get_aliases(_tracking_uri(args), model), args.output, model)
    return 0


def _set(args: argparse.Namespace) -> int:
    from shipyard.tracking.pipeline_runs import set_alias

    model, alias = _model(args.model), _alias(args.alias)
    _print(set_alias(_tracking_uri(args), model, alias, str(args.version)), args.output, model)
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from shipyard.tracking.pipeline_runs import rollback_alias

    model = _model(args.model)
    _print(rollback_alias(_tracking_uri(args), model, args.reason), args.output, model)
    return 0
