"""RBAC vs what the deploy does (issue 32, item 4): the shipped Role and ``shipyard check``'s access
reviews both come from one table (shipyard/serving/kserve/access.py), and every deploy option runs
as the pipeline identity against the Kubernetes API double that enforces the overlay's Role.

The double authorizes each request of a non-admin user from the stored Roles and RoleBindings, as
the API server's RBAC authorizer does, so a verb the Role lacks is a 403 here as in a cluster.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from conftest import require_tool

from shipyard.params.deploy import parse_deploy_config
from shipyard.pipelines.platform import cluster_layout
from shipyard.serving import cluster_check as cc
from shipyard.serving.kserve.access import ACCESS, BY_KIND, deploy_kinds, granted, needed_access, role_rules
from shipyard.serving.kserve.apply import api_client
from shipyard.serving.kserve.config import PRESETS_DIR, parse_config
from shipyard.serving.kserve.render import render
from shipyard.steps.deploy import run_deploy
from shipyard.testing.k8s_double import FULL_INSTALL_GROUPS, K8sDouble, ready_after

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = cluster_layout("kfp-standalone")
PODS_NS, NS = LAYOUT["pipeline_namespace"], LAYOUT["serving_namespace"]
SA_TOKEN = "pipeline-runner-token"
OLD = "oci://registry.example/models/tiny@sha256:" + "0" * 64
NEW = "oci://registry.example/models/tiny@sha256:" + "1" * 64
FAST = {"wait_timeout_s": 5, "poll_s": 0.01, "false_grace_s": 0}
CANARY = {"strategy": "canary", "steps": [25, 100], "route": {"name": "llm-route"}}
OBJECTIVES = [{"name": "premium", "priority": 10}, {"name": "batch", "priority": -1}]
TEMPLATE = {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": {"name": "llm"},
            "spec": {"model": {"uri": "hf://org/m"}, "router": {"gateway": {}, "route": {}, "scheduler": {}}}}

#: every deploy option that changes what is applied, alone and together
OPTIONS: dict[str, dict[str, Any]] = {
    **{f"preset {p.stem}": {"preset": p.stem} for p in sorted(PRESETS_DIR.glob("*.yaml"))},
    "default": {},
    "scaling keda": {"scaling": {"mode": "keda"}},
    "scaling keda, P/D": {"preset": "pd-nixl", "scaling": {"mode": "keda"}},
    "scaling wva": {"scaling": {"mode": "wva"}},
    "objectives": {"objectives": OBJECTIVES},
    "objectives on a referenced pool": {"router": {"scheduler": {"pool": "shared-pool"}}, "objectives": OBJECTIVES},
    "canary": {"rollout": CANARY},
    "canary, route elsewhere": {"rollout": {**CANARY, "route": {"name": "llm-route", "namespace": "gateways"}}},
    "scheduler precise-prefix-cache": {"router": {"scheduler": {"preset": "precise-prefix-cache"}}},
    "scheduler latency-predictor": {"router": {"scheduler": {"preset": "latency-predictor"}}},
    "lora": {"lora": {"adapters": [{"name": "sql", "uri": "hf://org/sql-lora"}]}},
    "template": {"template": TEMPLATE},
    "template with objectives": {"template": TEMPLATE, "objectives": OBJECTIVES},
    "s3 template with objectives": {"template": "s3://templates/llm.yaml", "objectives": OBJECTIVES},
    "everything": {"preset": "pd-nixl", "scaling": {"mode": "keda"}, "objectives": OBJECTIVES, "rollout": CANARY},
}


def shipped_role() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "base" / "rbac" / "role.yaml").read_text()) if d]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    return role["rules"]


def settings_of(options: dict[str, Any]) -> Any:
    return parse_deploy_config(json.loads(json.dumps(options)), name="llm", namespace=NS, model_uri=NEW)


def test_the_shipped_role_is_the_table() -> None:
    """manifests/base/rbac/role.yaml grants exactly the table's (group, resource, verb): nothing it
    lacks (a 403 in the middle of a deploy), nothing more (least privilege)."""
    assert granted(shipped_role()) == granted(role_rules())
    assert [(r["apiGroups"], r["resources"]) for r in shipped_role()] == [([a.group], [a.resource]) for a in ACCESS]


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_deploy_option_is_granted_by_the_role_and_reviewed_by_check(option: str) -> None:
    """Each option's rendered kinds (and a canary's route) have a row; the shipped Role grants each
    (group, resource, verb) the deploy needs, and check's access reviews ask for exactly those."""
    settings = settings_of(OPTIONS[option])
    cfg = settings.config
    kinds = deploy_kinds(cfg, settings.rollout)
    if not isinstance(cfg.template, str):
        assert set(kinds) - {"HTTPRoute"} == {d["kind"] for d in render(parse_config(settings.params, name="llm",
                                                                                   namespace=NS, model_uri=NEW))}
    assert set(kinds) <= set(BY_KIND), kinds
    if option.startswith(("canary", "everything")):
        assert "HTTPRoute" in kinds
    if "objectives" in option or option == "everything":
        assert "InferenceObjective" in kinds
    if "keda" in option or option == "everything":
        assert "ScaledObject" in kinds
    needs = needed_access(cfg, settings.rollout)
    assert {(g, r, v) for v, g, r, _ in needs} <= granted(shipped_role())
    reviewed: list[tuple[str, str, str, str]] = []

    def review(verb: str, group: str, resource: str, ns: str) -> bool:
        reviewed.append((verb, group, resource, ns))
        return True

    (line,) = cc.permission_checks(review, NS, "ServiceAccount kubeflow/pipeline-runner", "kfp-standalone", cfg,
                                   settings.rollout)
    assert line.status == "pass" and sorted(reviewed) == sorted(needs)
    route_ns = "gateways" if option == "canary, route elsewhere" else NS
    assert {ns for v, g, r, ns in reviewed if r == "httproutes"} <= {route_ns}
    assert {ns for v, g, r, ns in reviewed if r != "httproutes"} == {NS}


