"""``shipyard watch``: is production still inside the envelope the champion was qualified on?

Reads the live figures of a served model from the Prometheus that scrapes its vLLM pods over a
window (:mod:`shipyard.serving.watch`): input and output lengths, load per replica, TTFT p99 at that
load against the benchmark curve, the peak load per replica against the qualified capacity (when the
benchmark replayed a recorded workload: live peak / recorded peak, the headroom below the goodput at
the SLO), the prefix-cache hit rate; compares each with the champion's record, or with the
envelope the model image carries in its signed SLO evidence (``--model``: the
package step's ``oci://...@sha256:...``, verified with the cluster's trust key). Exit status: 0 within the envelope, 1 drifted (the dimensions are named and a
re-qualification run on the live traffic is proposed), 2 bad input, 3 Prometheus does not answer, 4
drifted and the re-qualification run could not be submitted (``--requalify``).

``--requalify`` (opt-in) starts the proposed run instead of printing it only: when the verdict is
drifted, the optimize pipeline with the proposed parameters (``requalify_run``: ``model_uri``, the
base the champion's record (``base_model``, recorded by the select step) or the model's provenance
names, or ``--param model_uri``, and ``benchmark_config``, the live traffic) plus the user's
``--param``/``--params-file`` (registry, repository, namespace...) is submitted through
``shipyard submit``'s own code (:mod:`shipyard.cli.commands.submit`, the same
``--host``/``--token``/``--cookie``/``-n``/``--insecure``/``--experiment``/``--cluster-config``/
``--image-registry``/``--service-account``), and the run id and URL are printed. The run is built
first (compiled, its parameters checked), before Prometheus is read, so a broken setting fails the
first watch, not the first drift; within the envelope nothing is submitted and KFP is not contacted.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipyard.cli.output import add_output_option, emit
from shipyard.core.errors import EXIT_NOT_SUBMITTED, ShipyardError
from shipyard.core.records import CANDIDATE_FILE

#: the proposal's parameters the user may not set: the live traffic is the point of the run
PROPOSED = ("benchmark_config",)
#: the re-qualification options (``dest``: flag), refused without ``--requalify``
REQUALIFY_OPTIONS = {"host": "--host", "token": "--token", "cookie": "--cookie", "namespace": "-n/--namespace",
                     "insecure": "--insecure", "experiment": "--experiment", "cluster_config": "--cluster-config",
                     "image_registry": "--image-registry", "params_file": "--params-file", "param": "--param",
                     "service_account": "--service-account"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="compare a served model's live traffic with the envelope it was qualified on",
                       description="Input and output lengths, load per replica, TTFT p99 at that load, the peak "
                                   "load per replica (against the capacity a replayed recorded workload qualified) "
                                   "and the prefix-cache hit rate, from Prometheus over a window, against the "
                                   "champion's benchmark; --requalify submits the proposed re-qualification run "
                                   "on a drift. Exit 0 within the envelope, 1 drifted, 3 Prometheus unreachable, "
                                   "4 drifted and the --requalify run not submitted.")
    p.add_argument("--prometheus", required=True, help="the Prometheus API base URL, e.g. http://prometheus:9090")
    p.add_argument("--prometheus-token-file", help="a file holding a bearer token for Prometheus (or a proxy)")
    p.add_argument("--model-name", required=True, help="the served model name (vLLM's model_name label)")
    qualified = p.add_mutually_exclusive_group(required=True)
    qualified.add_argument("--champion",
                           help="the champion's record: the select step's decision folder (selection.json) or a candidate.json")
    qualified.add_argument("--model", metavar="URI",
                           help="the served modelcar, oci://REGISTRY/REPO@sha256:...: its signed SLO evidence is the envelope")
    p.add_argument("--key", help="with --model: the PEM public key its attestations must be signed with "
                                 "(default: SHIPYARD_ATTESTATION_PUBLIC_KEY or SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE)")
    p.add_argument("--insecure-tls", action="store_true", help="with --model: skip TLS verification (test registries only)")
    p.add_argument("--window", default="30m", help="how far back to look: 30m (default), 2h, 900s")
    p.add_argument("--selector", default="", help='more label matchers, e.g. namespace="llm"')
    p.add_argument("--tolerance", help='relative change per dimension as JSON, e.g. '
                                       '{"input_length": 0.3, "ttft": 0.5, "capacity": 0.1}; prefix_cache in '
                                       'points of hit rate (default 0.1); input_distribution and '
                                       'output_distribution in shares of requests (default 0.1)')
    _add_requalify_options(p)
    add_output_option(p, default_help="the verdict and one line per dimension")
    p.set_defaults(func=_watch)


def _add_requalify_options(p: argparse.ArgumentParser) -> None:
    """``--requalify`` and the options of the run it submits, spelled as ``shipyard submit`` spells them."""
    from shipyard.cli.commands.submit import add_kfp_options

    group = p.add_argument_group("re-qualification run (with --requalify; as `shipyard submit` takes them)")
    group.add_argument("--requalify", action="store_true",
                       help="when drifted, submit the proposed re-qualification run (the optimize-and-deploy "
                            "pipeline on the live traffic) to KFP and print its id and URL; exit 4 when it cannot "
                            "be submitted")
    add_kfp_options(group)  # type: ignore[arg-type]  # an argument group takes add_argument as a parser does
    group.add_argument("--experiment", help="KFP experiment of the run (created if missing; default shipyard)")
    group.add_argument("--cluster-config", metavar="FILE",
                       help="GPU/node/secret settings YAML the pipeline is compiled with (default pipelines/cluster.yaml)")
    group.add_argument("--image-registry", metavar="REGISTRY",
                       help="registry of the runtime images (default ghcr.io/shipyard-llm)")
    group.add_argument("--params-file", metavar="FILE",
                       help="YAML/JSON mapping of the run's other parameters: registry, repository, namespace...")
    group.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="a parameter of the run (repeatable; --param wins over --params-file); "
                            "benchmark_config is the proposal's; model_uri defaults to the base the "
                            "champion's record or the model's provenance names")
    group.add_argument("--service-account", help="ServiceAccount the run's pods use (default: KFP's)")


def _token(path: str) -> str:
    """The bearer token in ``path`` (one line; ``-``: standard input)."""
    from shipyard.core.jsonargs import read_user_file

    return read_user_file(path, "--prometheus-token-file", "file holding the token (a mounted Secret's key)").strip()


def _envelope(args: argparse.Namespace) -> tuple[Any, str]:
    """The envelope to compare with, from ``--champion`` or ``--model``, and the base model its record
    or signed provenance names (or "")."""
    from shipyard.gates.selection import champion_selection, recorded_base_uri
    from shipyard.serving.watch import envelope_from_record

    if args.model:
        from shipyard.core import contract
        from shipyard.core.errors import refuse_credentials
        from shipyard.oci.attestation import KEY_FIX, read_key_file, trust_key
        from shipyard.oci.reference import require_pinned
        from shipyard.steps.watch import envelope_of_model

        refuse_credentials(args.model, "--model")
        require_pinned(args.model, "--model", how_to_allow="give the digest the package step printed")
        key = read_key_file(args.key, "--key", private=False) if args.key else trust_key()
        if key is None:
            raise ShipyardError("--key", "is required with --model (no SHIPYARD_ATTESTATION_PUBLIC_KEY is set)",
                                f"give --key public-key.pem (the Secret {contract.ATTESTATION_TRUST_SECRET}'s "
                                "public-key.pem); " + KEY_FIX)
        return envelope_of_model(args.model, key, field="--model", insecure_tls=args.insecure_tls)
    try:
        champion = Path(args.champion)
        # a candidate.json file is read from its folder, as the promote pipeline's champion is
        selection = champion_selection(str(champion.parent if champion.name == CANDIDATE_FILE and champion.is_file()
                                       else champion))
        base = recorded_base_uri(selection)  # "": a candidate.json, or a record older than base_model
    except ShipyardError as err:  # said as the option the user gave
        raise ShipyardError("--champion", err.problem, "pass the select step's decision folder (selection.json) "
                            "or the champion's candidate.json") from None
    return envelope_from_record(selection["champion"]), base


@dataclass
class Requalification:
    """The run ``--requalify`` submits on a drift, built before anything is read: the compiled
    pipeline (in ``tmp``, kept until the command ends) and the user's parameters, checked."""

    package: Any
    tmp: Any
    raw: dict[str, Any]


