"""``shipyard check``: is this cluster ready for shipyard? One line per check, pass/fail/warn and
the fix (``-o json|yaml``: the machine form). Exit status 1 when a check failed.

Reads only (see :mod:`shipyard.run.check`): the deploy config, the KFP and KServe versions, the
served LLMInferenceService versions, the CRDs the deploy options need, the namespaces and contract
Secrets of the layout, MLflow by its in-cluster name (a real API call with that Host header),
the registry, S3, GPU nodes and the deploy identity's permissions. Without a kubeconfig the
Kubernetes part is one ``SKIP kubernetes: not checked: no kubeconfig`` line and the rest is still
checked; so it is when ``KUBECONFIG`` names a file that does not exist (the line names it); an API server that does not answer, rejects the credentials (401) or is not an API
server at all is one ``FAIL kubernetes`` line. A 403 is the ``not allowed`` line of the check that
met it. A bad ``-n``/``--kserve-namespace`` or cluster-config name is exit 2 before any request.
"""

from __future__ import annotations

import argparse

from shipyard.cli.options import add_namespace_option, namespace
from shipyard.cli.output import add_output_option, emit


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check", help="check a cluster before the first run (versions, CRDs, Secrets, MLflow, RBAC, GPU nodes)",
        description="Each check prints one line: PASS, FAIL, WARN or SKIP, what was found, and the fix. "
                    "Without a kubeconfig the cluster part is skipped and MLflow, the registry, S3 and the deploy "
                    "config are still checked. "
                    "Run it as a cluster admin: it reads Secrets in the pipeline namespace, lists nodes and asks "
                    "SubjectAccessReviews for the deploy identity. Nothing is changed.")
    p.add_argument("--layout", default="", help="namespace layout from the cluster config: kfp-standalone or "
                   "kubeflow-multi-user (default: the config's `layout`)")
    p.add_argument("--cluster-config", default=None, metavar="FILE",
                   help="cluster config (default: SHIPYARD_CLUSTER_CONFIG or pipelines/cluster.yaml)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig (default: KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", default=None, help="kubeconfig context")
    p.add_argument("--deploy-config", default="", metavar="JSON",
                   help="the deploy_config you will run with (default: the pipeline's): decides the CRDs needed")
    p.add_argument("--kfp-host", default="", help="KFP API URL, to check its version (2.17.0 or newer)")
    p.add_argument("--kfp-token", default="", help="bearer token for --kfp-host")
    p.add_argument("--mlflow-url", default="", help="reach MLflow here (e.g. a port-forward) while sending the "
                   "in-cluster Host header of MLFLOW_TRACKING_URI (default: the URI itself)")
    p.add_argument("--registry", default="", help="registry host[:port] the modelcar is pushed to")
    p.add_argument("--insecure-registry", action="store_true", help="plain HTTP to the registry")
    p.add_argument("--no-s3", action="store_true", help="skip the object-store check")
    add_namespace_option(p, "the deploy target namespace to check (default: the layout's serving_namespace)")
    p.add_argument("--kserve-namespace", default=None, type=namespace, metavar="NS",
                   help="namespace of KServe's controller (default: kserve, then kubeflow, where Kubeflow installs it)")
    add_output_option(p, default_help="one line per check")
    p.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from shipyard.run.check import cluster_checks
    from shipyard.serving.cluster_check import summary

    checks = cluster_checks(layout=args.layout, cluster_config=args.cluster_config, kubeconfig=args.kubeconfig,
                            context=args.context, deploy_config=args.deploy_config or None, kfp_host=args.kfp_host,
                            kfp_token=args.kfp_token, mlflow_url=args.mlflow_url, registry=args.registry,
                            insecure_registry=args.insecure_registry, check_s3=not args.no_s3,
                            kserve_namespace=args.kserve_namespace or "", namespace=args.namespace or "")
    result = summary(checks)

    def text() -> str:
        tail = f"{result['fail']} failed, {result['warn']} warnings, {result['pass']} passed, {result['skip']} not checked"
        return "\n".join([c.line() for c in checks] + [tail])

    emit(result, args.output, text)
    return 0 if result["ok"] else 1