def overlay_rbac() -> list[dict[str, Any]]:
    """The Role, RoleBinding and ServiceAccounts of the kfp-standalone overlay, as kubectl applies them."""
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize (Debian/Google Cloud SDK kubectl)")
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "manifests" / "overlays" / "kfp-standalone")],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] in ("Role", "RoleBinding", "ServiceAccount")]


@pytest.fixture(scope="module")
def rbac_docs() -> list[dict[str, Any]]:
    return overlay_rbac()


@pytest.fixture
def double(rbac_docs: list[dict[str, Any]]) -> Iterator[K8sDouble]:
    """Every CRD a complete install serves, the overlay's RBAC enforced, a token for the pipeline identity."""
    server = K8sDouble(groups=FULL_INSTALL_GROUPS, enforce_rbac=True,
                       users={SA_TOKEN: f"system:serviceaccount:{PODS_NS}:{LAYOUT['service_account']}"})
    server.load(json.loads(json.dumps(rbac_docs)))
    with server:
        yield server


def as_pipeline(double: K8sDouble, tmp_path: Path) -> str:
    return str(double.kubeconfig(tmp_path / "sa-kubeconfig", PODS_NS, token=SA_TOKEN))


def deploy(double: K8sDouble, tmp_path: Path, options: dict[str, Any], uri: str = NEW) -> dict[str, Any]:
    return run_deploy(deploy_config={**options, "apply": FAST}, manifest_path=str(tmp_path / "m.yaml"), dry_run=False,
                      kubeconfig=as_pipeline(double, tmp_path), name="llm", namespace=NS, model_uri=uri)


def test_an_objectives_deploy_as_the_pipeline_identity_keeps_its_objectives(double: K8sDouble, tmp_path: Path) -> None:
    """The InferenceObjectives are applied once the service is Ready; without verbs on them the
    deploy was rolled back (the Ready service deleted) with a 403."""
    double.script("llm", ready_after(1, url=f"http://gw.example/{NS}/llm"))
    result = deploy(double, tmp_path, {"objectives": OBJECTIVES})
    assert result["status"] == "Ready" and double.get("llminferenceservices", NS, "llm") is not None
    assert double.get("inferenceobjectives", NS, "premium")["spec"]["priority"] == 10
    assert double.get("inferenceobjectives", NS, "batch")["spec"]["priority"] == -1


def test_a_canary_as_the_pipeline_identity_steps_the_route(double: K8sDouble, tmp_path: Path) -> None:
    """The canary reads the user's HTTPRoute, steps its weights and deletes the old service, all as
    kubeflow/pipeline-runner; without verbs on httproutes it was a 403 before any traffic moved."""
    old = render(parse_config({"name": "llm", "namespace": NS, "model_uri": OLD}))[0]
    double.put(old, status=ready_after(0, url=f"http://gw.example/{NS}/llm")(old, 0))
    pool = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}
    double.put({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "llm-route", "namespace": NS},
                "spec": {"parentRefs": [{"name": "inference-gateway"}],
                         "rules": [{"backendRefs": [{**pool, "name": "llm-inference-pool"}]}]}}, plural="httproutes")
    double.script("llm-canary", ready_after(1, url=f"http://gw.example/{NS}/llm-canary"))
    result = deploy(double, tmp_path, {"rollout": CANARY})
    assert result["name"] == "llm-canary" and result["status"] == "Ready"
    assert [s["weight"] for s in result["rollout"]["steps"]] == [25, 100]
    backends = double.get("httproutes", NS, "llm-route")["spec"]["rules"][0]["backendRefs"]
    assert [(b["name"], b["weight"]) for b in backends] == [("llm-canary-inference-pool", 100)]
    assert double.get("llminferenceservices", NS, "llm") is None  # cut over: the old service is gone