def _requalification(args: argparse.Namespace) -> Requalification | None:
    """With ``--requalify``: the KFP settings checked (no request), the user's parameters read, the
    pipeline compiled and the parameters checked against it; without it: None, and a re-qualification
    option given anyway is one line (it would be ignored)."""
    if not args.requalify:
        given = [flag for dest, flag in REQUALIFY_OPTIONS.items() if getattr(args, dest)]
        if given:
            raise ShipyardError(given[0], "is an option of the re-qualification run, which only --requalify submits",
                                "add --requalify, or drop it")
        return None
    from shipyard.cli.commands.submit import compiled_package, raw_params
    from shipyard.params.checks import check_params
    from shipyard.run.kfp_client import kfp_settings
    from shipyard.serving.watch import REQUALIFY_PIPELINE

    kfp_settings(args.host, args.token, args.cookie)
    raw = raw_params(args)
    for key in PROPOSED:
        if key in raw:
            raise ShipyardError(f"--param {key}", "is the proposal's: the re-qualification runs on the live traffic "
                                "as measured", f"drop {key}; `shipyard submit` takes a run of your own")
    package, tmp = compiled_package(argparse.Namespace(pipeline=REQUALIFY_PIPELINE, cluster_config=args.cluster_config,
                                                       image_registry=args.image_registry))
    try:
        check_params(package.path, raw, require=False, name=package.name)
    except BaseException:
        tmp.cleanup()
        raise
    return Requalification(package, tmp, raw)


