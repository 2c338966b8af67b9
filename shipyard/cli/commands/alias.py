"""``shipyard alias``: show, set and roll back the aliases of a registered model in MLflow.

The pipelines move the aliases themselves: ``candidate`` when a package is registered,
``production`` (and ``previous``) once its deployment is Ready. This command is for people:

* ``shipyard alias show MODEL``: every alias and the version it names;
* ``shipyard alias set MODEL ALIAS VERSION``: point any alias at a version;
* ``shipyard alias rollback MODEL [--reason TEXT]``: move ``production`` back to the version
  before it (``previous`` moves one further back), as after a bad deployment.

``production`` moves only to a version whose model's attestations verify: the version's source
(the package step's ``oci://...@sha256:...``) must carry the signed evidence and a verification
summary that says ``PASSED``, checked with ``--key`` (the trusted public key; default
``SHIPYARD_ATTESTATION_PUBLIC_KEY[_FILE]``) as the deploy step checks it
(:func:`shipyard.gates.evidence.production_check`); otherwise one line and nothing moves.
``--no-attestation-check`` is the explicit override: logged on stderr and in the version's tag
``shipyard.production_attestation``.

``--tracking-uri``: the MLflow server (default ``MLFLOW_TRACKING_URI``; outside a cluster,
without it, the local file store of the current folder, as ``shipyard run --local`` writes it
with ``--work-dir .``). A model name, alias or version that cannot be right is refused before
MLflow is asked.
"""

from __future__ import annotations

import argparse
from typing import Any

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
    _attestation_options(put)
    put.set_defaults(func=_set)

    back = group.add_parser("rollback", help="move production back to the version before it",
                            description="Move 'production' back to the version before it; 'previous' moves one "
                                        "further back. Fails when there is nothing to roll back to.")
    _common(back)
    back.add_argument("--reason", default="", help="why (recorded as a tag on the version rolled away from)")
    _attestation_options(back)
    back.set_defaults(func=_rollback)
    p.set_defaults(func=_usage)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="the registered model name")
    p.add_argument("--tracking-uri", default="", help="the MLflow server (default $MLFLOW_TRACKING_URI)")
    add_output_option(p, default_help="one line per alias")


def _attestation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", help="PEM public key the version's attestations must be signed with, checked before "
                                 "production moves (default: SHIPYARD_ATTESTATION_PUBLIC_KEY or "
                                 "SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE)")
    p.add_argument("--no-attestation-check", action="store_true",
                   help="move production without checking the version's attestations (logged)")


def _production_check(args: argparse.Namespace, moves_production: bool) -> Any:
    """The check ``production`` moves through (:func:`shipyard.gates.evidence.production_check`), with
    ``--key`` read and required before MLflow is asked; None when ``production`` does not move."""
    from shipyard.core import contract
    from shipyard.gates.evidence import ATTESTATION_DEFAULTS, production_check
    from shipyard.oci.attestation import trust_key

    if not moves_production:
        for flag, given in (("--key", args.key), ("--no-attestation-check", args.no_attestation_check)):
            if given:
                raise ShipyardError(flag, "only applies when production moves", f"drop {flag}, or set ALIAS production")
        return None
    if args.key and args.no_attestation_check:
        raise ShipyardError("--no-attestation-check", "contradicts --key (nothing would be checked with it)",
                            "give --key to check the attestations, or --no-attestation-check alone to skip them")
    if not args.no_attestation_check and trust_key(args.key or "", field="--key") is None:
        raise ShipyardError("--key", f"is required to check the attestations before production moves (no "
                            f"{contract.ENV_ATTESTATION_PUBLIC_KEY} is set)",
                            f"give --key public-key.pem (the Secret {contract.ATTESTATION_TRUST_SECRET}'s public-key.pem), "
                            "or pass --no-attestation-check to move it anyway (logged)")
    return production_check({**ATTESTATION_DEFAULTS, "require": not args.no_attestation_check, "key": args.key or ""})


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
    check = _production_check(args, alias.lower() == "production")
    _print(set_alias(_tracking_uri(args), model, alias, str(args.version), check), args.output, model)
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from shipyard.tracking.pipeline_runs import rollback_alias

    model = _model(args.model)
    check = _production_check(args, True)
    _print(rollback_alias(_tracking_uri(args), model, args.reason, check), args.output, model)
    return 0