def test_a_keda_deploy_as_the_pipeline_identity_applies_its_scaled_objects(double: K8sDouble, tmp_path: Path) -> None:
    double.script("llm", ready_after(1, url=f"http://gw.example/{NS}/llm"))
    result = deploy(double, tmp_path, {"preset": "pd-nixl", "scaling": {"mode": "keda"}})
    assert result["status"] == "Ready"
    assert double.get("scaledobjects", NS, "llm-decode") and double.get("scaledobjects", NS, "llm-prefill")


def test_the_pre_flight_reviews_what_the_deploy_config_needs(double: K8sDouble, tmp_path: Path) -> None:
    """The pre-flight's SelfSubjectAccessReviews follow the deploy config: with the shipped Role a
    canary with objectives passes; a Role without the httproutes rule (the Role before) fails in
    one line naming the verbs, where the default config's reviews would still pass."""
    api = api_client(as_pipeline(double, tmp_path))
    settings = settings_of({"objectives": OBJECTIVES, "rollout": CANARY})
    checks = cc.pod_checks(tracking_uri="", namespace=NS, dry_run=False, api=api, deploy=settings.config,
                           rollout=settings.rollout)
    assert [c.status for c in checks] == ["pass"], [c.line() for c in checks]
    assert "InferenceObjective, HTTPRoute" in checks[0].detail
    role = double.objects[("roles", NS, "shipyard-deployer")]
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["httproutes"]]
    (failed,) = cc.pod_checks(tracking_uri="", namespace=NS, dry_run=False, api=api, deploy=settings.config,
                              rollout=settings.rollout)
    assert failed.status == "fail" and "may not get httproutes.gateway.networking.k8s.io, patch httproutes" \
        in failed.detail, failed.line()
    assert "\n" not in failed.line() and "(fix: bind Role shipyard-deployer" in failed.line()
    (default,) = cc.pod_checks(tracking_uri="", namespace=NS, dry_run=False, api=api)
    assert default.status == "pass"


# --- issue 34: the pre-flight reads a refused SelfSubjectAccessReview as refused ----------------------------


def pod_permissions(double: K8sDouble, tmp_path: Path, token: str = SA_TOKEN) -> cc.Check:
    """The pre-flight's "deploy permissions" line for a pod whose kubeconfig carries ``token``."""
    api = api_client(str(double.kubeconfig(tmp_path / "pod-kubeconfig", PODS_NS, token=token)))
    (check,) = cc.pod_checks(tracking_uri="", namespace=NS, dry_run=False, api=api)
    return check


def test_a_self_review_the_api_server_forbids_is_not_read_as_allowed(double: K8sDouble, tmp_path: Path) -> None:
    """A 403 on the SelfSubjectAccessReview itself (an identity without system:basic-user) is one
    FAIL line saying the permissions cannot be checked, naming the identity the API server names;
    it passed before ("cannot ask: the deploy step will say it", after the GPU work)."""
    double.forbid("POST", "selfsubjectaccessreviews")
    check = pod_permissions(double, tmp_path)
    assert check.status == "fail", check.line()
    assert check.detail.startswith("cannot check permissions: "), check.line()
    assert "403 Forbidden" in check.detail and f"system:serviceaccount:{PODS_NS}:{LAYOUT['service_account']}" \
        in check.detail, check.line()
    assert "system:basic-user" in check.fix and "\n" not in check.line()


def test_credentials_the_api_server_rejects_fail_the_permission_check(double: K8sDouble, tmp_path: Path) -> None:
    """A token the API server does not know (an expired one): 401 on the review, one FAIL line
    saying the credentials are rejected (it passed before)."""
    check = pod_permissions(double, tmp_path, token="expired-token")
    assert check.status == "fail" and "401 Unauthorized" in check.detail and "rejects" in check.detail, check.line()
    assert "expired-token" not in check.line()


def test_a_binding_to_a_missing_role_keeps_the_evaluation_error(double: K8sDouble, tmp_path: Path) -> None:
    """The RoleBinding applied without its Role: the API server answers allowed: false with an
    evaluationError naming the missing Role; the FAIL line keeps that text and points at the overlay."""
    del double.objects[("roles", NS, "shipyard-deployer")]
    check = pod_permissions(double, tmp_path)
    assert check.status == "fail" and "may not get llminferenceservices.serving.kserve.io" in check.detail
    assert 'role.rbac.authorization.k8s.io "shipyard-deployer" not found' in check.detail, check.line()
    assert f"in namespace {NS}" in check.detail and "kubectl apply -k manifests/overlays/" in check.fix


