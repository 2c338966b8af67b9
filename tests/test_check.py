"""``shipyard check`` against the Kubernetes API double loaded with what ``manifests/`` installs,
with a real MLflow server, a real registry (htpasswd) and a real S3 server (moto): a correct
install passes; each planted fault is named in one line (missing Secret key, Secrets in the
wrong namespace, a KServe that serves only v1alpha1, a missing verb in the Role, MLflow's Host
check, a missing CRD). The double's RBAC is the one the overlay ships, enforced."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_tool
from mlflow_server import shared_server

from shipyard.cli.main import main
from shipyard.pipelines.platform import cluster_layout
from shipyard.serving import cluster_check as cc
from shipyard.serving.kserve.apply import Kube, api_client
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.testing.k8s_double import FULL_INSTALL_GROUPS, K8sDouble
from shipyard.testing.loopback import LoopbackServer
from shipyard.testing.registry import LocalRegistry
from shipyard.testing.services import MlflowServer, MotoS3

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = cluster_layout("kfp-standalone")
PODS_NS, SERVING_NS = LAYOUT["pipeline_namespace"], LAYOUT["serving_namespace"]
MLFLOW_HOST = "mlflow.kubeflow.svc.cluster.local:5000"
SA_TOKEN = "pipeline-runner-token"


def overlay(name: str) -> list[dict[str, Any]]:
    require_tool(shutil.which("kubectl") is not None, "kubectl with kustomize (Debian/Google Cloud SDK kubectl)")
    out = subprocess.run(["kubectl", "kustomize", str(ROOT / "manifests" / "overlays" / name)], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def services() -> Iterator[dict[str, Any]]:
    """MLflow with the Deployment's allowed hosts (as the kubelet expands them in each layout's
    namespace), a registry with a user, moto S3 with MLflow's bucket."""
    layouts = {name: overlay(name) for name in ("kfp-standalone", "kubeflow-multi-user")}
    hosts = []
    for docs in layouts.values():
        (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
        env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        hosts.append(next(e["value"] for e in env if e["name"] == "MLFLOW_SERVER_ALLOWED_HOSTS").replace(
            "$(POD_NAMESPACE)", deployment["metadata"]["namespace"]))
    docs = layouts["kfp-standalone"]
    hosts = ",".join(hosts)
    with MlflowServer(Path(tempfile.mkdtemp(prefix="shipyard-check-mlflow-")),
                      env={"MLFLOW_SERVER_ALLOWED_HOSTS": hosts}) as mlflow, \
            LocalRegistry(users={"pusher": "secret-pw"}) as registry, MotoS3() as s3:
        s3.make_bucket("mlflow-artifacts")
        yield {"docs": docs, "layouts": layouts, "mlflow": mlflow, "registry": registry, "s3": s3}


def cluster(services: dict[str, Any], tmp_path: Path, groups: dict[str, Any] | None = None,
            layout_name: str = "kfp-standalone") -> tuple[K8sDouble, Path]:
    """A double holding a correct install of one layout: the overlay's objects, the contract
    Secrets with real values where the pods run, KServe v0.20, a GPU node; tokens for an admin and
    for the layout's pipeline identity (SA_TOKEN)."""
    layout = cluster_layout(layout_name)
    pods_ns = layout["pipeline_namespace"]
    double = K8sDouble(groups=groups or FULL_INSTALL_GROUPS, enforce_rbac=True,
                       users={SA_TOKEN: f"system:serviceaccount:{pods_ns}:{layout['service_account']}"})
    auth = base64.b64encode(b"pusher:secret-pw").decode()
    real = {"AWS_ENDPOINT_URL_S3": services["s3"].endpoint, "AWS_ACCESS_KEY_ID": services["s3"].ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": services["s3"].SECRET_KEY, "HF_TOKEN": "hf_real",
            ".dockerconfigjson": json.dumps({"auths": {services["registry"].address: {"auth": auth}}})}
    real["MLFLOW_TRACKING_URI"] = layout["tracking_uri"]
    from shipyard.oci.attestation import generate_key_pair

    private, public = generate_key_pair(tmp_path / "attestation")
    real.update({"signing-key.pem": private.read_text(), "public-key.pem": public.read_text()})
    # the overlay's objects, and the contract Secrets created from the templates (manifests/base/secrets)
    # with real values in the namespace the pipeline pods run in, as the install instructions say
    docs = [d for d in json.loads(json.dumps(services["layouts"][layout_name])) if d["kind"] != "Secret"]
    for doc in docs:  # MLflow's image pinned by digest, as manifests/base/mlflow says to do for production
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "mlflow":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["image"] = container["image"].partition(":")[0] + "@sha256:" + "ab" * 32
    for template in yaml.safe_load_all((ROOT / "manifests" / "base" / "secrets" / "secret.yaml").read_text()):
        if template and template["metadata"]["name"] != "minio-root-credentials":
            docs.append({**template, "metadata": {"name": template["metadata"]["name"], "namespace": pods_ns},
                         "stringData": {k: real.get(k, v) for k, v in template["stringData"].items()}})
    double.load(docs)
    double.install_kserve("v0.20.0")
    double.add_node("gpu-1", {"nvidia.com/gpu.present": "true"}, {"nvidia.com/gpu": "8", "cpu": "96"})
    double.add_node("cpu-1", {}, {"cpu": "16", "ephemeral-storage": "190143893Ki"})  # a 200 GB disk, as kubelets say it
    double.__enter__()
    return double, double.kubeconfig(tmp_path / "kubeconfig", pods_ns)


def run_check(kubeconfig: Path, services: dict[str, Any], mlflow_url: str, capsys: pytest.CaptureFixture,
              *extra: str, layout: str = "kfp-standalone") -> tuple[int, list[str]]:
    code = main(["check", "--kubeconfig", str(kubeconfig), "--layout", layout, "--mlflow-url", mlflow_url,
                 "--registry", services["registry"].address, "--insecure-registry", *extra])
    return code, capsys.readouterr().out.strip().splitlines()


@pytest.mark.parametrize("layout_name", ["kfp-standalone", "kubeflow-multi-user"])
def test_a_correct_install_passes(layout_name: str, services: dict[str, Any], tmp_path: Path,
                                  capsys: pytest.CaptureFixture) -> None:
    """Both namespace layouts, each installed as its overlay says, pass every check."""
    pods_ns, serving_ns = (cluster_layout(layout_name)[k] for k in ("pipeline_namespace", "serving_namespace"))
    double, kubeconfig = cluster(services, tmp_path, layout_name=layout_name)
    try:
        code, lines = run_check(kubeconfig, services, services["mlflow"].url, capsys, layout=layout_name)
        assert code == 0, "\n".join(lines)
        assert not [line for line in lines if line.startswith(("FAIL", "WARN"))], "\n".join(lines)
        names = " ".join(lines)
        for what in ("kserve version", "crd LLMInferenceService v1alpha2", "crd InferencePool", "crd Gateway API",
                     f"secret {pods_ns}/shipyard-mlflow", "mlflow api", "mlflow artifacts", "registry", "s3", "gpu nodes",
                     "node disk", "deploy permissions", f"namespace {pods_ns}", f"namespace {serving_ns}",
                     "attestation keys: one pair"):
            assert what in names, what
        assert main(["check", "--kubeconfig", str(kubeconfig), "--layout", layout_name, "--mlflow-url",
                     services["mlflow"].url, "--no-s3", "-o", "json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["ok"] is True and result["fail"] == 0
        assert {c["status"] for c in result["checks"]} <= {"pass", "skip"}
    finally:
        double.__exit__(None, None, None)


def test_each_planted_fault_is_named_in_one_line(services: dict[str, Any], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    groups = json.loads(json.dumps(FULL_INSTALL_GROUPS))
    double, kubeconfig = cluster(services, tmp_path, groups)
    try:
        # a KServe that serves only v1alpha1 (v0.16)
        double.serve_versions("serving.kserve.io", ["v1alpha1"])
        double.install_kserve("v0.16.1")
        # a missing CRD: no llm-d WVA while the deploy config scales with it
        double.served_groups.discard("llmd.ai")
        # a missing Secret key
        mlflow_secret = double.objects[("secrets", PODS_NS, "shipyard-mlflow")]
        del mlflow_secret["data"]["MLFLOW_TRACKING_TOKEN"]
        # Secrets in the wrong namespace (the old overlays put them in the serving namespace)
        moved = double.objects.pop(("secrets", PODS_NS, "shipyard-s3"))
        double.store({**moved, "metadata": {**moved["metadata"], "namespace": SERVING_NS}})
        # a Role without a verb the deploy step needs
        role = double.objects[("roles", SERVING_NS, "shipyard-deployer")]
        rule = next(r for r in role["rules"] if r["resources"] == ["llminferenceservices"])
        rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
        # a trust root from another key pair: the deploy step would refuse every model the package step signs
        from shipyard.oci.attestation import generate_key_pair

        _, other = generate_key_pair(tmp_path / "other-pair")
        trust = double.objects[("secrets", PODS_NS, "shipyard-attestation-trust")]
        trust["data"]["public-key.pem"] = base64.b64encode(other.read_bytes()).decode()
        # MLflow's plain image (no boto3) with the S3 artifact store (the manifest before)
        mlflow = double.objects[("deployments", PODS_NS, "mlflow")]["spec"]["template"]["spec"]["containers"][0]
        mlflow["image"] = "ghcr.io/mlflow/mlflow:v3.17.2"
        # MLflow without the allowed hosts (the manifest before): 403 to its Service name
        # the deploy config the pipeline runs with: its apply, verify and rollout objects are accepted (issue 32)
        deploy = json.dumps({"preset": "pd-nixl", "gpu_memory_gib": 80, "scaling": {"mode": "wva", "max_replicas": 4},
                             "apply": {"wait_timeout_s": 1800}, "verify": {"min_match_rate": 0.8},
                             "rollout": {"strategy": "canary", "steps": [25, 100], "route": {"name": "llm-route"}}})
        code, lines = run_check(kubeconfig, services, shared_server().url, capsys, "--deploy-config", deploy)
    finally:
        double.__exit__(None, None, None)
    assert code == 1
    failed = [line for line in lines if line.startswith("FAIL")]
    text = "\n".join(lines)
    expected = {
        "kserve version": "serves LLMInferenceService v1alpha1 only",
        "crd LLMInferenceService v1alpha2": "only as v1alpha1",
        "crd WVA VariantAutoscaling": "variantautoscalings.llmd.ai is not served",
        f"secret {PODS_NS}/shipyard-s3": f"is in namespace {SERVING_NS}, but the pipeline pods run in {PODS_NS}",
        "deploy permissions": "may not patch llminferenceservices.serving.kserve.io",
        "mlflow api": f"MLflow rejects Host {MLFLOW_HOST} (403 Invalid Host header)",
        "attestation keys": "is not the public half of shipyard-attestation signing-key.pem",
        "mlflow image": "runs ghcr.io/mlflow/mlflow:v3.17.2 with an s3:// artifact store",
    }
    for name, says in expected.items():
        (line,) = [f for f in failed if f.startswith(f"FAIL {name}:")] or [None]
        assert line is not None and says in line and "(fix: " in line, (name, text)
    token_line = next(line for line in lines if f"secret {PODS_NS}/shipyard-mlflow" in line)
    assert token_line.startswith("WARN") and "lacks key MLFLOW_TRACKING_TOKEN" in token_line  # optional key
    assert len(failed) == len(expected) + 1, text  # + LLMInferenceServiceConfig v1alpha2, served v1alpha1 only too
    assert any(f.startswith("FAIL crd LLMInferenceServiceConfig v1alpha2") for f in failed)


#: the Secret URI keys every step refuses with credentials in them: (Secret, key, the URL's scheme and
#: host, what the fix must name, the checks skipped rather than run with them)
CREDENTIAL_URI_KEYS = [
    ("shipyard-mlflow", "MLFLOW_TRACKING_URI", lambda s: f"http://{MLFLOW_HOST}", "MLFLOW_TRACKING_TOKEN",
     ["SKIP mlflow name", "SKIP mlflow api"]),
    ("shipyard-s3", "AWS_ENDPOINT_URL_S3", lambda s: s["s3"].endpoint,
     "put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", ["SKIP s3"]),
]


@pytest.mark.parametrize(("secret_name", "key", "url", "fix", "skipped"), CREDENTIAL_URI_KEYS,
                         ids=["mlflow-tracking-uri", "s3-endpoint"])
def test_a_uri_with_credentials_in_a_secret_is_one_fail_line(secret_name: str, key: str, url: Any, fix: str,
                                                             skipped: list[str], services: dict[str, Any],
                                                             tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """MLFLOW_TRACKING_URI in shipyard-mlflow, AWS_ENDPOINT_URL_S3 in shipyard-s3, with a user name,
    password or token: every step refuses it (resolve_tracking_uri, the S3 client's endpoint_setting),
    so the check says so in the Secret's one FAIL line, naming the key and never the credential; the
    checks that would use it (MLflow's, S3's) are skipped, not run with it."""
    double, kubeconfig = cluster(services, tmp_path)
    try:
        secret = double.objects[("secrets", PODS_NS, secret_name)]
        scheme, _, host = url(services).partition("://")
        for userinfo in ("Zx8Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8Lz0Xc", "mlflow:pa'ss9xyz", "AKIAIOSFODNN7EXAMPLE:s3cr3t9xyz"):
            secret["data"][key] = base64.b64encode(f"{scheme}://{userinfo}@{host}".encode()).decode()
            code, lines = run_check(kubeconfig, services, services["mlflow"].url, capsys)
            text = "\n".join(lines)
            assert code == 1 and userinfo.partition(":")[2 if ":" in userinfo else 0] not in text, text
            (failed,) = [line for line in lines if line.startswith("FAIL")]
            assert failed.startswith(f"FAIL secret {PODS_NS}/{secret_name}: key {key}: http://... "
                                     "carries credentials (not shown)") and fix in failed, text
            assert [line.split(":")[0] for line in lines if line.split(":")[0] in skipped] == skipped, text
    finally:
        double.__exit__(None, None, None)


def test_an_s3_endpoint_with_credentials_here_is_one_fail_line_without_a_kubeconfig(
        services: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """No kubeconfig, S3 from this environment: AWS_ENDPOINT_URL_S3 with the keys in its URL is the
    s3 check's one FAIL line naming the variable and where the keys go, nothing contacted, the key
    never shown (it was minio's "username in endpoint is not allowed" with the URL's host)."""
    _no_kubeconfig(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", services["s3"].endpoint.replace("://", "://AKIAIOSFODNN7EXAMPLE:s3cr3t9xyz@"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", services["s3"].ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", services["s3"].SECRET_KEY)
    assert main(["check", "--mlflow-url", services["mlflow"].url, "--registry", services["registry"].address,
                 "--insecure-registry"]) == 1
    out = capsys.readouterr().out
    (failed,) = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failed.startswith("FAIL s3: AWS_ENDPOINT_URL_S3: http://... carries credentials (not shown)"), out
    assert "put the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in failed, out
    assert "s3cr3t9xyz" not in out and "AKIAIOSFODNN7EXAMPLE" not in out, out


def test_the_double_enforces_the_overlays_rbac_for_the_pipeline_identity(services: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """The deploy step's own apply, as kubeflow/pipeline-runner: allowed by the overlay's Role and
    RoleBinding; without the RoleBinding's subject, or with a verb gone, a 403 the way a cluster says it."""
    double, _ = cluster(services, tmp_path)
    try:
        config = double.kubeconfig(tmp_path / "sa-kubeconfig", PODS_NS, token=SA_TOKEN)
        kube = Kube(api_client(str(config)))
        (obj,) = [d for d in render(parse_config({"preset": "aggregated"}, name="llm", namespace=SERVING_NS,
                                                 model_uri="oci://quay.io/org/m@sha256:" + "0" * 64))
                  if d["kind"] == "LLMInferenceService"]
        res = kube.resource(obj["apiVersion"], obj["kind"])
        assert kube.apply(res, obj)["metadata"]["name"] == "llm"
        binding = double.objects[("rolebindings", SERVING_NS, "shipyard-deployer")]
        binding["subjects"] = [s for s in binding["subjects"] if s["name"] != "pipeline-runner"]
        with pytest.raises(Exception) as err:
            kube.get(res, "llm", SERVING_NS)
        assert "403" in str(err.value) or "forbidden" in str(err.value).lower()
        assert 'User "system:serviceaccount:kubeflow:pipeline-runner" cannot get' in str(err.value)
    finally:
        double.__exit__(None, None, None)


def test_known_bad_kserve_versions_are_named() -> None:
    tp4 = parse_config({"preset": "aggregated", "tensor_parallel": 4}, name="llm", namespace="ns",
                       model_uri="oci://quay.io/org/m@sha256:" + "0" * 64)
    pd = parse_config({"preset": "pd-nixl"}, name="llm", namespace="ns", model_uri="oci://quay.io/org/m@sha256:" + "0" * 64)
    assert cc.kserve_version_check("kserve/kserve-controller:v0.16.0").status == "fail"
    v17 = cc.kserve_version_check("kserve/kserve-controller:v0.17.2", pd)
    assert v17.status == "fail" and "VLLM_ADDITIONAL_ARGS" in v17.detail
    assert cc.kserve_version_check("v0.17.0").status == "warn"
    v19 = cc.kserve_version_check("kserve/kserve-controller:v0.19.1", tp4)
    assert v19.status == "fail" and "tensor parallelism silently stays 1" in v19.detail
    assert cc.kserve_version_check("v0.18.0").status == "warn"
    assert cc.kserve_version_check("kserve/kserve-controller:v0.20.0", tp4).status == "pass"
    assert cc.kfp_version_check("2.16.1").status == "fail" and cc.kfp_version_check("2.17.0").status == "pass"
    assert "\n" not in v19.line() and v19.line().startswith("FAIL kserve version: ")


def test_node_disk_check_finds_room_for_the_ephemeral_storage_requests() -> None:
    """package-champion and deploy request ephemeral_storage.size: without a node that allocates
    that much they stay Pending, which shipyard check names before a run does."""
    from shipyard.pipelines.platform import ephemeral_storage, load_cluster_config

    requests = ephemeral_storage(load_cluster_config())
    assert requests == {"package-champion": 40 * 1024**3, "deploy": 40 * 1024**3}
    small = {"status": {"allocatable": {"ephemeral-storage": "30Gi"}}}
    big = {"status": {"allocatable": {"ephemeral-storage": "190143893Ki"}}}
    assert cc.disk_node_check([small, big], requests).status == "pass"
    failed = cc.disk_node_check([small, {"status": {"allocatable": {"ephemeral-storage": "many"}}}], requests)
    assert failed.status == "fail" and "no node has 40 GiB" in failed.detail and "deploy, package-champion" in failed.detail
    assert "\n" not in failed.line() and "(fix: " in failed.line()
    assert cc.disk_node_check(None, requests).status == "warn"
    assert cc.disk_node_check([small], {}).status == "skip"


def test_readme_states_the_kfp_minimum_the_check_enforces() -> None:
    """KFP 2.17.0 is a hard minimum (artifact OneOf): the README's versions matrix says so, with the
    version `shipyard check` enforces."""
    minimum = ".".join(map(str, cc.KFP_MINIMUM))
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| Kubeflow Pipelines |"))
    assert f"**{minimum} or newer**" in row and "hard minimum" in row and "OneOf" in row, row


def test_readme_says_what_to_do_with_each_failing_check() -> None:
    """Every check with a fixed name has a row in the README's "failing check | what to do" table."""
    rows = {line.split("|")[1].strip().strip("`") for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith("| `")}
    for name in ("kubernetes", "kfp version", "kserve version", "mlflow name", "mlflow image", "mlflow api", "mlflow artifacts",
                 "registry", "s3",
                 "gpu nodes", "node disk", "deploy permissions"):
        assert name in rows, name


@pytest.mark.parametrize("userinfo", ["Zx8Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8Lz0Xc", "mlflow:pa'ss9xyz", "mlflow:p@ss9xyz",
                                      "to'ken9xyz", "tok%40en9xyz"])
def test_the_pre_flight_lines_never_show_a_tracking_uri_credential(userinfo: str) -> None:
    """Issue 34, class 1: the pre-flight prints its check lines to the pod's log as they are; a
    tracking URI with a userinfo (a token as the user name, a password with ``'`` or ``@``, from
    MLFLOW_TRACKING_URI, which no parameter check sees) was shown whole in "cannot reach ..."."""
    secret = userinfo.partition(":")[2] or userinfo
    checks = cc.pod_checks(tracking_uri=f"http://{userinfo}@127.0.0.1:9", namespace=SERVING_NS, dry_run=True)
    assert [c.status for c in checks] == ["fail"], [c.line() for c in checks]
    assert secret not in checks[0].line() and "***@127.0.0.1:9" in checks[0].line(), checks[0].line()


def test_the_pre_flight_pod_checks_name_the_host_check_and_a_missing_verb(services: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    """What the pipeline's pre-flight runs from its pod: MLflow's API with the Host of the URI the
    steps use, and a SelfSubjectAccessReview per verb the deploy step needs, as its own identity."""
    double, _ = cluster(services, tmp_path)
    try:
        api = api_client(str(double.kubeconfig(tmp_path / "sa", PODS_NS, token=SA_TOKEN)))
        uri = f"http://{MLFLOW_HOST}"
        good = cc.pod_checks(tracking_uri=uri, namespace=SERVING_NS, dry_run=False, api=api,
                             connect_url=services["mlflow"].url)
        assert [c.name for c in good] == ["mlflow api", "mlflow artifacts", "deploy permissions"]
        assert [c.status for c in good] == ["pass", "pass", "pass"], [c.line() for c in good]
        assert good[2].detail == f"this pod's ServiceAccount may apply, watch and roll back LLMInferenceServices in {SERVING_NS}"
        role = double.objects[("roles", SERVING_NS, "shipyard-deployer")]
        next(r for r in role["rules"] if r["resources"] == ["llminferenceservices"])["verbs"].remove("create")
        bad = cc.pod_checks(tracking_uri=uri, namespace=SERVING_NS, dry_run=False, api=api,
                            connect_url=shared_server().url)
        assert [c.status for c in bad] == ["fail", "fail"], [c.line() for c in bad]
        assert "403 Invalid Host header" in bad[0].detail
        assert bad[1].detail.startswith("this pod's ServiceAccount may not create llminferenceservices.serving.kserve.io "
                                        "in namespace shipyard")
        assert [c.name for c in cc.pod_checks(tracking_uri=uri, namespace=SERVING_NS, dry_run=True, api=api,
                                              connect_url=services["mlflow"].url)] == ["mlflow api", "mlflow artifacts"]
    finally:
        double.__exit__(None, None, None)


def test_the_pre_flight_step_stops_a_run_whose_identity_cannot_deploy(services: dict[str, Any], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's first task, in a cluster (SHIPYARD_CONTRACT set) and as kubeflow/pipeline-runner:
    a Role without ``patch`` fails it in seconds with one line, before any GPU step."""
    from shipyard.core.contract import ENV_CONTRACT
    from shipyard.core.errors import ShipyardError
    from shipyard.steps.preflight import preflight_step

    double, _ = cluster(services, tmp_path)
    try:
        role = double.objects[("roles", SERVING_NS, "shipyard-deployer")]
        next(r for r in role["rules"] if r["resources"] == ["llminferenceservices"])["verbs"].remove("patch")
        monkeypatch.setenv("KUBECONFIG", str(double.kubeconfig(tmp_path / "sa", PODS_NS, token=SA_TOKEN)))
        monkeypatch.setenv(ENV_CONTRACT, json.dumps({"step": "preflight", "env": {}}))
        local = yaml.safe_load((ROOT / "pipelines" / "local-params.yaml").read_text())
        params = {**local, "registry": "quay.io", "dry_run": False, "namespace": SERVING_NS}
        with pytest.raises(ShipyardError) as err:
            preflight_step("optimize-and-deploy", params, tracking_uri=services["mlflow"].url, experiment="check",
                           kfp_run_id="kfp-check")
        assert err.value.field == "deploy permissions" and "may not patch" in str(err.value)
        assert "\n" not in str(err.value)
    finally:
        double.__exit__(None, None, None)


def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """A machine with no cluster credentials: no KUBECONFIG, no ~/.kube/config, not in a pod."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))


def test_without_a_kubeconfig_the_rest_is_still_checked(services: dict[str, Any], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """No kubeconfig anywhere: the Kubernetes part is one SKIP line with its fix (not "Service
    host/port is not set" for the whole command); the deploy config, MLflow (through --mlflow-url,
    with the in-cluster Host header), the registry and S3 (from AWS_* here) are checked for real."""
    _no_kubeconfig(monkeypatch, tmp_path)
    s3 = services["s3"]
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.SECRET_KEY)
    argv = ["check", "--mlflow-url", services["mlflow"].url, "--registry", services["registry"].address,
            "--insecure-registry"]
    code = main(argv)
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert code == 0, out.out + out.err
    assert out.err == "" and "Service host/port" not in out.out
    kube = next(line for line in lines if line.startswith("SKIP kubernetes: "))
    assert "not checked: no kubeconfig" in kube and "(fix: give --kubeconfig FILE or set KUBECONFIG)" in kube
    for name in ("deploy config", "mlflow api", "mlflow artifacts", "registry", "s3"):
        assert any(line.startswith(f"PASS {name}: ") for line in lines), (name, lines)
    assert lines[-1].endswith("0 failed, 0 warnings, 5 passed, 2 not checked"), lines[-1]

    assert main([*argv, "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True and result["skip"] == 2
    by_name = {c["name"]: c for c in result["checks"]}
    assert by_name["kubernetes"]["status"] == "skip" and by_name["s3"]["status"] == "pass"
    assert set(by_name["mlflow api"]) == {"name", "status", "detail", "fix"}

    # MLflow's Host check is still real without a cluster: the session's server does not allow the Service name
    assert main(["check", "--mlflow-url", shared_server().url, "--no-s3"]) == 1
    line = next(f for f in capsys.readouterr().out.splitlines() if f.startswith("FAIL mlflow api"))
    assert "403 Invalid Host header" in line


def test_a_kubeconfig_env_naming_a_missing_file_skips_the_cluster_and_checks_the_rest(
        services: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """KUBECONFIG naming a file that does not exist (a stale export): like no kubeconfig at all, the
    Kubernetes part is one SKIP line, which names the path and the fix, and the deploy config,
    MLflow and the registry are still checked (not one exit-2 error line and nothing checked).
    ~/.kube/config is not read instead (kubectl does not either)."""
    _no_kubeconfig(monkeypatch, tmp_path)
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("not: a kubeconfig\n")
    gone = tmp_path / "gone" / "kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(gone))
    argv = ["check", "--mlflow-url", services["mlflow"].url, "--registry", services["registry"].address,
            "--insecure-registry", "--no-s3"]
    code = main(argv)
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert code == 0 and out.err == "", out.out + out.err
    kube = next(line for line in lines if line.startswith("SKIP kubernetes: "))
    assert f"not checked: KUBECONFIG names {gone}, which does not exist" in kube, kube
    assert "(fix: point KUBECONFIG at a kubeconfig file that exists, unset it, or give --kubeconfig FILE)" in kube
    for name in ("deploy config", "mlflow api", "mlflow artifacts", "registry"):
        assert any(line.startswith(f"PASS {name}: ") for line in lines), (name, lines)
    assert main([*argv, "-o", "json"]) == 0
    by_name = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert by_name["kubernetes"]["status"] == "skip" and str(gone) in by_name["kubernetes"]["detail"]
    # an explicit --kubeconfig that does not exist stays an error naming the field
    assert main([*argv, "--kubeconfig", str(gone)]) == 2
    assert "kubeconfig" in capsys.readouterr().err


def test_an_unreachable_api_server_is_one_line_and_the_rest_is_checked(services: dict[str, Any], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """A kubeconfig whose server does not answer: one FAIL line in words (connection refused), never
    urllib3's MaxRetryError, and MLflow is still checked; -o json says the same."""
    from mlflow_server import free_port

    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    code = main(["check", "--kubeconfig", str(config), "--mlflow-url", services["mlflow"].url, "--no-s3"])
    out = capsys.readouterr()
    assert code == 1 and out.err == "", out.err
    assert "MaxRetryError" not in out.out
    (kube,) = [line for line in out.out.splitlines() if line.startswith("FAIL kubernetes: ")]
    assert "cannot reach the Kubernetes API at https://127.0.0.1:" in kube and ": connection refused" in kube
    assert any(line.startswith("PASS mlflow api: ") for line in out.out.splitlines())
    assert main(["check", "--kubeconfig", str(config), "--no-s3", "-o", "json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in result["checks"] if c["name"] == "kubernetes"] == ["fail"]


def test_namespace_flag_names_the_deploy_target_to_check(services: dict[str, Any], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """``-n NS`` is the deploy target: a namespace that does not exist is named; the layout's passes."""
    double, kubeconfig = cluster(services, tmp_path)
    try:
        code, lines = run_check(kubeconfig, services, services["mlflow"].url, capsys, "-n", "team-a", "--no-s3")
        assert code == 1
        assert any(line.startswith("FAIL namespace team-a: does not exist") for line in lines), lines
        assert any(line.startswith("PASS deploy config: ") and "namespace team-a" in line for line in lines), lines
        code, lines = run_check(kubeconfig, services, services["mlflow"].url, capsys, "--namespace", SERVING_NS,
                                "--no-s3")
        assert code == 0, "\n".join(lines)
    finally:
        double.__exit__(None, None, None)


def _mlflow_json(url: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    import urllib.request

    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


def test_an_mlflow_that_cannot_store_artifacts_fails_the_round_trip_in_one_line(
        services: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Issue 32, item 1: /health and the API answer while the artifact store cannot write (the image
    without boto3 for its s3:// destination); here a real ``mlflow server`` whose
    ``--artifacts-destination`` lies under a regular file, so its first upload is a 500 as there.
    The working server passes the round-trip and keeps no run; the broken one fails ``shipyard
    check`` and the pre-flight with one line naming the cause and the fix."""
    from shipyard.core.contract import ENV_CONTRACT
    from shipyard.core.errors import ShipyardError
    from shipyard.steps.preflight import preflight_step

    good = cc.mlflow_artifact_check(f"http://{MLFLOW_HOST}", services["mlflow"].url)
    assert good.status == "pass" and "written, listed, read back and deleted" in good.detail, good.line()
    url = services["mlflow"].url
    experiment = _mlflow_json(url, f"/api/2.0/mlflow/experiments/get-by-name?experiment_name={cc.CHECK_EXPERIMENT}")
    runs = _mlflow_json(url, "/api/2.0/mlflow/runs/search",
                        {"experiment_ids": [experiment["experiment"]["experiment_id"]], "run_view_type": "ALL"})
    assert runs["runs"] and {r["info"]["lifecycle_stage"] for r in runs["runs"]} == {"deleted"}  # the run is gone

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the artifact store's folder should be\n")
    with MlflowServer(Path(tempfile.mkdtemp(prefix="shipyard-check-broken-")), artifacts=str(blocker / "artifacts"),
                      env={"MLFLOW_SERVER_ALLOWED_HOSTS": f"{MLFLOW_HOST},127.0.0.1:*"}) as broken:
        bad = cc.mlflow_artifact_check(f"http://{MLFLOW_HOST}", broken.url)
        # what check said before: MLflow looked fine
        assert cc.mlflow_api_check(f"http://{MLFLOW_HOST}", broken.url).status == "pass"
        _no_kubeconfig(monkeypatch, tmp_path)
        code = main(["check", "--mlflow-url", broken.url, "--no-s3"])
        lines = capsys.readouterr().out.splitlines()
        monkeypatch.setenv(ENV_CONTRACT, json.dumps({"step": "preflight", "env": {}}))
        local = yaml.safe_load((ROOT / "pipelines" / "local-params.yaml").read_text())
        with pytest.raises(ShipyardError) as err:
            preflight_step("optimize-and-deploy", local, tracking_uri=broken.url, experiment="check", kfp_run_id="kfp-check")
    assert bad.status == "fail", bad.line()
    assert "an artifact upload answered 500" in bad.detail and "artifact store cannot write" in bad.detail
    assert "boto3" in bad.fix and "-full" in bad.fix and "manifests/base/mlflow" in bad.fix
    assert code == 1
    (line,) = [f for f in lines if f.startswith("FAIL ")]
    assert line == bad.line() and "\n" not in line
    assert err.value.field == "mlflow artifacts" and "answered 500" in str(err.value) and "boto3" in str(err.value)


@contextlib.contextmanager
def _istio_denies() -> Iterator[str]:
    """What a pipeline pod without a sidecar meets in a profile namespace: MLflow's Istio sidecar
    whose owner-only AuthorizationPolicy refuses it; Envoy's RBAC filter answers every path (even
    /health) 403 with the body ``RBAC: access denied``, and MLflow never sees the request."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _deny(self) -> None:
            body = b"RBAC: access denied"
            self.send_response(403)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.send_header("server", "istio-envoy")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _deny

        def log_message(self, *args: Any) -> None:
            pass

    with LoopbackServer(Handler) as server:
        yield server.url


def test_istios_403_is_named_with_the_policy_fix_not_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    """Issue 32, item 3: ``403 RBAC: access denied`` comes from Istio, not MLflow: ``shipyard check``
    and the pre-flight say so in one line with the fix (the multi-user overlay's AuthorizationPolicy),
    never "set MLFLOW_TRACKING_TOKEN" (what they said before)."""
    from shipyard.core.contract import ENV_CONTRACT
    from shipyard.core.errors import ShipyardError
    from shipyard.steps.preflight import preflight_step

    profile_uri = "http://mlflow.kubeflow-user-example-com.svc.cluster.local:5000"
    with _istio_denies() as sidecar:
        api = cc.mlflow_api_check(profile_uri, sidecar)
        artifacts = cc.mlflow_artifact_check(profile_uri, sidecar)
        _no_kubeconfig(monkeypatch, tmp_path)
        code = main(["check", "--layout", "kubeflow-multi-user", "--mlflow-url", sidecar, "--no-s3"])
        lines = capsys.readouterr().out.splitlines()
        monkeypatch.setenv(ENV_CONTRACT, json.dumps({"step": "preflight", "env": {}}))
        local = yaml.safe_load((ROOT / "pipelines" / "local-params.yaml").read_text())
        with pytest.raises(ShipyardError) as err:
            preflight_step("optimize-and-deploy", local, tracking_uri=sidecar, experiment="check", kfp_run_id="kfp-check")
    for check in (api, artifacts):
        assert check.status == "fail" and "403 RBAC: access denied" in check.detail and "Istio" in check.detail
        assert "manifests/overlays/kubeflow-multi-user" in check.fix and "MLFLOW_TRACKING_TOKEN" not in check.fix
    assert code == 1
    (line,) = [f for f in lines if f.startswith("FAIL ")]
    assert line.startswith("FAIL mlflow api: ") and "RBAC: access denied" in line and "kubeflow-multi-user" in line
    assert not any(f.startswith("PASS mlflow artifacts") or f.startswith("FAIL mlflow artifacts") for f in lines)
    assert err.value.field == "mlflow api" and "RBAC: access denied" in str(err.value)
    assert "MLFLOW_TRACKING_TOKEN" not in str(err.value) and "\n" not in str(err.value)


def test_kserve_is_found_where_kubeflow_installs_it_and_its_version_named(services: dict[str, Any], tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    """Issue 32 minor: Kubeflow installs KServe's controller in namespace kubeflow, and Kubeflow 26.03
    ships KServe v0.16. check looked only in kserve ("no Deployment", a WARN); it looks in kserve, then
    kubeflow, and names the release and the Kubeflow that ships it in one FAIL line."""
    double, kubeconfig = cluster(services, tmp_path)
    try:
        double.objects.pop(("deployments", "kserve", cc.KSERVE_CONTROLLER))
        double.install_kserve("v0.16.0", namespace="kubeflow")
        code, lines = run_check(kubeconfig, services, services["mlflow"].url, capsys, "--no-s3")
        (line,) = [f for f in lines if " kserve version: " in f]
        assert code == 1 and line.startswith("FAIL kserve version: KServe v0.16.0 (the KServe Kubeflow 26.03 ships) "
                                             "serves LLMInferenceService v1alpha1 only"), line
        assert "(controller in namespace kubeflow)" in line and "(fix: upgrade KServe to v0.20" in line
        double.objects.pop(("deployments", "kubeflow", cc.KSERVE_CONTROLLER))
        code, lines = run_check(kubeconfig, services, services["mlflow"].url, capsys, "--no-s3")
        (line,) = [f for f in lines if " kserve version: " in f]
        assert line.startswith("WARN kserve version: no Deployment kserve-controller-manager in namespace kserve or "
                               "kubeflow"), line
        code, lines = run_check(kubeconfig, services, services["mlflow"].url, capsys, "--no-s3",
                                "--kserve-namespace", "elsewhere")
        assert any(f.startswith("WARN kserve version: no Deployment kserve-controller-manager in namespace elsewhere")
                   for f in lines), lines
    finally:
        double.__exit__(None, None, None)


@pytest.mark.parametrize(("held", "status", "says"), [
    ({}, None, ""),
    ({"signing": True}, "warn", "without shipyard-attestation-trust the deploy step does not check them"),
    ({"trust": True}, "fail", "nothing is attested, so the deploy step refuses every model"),
    ({"signing": True, "trust": "private"}, "fail", "public-key.pem holds a private key"),
    ({"signing": True, "trust": "garbage"}, "fail", "shipyard-attestation-trust public-key.pem is not a PEM public key"),
    ({"signing": True, "trust": True}, "pass", "one pair"),
])
def test_the_attestation_keys_must_be_one_pair(held: dict[str, Any], status: str | None, says: str,
                                               tmp_path: Path) -> None:
    """What the package step signs with and what the deploy step trusts, read from the two Secrets."""
    from shipyard.oci.attestation import generate_key_pair
    from shipyard.serving.cluster_check import attestation_keys_check

    private, public = generate_key_pair(tmp_path)
    values = {"private": private.read_text(), "garbage": "-----BEGIN PUBLIC KEY-----\nnot a key\n", True: public.read_text()}
    secrets = {}
    if held.get("signing"):
        secrets["shipyard-attestation"] = {"signing-key.pem": private.read_text()}
    if held.get("trust"):
        secrets["shipyard-attestation-trust"] = {"public-key.pem": values[held["trust"]]}

    def read_secret(ns: str, name: str) -> dict[str, Any] | None:
        data = secrets.get(name)
        return None if data is None else {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}

    check = attestation_keys_check(read_secret, PODS_NS)
    if status is None:
        assert check is None
        return
    assert check is not None and check.status == status and says in check.detail, check


# --- refusals and names (issue 34, class 6): "not allowed" is not "not installed" ----------------------

DEAD = "http://127.0.0.1:9"  # the discard port: the MLflow check fails fast, without a server


def _check_lines(kubeconfig: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, list[str]]:
    code = main(["check", "--kubeconfig", str(kubeconfig), "--no-s3", "--mlflow-url", DEAD, *extra])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out.strip().splitlines()


def _missing_wording(lines: list[str]) -> list[str]:
    """Lines that say a component is not installed (what a refusal used to be reported as)."""
    said = ("CRD is missing", "no Deployment", "does not exist", "is missing", "does not resolve")
    return [line for line in lines if any(s in line for s in said)]


def test_an_expired_token_is_one_not_allowed_line_not_missing_components(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """A token the API server rejects (401 to every call, as an expired one is): one line naming the
    API server and the credentials, the Kubernetes part stops at the first call; never "no
    Deployment", "CRD is missing" or "Secret is missing"."""
    with K8sDouble(groups=FULL_INSTALL_GROUPS, enforce_rbac=True) as double:
        double.install_kserve("v0.20.0")
        code, lines = _check_lines(double.kubeconfig(tmp_path / "kubeconfig", token="expired-token"), capsys)
        requests = list(double.requests)
    assert code == 1
    (kube,) = [line for line in lines if line.startswith("FAIL kubernetes: ")]
    assert kube.startswith(f"FAIL kubernetes: not allowed: the Kubernetes API at {double.url} rejects these "
                           "credentials (401 Unauthorized): the kubeconfig's token"), kube
    assert "log in again" in kube
    assert _missing_wording(lines) == [], lines
    assert requests == [("GET", "/api")], requests


def test_rbac_refusals_name_the_verb_and_the_resource(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An identity RBAC gives nothing (403 to every read): each check that met a refusal says who may
    not do what where, and the fix; discovery, which every identity may read, is still checked."""
    with K8sDouble(groups=FULL_INSTALL_GROUPS, enforce_rbac=True, users={"alice-token": "alice"}) as double:
        double.install_kserve("v0.20.0")
        code, lines = _check_lines(double.kubeconfig(tmp_path / "kubeconfig", token="alice-token"), capsys)
    assert code == 1
    assert _missing_wording(lines) == [], lines
    said = {line.split(":", 1)[0]: line for line in lines}
    forbids = f"not allowed: the Kubernetes API at {double.url} forbids user alice to"
    assert said["FAIL kserve version"].startswith(f"FAIL kserve version: {forbids} get deployments.apps in namespace "
                                                  "kserve (403 Forbidden: RBAC)"), lines
    assert "grant get on deployments.apps in namespace kserve to user alice" in said["FAIL kserve version"]
    assert f"{forbids} get secrets in namespace {PODS_NS} (403" in said["FAIL secrets"]
    assert f"{forbids} get services in namespace {PODS_NS} (403" in said["FAIL mlflow name"]
    assert f"{forbids} list nodes (cluster-wide) (403" in said["WARN gpu nodes"]
    assert f"{forbids} create subjectaccessreviews.authorization.k8s.io (cluster-wide)" in said["WARN deploy permissions"]
    assert any(line.startswith("PASS crd LLMInferenceService v1alpha2: ") for line in lines), lines


def test_a_namespace_admin_gets_its_secrets_checked_and_the_namespace_line_says_not_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A Role in the pipeline namespace only (a namespace admin may not get Namespaces): that
    namespace's line is "not allowed", and the Secrets it may read are still checked for real."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reader", "namespace": PODS_NS},
            "rules": [{"apiGroups": [""], "resources": ["secrets", "services"], "verbs": ["get"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "reader", "namespace": PODS_NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
               "subjects": [{"kind": "User", "name": "alice"}]}
    with K8sDouble(groups=FULL_INSTALL_GROUPS, enforce_rbac=True, users={"alice-token": "alice"}) as double:
        double.load([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PODS_NS}}, role, binding])
        code, lines = _check_lines(double.kubeconfig(tmp_path / "kubeconfig", token="alice-token"), capsys)
    assert code == 1
    said = {line.split(":", 1)[0]: line for line in lines}
    assert "forbids user alice to get namespaces (cluster-wide) (403" in said[f"FAIL namespace {PODS_NS}"], lines
    assert said[f"FAIL secret {PODS_NS}/shipyard-mlflow"].startswith(
        f"FAIL secret {PODS_NS}/shipyard-mlflow: is missing"), lines
    assert said["FAIL mlflow name"].startswith("FAIL mlflow name: mlflow.kubeflow.svc.cluster.local does not resolve")


def test_names_are_checked_and_quoted_before_they_go_into_a_path(tmp_path: Path) -> None:
    """The client refuses a name Kubernetes would refuse before any request, and quotes every segment."""
    from shipyard.core.errors import ShipyardError
    from shipyard.core.k8s_names import check_object_name
    from shipyard.run.check import _Kube, api_path

    assert api_path("v1", "secrets", "ns", "a/b?c") == "/api/v1/namespaces/ns/secrets/a%2Fb%3Fc"
    assert api_path("apps/v1", "deployments", "kserve", "x") == "/apis/apps/v1/namespaces/kserve/deployments/x"
    assert check_object_name("shipyard-mlflow.v2", "f", "x") == "shipyard-mlflow.v2"
    for bad in ("Upper", "a/b", "-a", "a..b", "a" * 254, "..", "a b", ""):
        with pytest.raises(ShipyardError, match=r"^f: "):
            check_object_name(bad, "f", "shipyard-mlflow")
    with pytest.raises(ShipyardError) as err:
        check_object_name("Zx8Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8Lz0Xc", "cluster_config secrets", "shipyard-mlflow")
    assert "Zx8Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8Lz0Xc" not in str(err.value)
    with K8sDouble() as double:
        kube = _Kube(api_client(str(double.kubeconfig(tmp_path / "kubeconfig"))))
        for ns, name in (("kubeflow/secrets", "x"), ("..", "x"), ("kubeflow", "../../nodes"), ("kubeflow", "A")):
            with pytest.raises(ShipyardError, match=r"^Secret field: "):
                kube.read("v1", "secrets", ns, name, field="Secret field")
        assert double.requests == []


def test_the_shipped_mlflow_image_is_the_full_one_and_a_tag_is_a_warning() -> None:
    """The Deployment manifests/base/mlflow ships: the -full image (boto3 for the S3 artifact store), by
    tag (no registry is reachable here to read its digest), so `check` warns and says how to pin it;
    pinned by digest it passes; the plain image with an s3:// artifact store fails."""
    deployment = yaml.safe_load((ROOT / "manifests" / "base" / "mlflow" / "deployment.yaml").read_text())
    shipped = cc.mlflow_image_check(deployment, "kubeflow", "mlflow")
    assert shipped.status == cc.WARN and "ghcr.io/mlflow/mlflow:v3.17.2-full by tag" in shipped.detail, shipped
    assert "crane digest ghcr.io/mlflow/mlflow:v3.17.2-full" in shipped.fix, shipped
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "ghcr.io/mlflow/mlflow@sha256:" + "ab" * 32
    assert cc.mlflow_image_check(deployment, "kubeflow", "mlflow").status == cc.PASS
    container["image"] = "ghcr.io/mlflow/mlflow:v3.17.2"
    plain = cc.mlflow_image_check(deployment, "kubeflow", "mlflow")
    assert plain.status == cc.FAIL and "without boto3" in plain.detail and "v3.17.2-full" in plain.fix, plain