def _check_base(args: argparse.Namespace, plan: Requalification, base: str) -> str:
    """The base model the run starts from: the one the champion's record or the model's provenance
    names (``base``), else the user's ``--param model_uri``; neither is one line (the pipeline's
    default model would be qualified). With ``--model`` another ``--param model_uri`` is one line
    (the signed provenance says what the model was built from); with ``--champion`` it wins over the
    record, with a note on standard error."""
    given = plan.raw.get("model_uri")
    if args.model and base and given is not None and given != base:
        raise ShipyardError("--param model_uri", f"is not the base the model's provenance names ({base[:200]})",
                            "drop --param model_uri")
    if not base and given is None:
        if args.champion:
            raise ShipyardError("--requalify", "needs the base model, which a champion's record does not name",
                                "pass --param model_uri=URI (the base the champion was built from), or watch "
                                "--model (its signed provenance names it)")
        raise ShipyardError("--requalify", "needs the base model, which the model's provenance does not name",
                            "pass --param model_uri=URI (the base the model was built from)")
    if base and given is not None and given != base:
        print(f"note: --param model_uri overrides the base the champion's record names ({base[:200]})",
              file=sys.stderr, flush=True)
    return str(given) if given is not None else base


def _submit(args: argparse.Namespace, plan: Requalification, result: dict[str, Any]) -> dict[str, Any]:
    """Submit ``result``'s proposed run through ``shipyard submit``'s client; its record."""
    from shipyard.cli.commands.submit import connect
    from shipyard.run.kfp_client import check_params

    params = check_params(plan.package, {**plan.raw, **result["requalify_run"]["params"]})
    kfp = connect(args)
    name = f"requalify {result['model_name']}: {', '.join(result['drifted'])}"
    run = kfp.submit(plan.package, args.experiment or "shipyard", params, name,
                     service_account=args.service_account or "")
    return {"pipeline": plan.package.name, "version": plan.package.version_name, "run_id": run["run_id"],
            "url": run["url"], "experiment_id": run["experiment_id"], "params": params}


def _requalify(args: argparse.Namespace, plan: Requalification, result: dict[str, Any]) -> int:
    """Print the verdict, then submit the proposed run on a drift (exit 1; 4 when it cannot be
    submitted: one line) or say that nothing was submitted (exit 0)."""
    from shipyard.serving.watch import format_report

    if args.output is None:
        print(format_report(result), flush=True)
    if not result["drifted"]:
        if args.output is None:
            print("within the envelope: no re-qualification run submitted", flush=True)
        else:
            emit({**result, "requalification": None}, args.output)
        return 0
    try:
        record = _submit(args, plan, result)
    except ShipyardError as err:
        if args.output:
            emit({**result, "requalification": {"submitted": False, "error": str(err)}}, args.output)
        err.exit_code = EXIT_NOT_SUBMITTED
        raise
    if args.output is None:
        print(f"re-qualification run {record['run_id']} submitted ({record['version']})")
        print(f"run: {record['url']}", flush=True)
    else:
        emit({**result, "requalification": {"submitted": True, **record}}, args.output)
    return 1


def _watch(args: argparse.Namespace) -> int:
    from shipyard.serving.prometheus import PrometheusAPI
    from shipyard.serving.watch import check_selector, format_report, parse_tolerance, parse_window
    from shipyard.steps.watch import watch_model

    check_selector(args.selector)
    window_s = parse_window(args.window)
    tolerance = parse_tolerance(args.tolerance)
    token = _token(args.prometheus_token_file) if args.prometheus_token_file else ""
    api = PrometheusAPI(args.prometheus, token=token)  # a bad URL: one line, before anything is read
    plan = _requalification(args)
    with plan.tmp if plan else contextlib.nullcontext():
        envelope, base = _envelope(args)
        if plan:
            base = _check_base(args, plan, base)
        result = watch_model(api, args.model_name, window_s, envelope, tolerance, selector=args.selector,
                             model_uri=args.model or "", base_model_uri=base)
        if plan:
            return _requalify(args, plan, result)
    emit(result, args.output, lambda: format_report(result))
    return 1 if result["drifted"] else 0