def test_the_pod_names_its_service_account_from_its_token(double: K8sDouble, tmp_path: Path) -> None:
    """An in-cluster token is a JWT whose subject is the ServiceAccount: the line names it (the
    token itself is never shown)."""
    claims = {"sub": f"system:serviceaccount:{PODS_NS}:{LAYOUT['service_account']}", "iss": "kubernetes"}
    part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    token = f"eyJhbGciOiJSUzI1NiJ9.{part}.c2lnbmF0dXJl"
    double.users[token] = claims["sub"]
    role = double.objects[("roles", NS, "shipyard-deployer")]
    next(r for r in role["rules"] if r["resources"] == ["llminferenceservices"])["verbs"].remove("delete")
    check = pod_permissions(double, tmp_path, token=token)
    assert check.detail.startswith(f"ServiceAccount {PODS_NS}/{LAYOUT['service_account']} may not delete "
                                   "llminferenceservices.serving.kserve.io in namespace"), check.line()
    assert token not in check.line() and part not in check.line()
    in_pod = SimpleNamespace(configuration=SimpleNamespace(api_key={"authorization": f"bearer {token}\n"}))
    assert cc.pod_identity(in_pod) == f"ServiceAccount {PODS_NS}/{LAYOUT['service_account']}"  # load_incluster_config's form
    assert cc.pod_identity(SimpleNamespace(configuration=SimpleNamespace(api_key={"authorization": "Bearer a.b.c"}))) \
        == "this pod's ServiceAccount"


class _Answers:
    """An ``ApiClient`` stand-in whose SelfSubjectAccessReviews get one fixed answer."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        return self.answer


@pytest.mark.parametrize(("answer", "said"), [
    ({"status": {"allowed": False}}, "may not get llminferenceservices"),
    ({"status": {}}, "may not get llminferenceservices"),
    ({"kind": "SelfSubjectAccessReview"}, "may not get llminferenceservices"),
    ({"status": {"allowed": "true"}}, "may not get llminferenceservices"),
    ({"status": {"allowed": False, "denied": True, "reason": "the admission webhook says no"}},
     "the admission webhook says no"),
    ({"status": {"allowed": False, "evaluationError": "webhook timed out"}}, "webhook timed out"),
    ("<html><form>Sign in</form></html>", "cannot check permissions: "),
], ids=["allowed-false", "no-allowed", "no-status", "allowed-a-string", "denied", "evaluation-error", "html"])
def test_only_allowed_true_is_allowed(answer: Any, said: str) -> None:
    """``status.allowed`` false, missing or not the boolean true is not allowed; a denial's reason and
    an evaluationError stay in the line; an answer that is not a review cannot be read as one."""
    (check,) = cc.pod_checks(tracking_uri="", namespace=NS, dry_run=False, api=_Answers(answer))
    assert check.status == "fail" and said in check.detail, check.line()
    assert "\n" not in check.line()


def test_the_pre_flight_step_stops_a_run_whose_review_is_forbidden(double: K8sDouble, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's first task, in a cluster, where the review itself is refused: one line, and
    the run ends there, before its MLflow parent run and any GPU step (it went on before). MLflow
    is taken as answering (its checks are test_check's)."""
    from shipyard.core.contract import ENV_CONTRACT
    from shipyard.core.errors import ShipyardError
    from shipyard.steps.preflight import preflight_step
    from shipyard.tracking import pipeline_runs, tracker

    started: list[dict[str, Any]] = []
    monkeypatch.setattr(tracker, "check_tracking_uri", lambda uri: "")
    monkeypatch.setattr(pipeline_runs, "start_tracking", lambda **kw: started.append(kw) or {})
    double.forbid("POST", "selfsubjectaccessreviews")
    monkeypatch.setenv("KUBECONFIG", as_pipeline(double, tmp_path))
    monkeypatch.setenv(ENV_CONTRACT, json.dumps({"step": "preflight", "env": {}}))
    local = yaml.safe_load((ROOT / "pipelines" / "local-params.yaml").read_text())
    params = {**local, "registry": "quay.io", "dry_run": False, "namespace": NS}
    with pytest.raises(ShipyardError) as err:
        preflight_step("optimize-and-deploy", params, tracking_uri="http://mlflow.kubeflow:5000", experiment="check",
                       kfp_run_id="kfp-check")
    assert err.value.field == "deploy permissions" and "cannot check permissions" in str(err.value), str(err.value)
    assert "\n" not in str(err.value) and started == []
