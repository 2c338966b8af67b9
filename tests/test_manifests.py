"""manifests/: every kustomization builds with the real ``kubectl kustomize`` and every object it
produces validates against the upstream CRDs (KServe) or core schemas (kubernetes-validate)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import require_tool
from mlflow_server import shared_server

from shipyard.pipelines.platform import cluster_layout, load_cluster_config
from shipyard.serving.kserve.access import granted, role_rules
from shipyard.serving.kserve.config import load_preset
from shipyard.serving.kserve.validate import upstream_dir, validate_documents, validate_object
from shipyard.testing.services import MlflowServer

ROOT = Path(__file__).resolve().parents[1] / "manifests"
KFP_DIRS = sorted((ROOT / "kfp").glob("*/kustomization.yaml"))
# components/ are opt-in kustomize Components (cluster-scoped admission policies), built inside an
# overlay by tests/test_admission_policies.py
LOCAL_DIRS = sorted(p.parent for p in ROOT.rglob("kustomization.yaml")
                    if not {"kfp", "components"} & set(p.relative_to(ROOT).parts))
KUBECTL = shutil.which("kubectl")
#: each top-level overlay and the cluster.yaml layout it installs
OVERLAY_LAYOUT = {"kfp-standalone": "kfp-standalone", "kubeflow-multi-user": "kubeflow-multi-user",
                  "prod": "kfp-standalone"}
LAYOUTS = sorted(load_cluster_config()["layouts"])


def build(path: Path) -> list[dict]:
    require_tool(KUBECTL is not None, "kubectl with kustomize (Debian/Google Cloud SDK kubectl)")
    proc = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_there_are_overlays_and_bases():
    names = {str(p.relative_to(ROOT)) for p in LOCAL_DIRS}
    assert {"overlays/kfp-standalone", "overlays/kubeflow-multi-user", "overlays/prod", "base/rbac",
            "base/presets", "base/mlflow", "base/secrets", "base/keda"} <= names
    assert {p.name for p in (ROOT / "overlays").iterdir()} == set(OVERLAY_LAYOUT)
    assert set(LAYOUTS) == set(OVERLAY_LAYOUT.values())


@pytest.mark.parametrize("path", LOCAL_DIRS, ids=lambda p: str(p.relative_to(ROOT)))
def test_kustomization_builds_and_validates(path):
    docs = build(path)
    if path == ROOT / "base" / "secrets":  # templates (local-config): built to nothing, the file still validates
        assert docs == []
        docs = [d for d in yaml.safe_load_all((path / "secret.yaml").read_text()) if d]
    assert docs
    problems = validate_documents(docs, str(path.relative_to(ROOT)))
    assert problems == [], [str(p) for p in problems]
    # nothing cluster-wide: every object is namespaced (the overlays set the namespace)
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition"}
    if path.parts[-2] == "overlays":
        layout = cluster_layout(OVERLAY_LAYOUT[path.name])
        assert {d["metadata"].get("namespace") for d in docs} == {layout["pipeline_namespace"],
                                                                  layout["serving_namespace"]}


def test_role_is_limited_to_what_deploy_needs():
    docs = build(ROOT / "overlays" / "prod")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    # exactly the table the deploy's needs come from (tests/test_access.py: every option against it)
    assert granted(role["rules"]) == granted(role_rules())
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])
    llmisvc = next(r for r in role["rules"] if r["resources"] == ["llminferenceservices"])
    assert {"get", "patch", "create", "delete"} <= set(llmisvc["verbs"])  # apply, wait, rollback
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert {"name": "pipeline-runner", "kind": "ServiceAccount", "namespace": "kubeflow"} in binding["subjects"]


@pytest.mark.parametrize("layout_name", LAYOUTS)
def test_layout_puts_secrets_mlflow_and_rbac_where_its_pods_run(layout_name):
    """One namespace story per KFP install: the contract Secrets and MLflow in the namespace the
    pipeline pods run in, MLflow addressed by its FQDN from there, and Role shipyard-deployer in
    the deploy target bound to the identity that runs the deploy step."""
    layout = cluster_layout(layout_name)
    pods_ns, serving_ns, sa = layout["pipeline_namespace"], layout["serving_namespace"], layout["service_account"]
    docs = build(ROOT / "overlays" / layout_name)
    where = {(d["kind"], d["metadata"]["name"]): d["metadata"]["namespace"] for d in docs}
    # the contract Secrets are templates the user creates in pods_ns (manifests/base/secrets):
    # `kubectl apply -k` of a layout never creates or overwrites one
    assert not [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"]
    assert where[("Service", "mlflow")] == where[("Deployment", "mlflow")] == pods_ns
    assert layout["tracking_uri"] == f"http://mlflow.{where[('Service', 'mlflow')]}.svc.cluster.local:5000"
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] == serving_ns
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert {"kind": "ServiceAccount", "name": sa, "namespace": pods_ns} in binding["subjects"]
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] == "LLMInferenceServiceConfig"} == {serving_ns}


@pytest.mark.parametrize("layout_name", LAYOUTS)
def test_mlflow_allows_the_host_its_clients_use(layout_name):
    """MLflow's own Host check (mlflow.server.security_utils), fed the Deployment's env as the
    kubelet expands it, accepts the Host header of MLFLOW_TRACKING_URI and every Service name."""
    from urllib.parse import urlparse

    from mlflow.server.security_utils import is_allowed_host_header

    docs = build(ROOT / "overlays" / layout_name)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow"]
    ns = deployment["metadata"]["namespace"]
    env = kubelet_env(deployment["spec"]["template"]["spec"]["containers"][0], ns)
    allowed = [h.strip() for h in env["MLFLOW_SERVER_ALLOWED_HOSTS"].split(",")]
    client_host = urlparse(cluster_layout(layout_name)["tracking_uri"]).netloc
    for host in [client_host, *service_hosts(ns)]:
        assert is_allowed_host_header(allowed, host), host
    assert not is_allowed_host_header(allowed, "mlflow.other-namespace.svc.cluster.local:5000")



@pytest.mark.parametrize("layout_name", LAYOUTS)
def test_mlflow_refuses_its_service_ip_and_pod_ip_and_the_docs_say_so(layout_name):
    """Issue 32 m4: the Deployment's allowed hosts replace MLflow's default, which admits private IPs,
    so a client using the Service's ClusterIP or a pod IP gets 403 (MLflow's own Host check, fed the
    env as the kubelet expands it). Deliberate (IPs change; private ranges reopen DNS rebinding): the
    README's cluster section, its versions matrix and the contract say so, and how to allow one."""
    from mlflow.server.security_utils import get_default_allowed_hosts, is_allowed_host_header

    docs = build(ROOT / "overlays" / layout_name)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow"]
    env = kubelet_env(deployment["spec"]["template"]["spec"]["containers"][0], deployment["metadata"]["namespace"])
    allowed = [h.strip() for h in env["MLFLOW_SERVER_ALLOWED_HOSTS"].split(",")]
    for ip_host in ("10.96.0.12:5000", "10.244.1.7:5000", "172.20.3.4:5000", "192.168.5.6:5000"):
        assert is_allowed_host_header(get_default_allowed_hosts(), ip_host), ip_host  # MLflow's default admits it
        assert not is_allowed_host_header(allowed, ip_host), ip_host  # the manifest's list does not
    contract = (ROOT.parent / "docs" / "cluster-contract.md").read_text()
    readme = (ROOT.parent / "README.md").read_text()
    cluster = readme.split("## Running on a cluster", 1)[1].split("\n## ", 1)[0]
    matrix = next(line for line in cluster.splitlines() if line.startswith("| MLflow |"))
    check_row = next(line for line in cluster.splitlines() if line.startswith("| `mlflow api` |"))
    for text in (" ".join(contract.split()), " ".join(cluster.split()), matrix, check_row):
        assert "Service IP" in text and "pod IP" in text and "403" in text, text[:200]
    assert "appended to the Deployment's `MLFLOW_SERVER_ALLOWED_HOSTS`" in " ".join(contract.split())

def test_prod_patches_apply():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in build(ROOT / "overlays" / "prod")}
    assert docs[("PersistentVolumeClaim", "mlflow-backend")]["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert docs[("ScaledObject", "llm-decode")]["spec"]["maxReplicaCount"] == 8
    mlflow = docs[("Deployment", "mlflow")]["spec"]["template"]["spec"]["containers"][0]
    assert "--artifacts-destination=s3://mlflow-artifacts" in mlflow["args"]
    keys = {e["valueFrom"]["secretKeyRef"]["key"] for e in mlflow["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    template = next(d for d in yaml.safe_load_all((ROOT / "base" / "secrets" / "secret.yaml").read_text())
                    if d and d["metadata"]["name"] == "shipyard-s3")
    assert keys and keys <= set(template["stringData"])  # the Secret the user creates from the template
    assert ("Secret", "shipyard-s3") not in docs  # never applied by kubectl apply -k (local-config)
    assert docs[("ScaledObject", "llm-decode")]["metadata"]["namespace"] == cluster_layout("kfp-standalone")["serving_namespace"]


def test_presets_referenced_by_deploy_presets_are_shipped():
    shipped = {d["metadata"]["name"] for d in build(ROOT / "base" / "presets")}
    assert load_preset("pd-nixl")["base_refs"] == ["shipyard-nixl-pd"]
    assert "shipyard-nixl-pd" in shipped


def test_pd_preset_falls_back_to_tcp_without_rdma():
    """UCX_TLS of both pools lists tcp: the pods have an RDMA device only when deploy_config asks
    for one (extra_resources), and rc alone would leave NIXL no transport between nodes."""
    (preset,) = [d for d in build(ROOT / "base" / "presets") if d["metadata"]["name"] == "shipyard-nixl-pd"]
    for pool in (preset["spec"], preset["spec"]["prefill"]):
        env = {e["name"]: e.get("value") for e in pool["template"]["containers"][0]["env"]}
        assert "tcp" in env["UCX_TLS"].split(",") and "rc" in env["UCX_TLS"].split(","), env["UCX_TLS"]


def test_validator_catches_a_broken_core_object():
    deployment = next(d for d in build(ROOT / "base" / "mlflow") if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    deployment["spec"]["replicaz"] = 2
    messages = " ".join(p.message for p in validate_object(deployment))
    assert "replicaz" in messages or "Sometimes" in messages


@pytest.mark.parametrize("path", KFP_DIRS, ids=lambda p: p.parent.name)
def test_kfp_install_reference_is_pinned_to_the_upstream_version(path):
    """The KFP kustomizations are remote (GitHub); offline we check they are pinned to the
    release in shipyard/schemas/SOURCES.md instead of building them."""
    version = re.search(r"\| kubeflow/pipelines \| ([0-9.]+) \|", (upstream_dir() / "SOURCES.md").read_text()).group(1)
    kustomization = yaml.safe_load(path.read_text())
    (resource,) = kustomization["resources"]
    assert resource.startswith("https://github.com/kubeflow/pipelines/manifests/kustomize/")
    assert resource.endswith(f"?ref={version}")
    assert len(KFP_DIRS) == 2


# -- MLflow's Host header check -------------------------------------------------------------------

def kubelet_env(container: dict, namespace: str) -> dict[str, str]:
    """The container's literal and ``metadata.namespace`` env as the kubelet resolves it: ``$(VAR)``
    expands to an earlier variable's value, ``$$`` escapes; Secret-fed variables are left out."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                                        entry["value"])
        elif (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[entry["name"]] = namespace
    return env


def mlflow_api_status(url: str, host: str) -> int:
    """HTTP status of a real MLflow API call (not /health, which skips the Host check) sent with
    ``Host: host``, the way a pipeline pod addresses the Service."""
    req = urllib.request.Request(f"{url}/api/2.0/mlflow/experiments/search?max_results=1", headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def service_hosts(namespace: str) -> list[str]:
    """Every Host header a pod in the cluster sends to the ``mlflow`` Service on port 5000."""
    return [f"mlflow{suffix}:5000" for suffix in ("", f".{namespace}", f".{namespace}.svc",
                                                  f".{namespace}.svc.cluster.local")]


def test_mlflow_server_with_the_manifest_settings_accepts_its_service_names(tmp_path):
    """A real ``mlflow server`` started with the env the Deployment gives it answers API calls
    addressed to its Service by every in-cluster name, and still refuses a foreign Host."""
    docs = build(ROOT / "overlays" / "kfp-standalone")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow"]
    namespace = deployment["metadata"]["namespace"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    settings = {k: v for k, v in kubelet_env(container, namespace).items() if k.startswith("MLFLOW_SERVER_")}
    args = " ".join(container.get("args") or [])
    assert "--allowed-hosts" not in args  # one place for the setting: the env
    with MlflowServer(Path(tempfile.mkdtemp(dir=tmp_path)), env=settings) as server:
        for host in service_hosts(namespace):
            assert mlflow_api_status(server.url, host) == 200, host
        assert mlflow_api_status(server.url, f"localhost:{server.port}") == 200  # kubectl port-forward
        assert mlflow_api_status(server.url, "attacker.example:5000") == 403


def test_mlflow_server_without_allowed_hosts_rejects_the_service_name():
    """What the manifest did before: MLflow's default allows localhost and private IPs only, so
    an API call to mlflow.<ns>.svc.cluster.local:5000 gets 403 while /health (exempt) is 200 and
    the pod looks Ready."""
    server = shared_server()
    with urllib.request.urlopen(urllib.request.Request(f"{server.url}/health", headers={"Host": "mlflow:5000"})) as r:
        assert r.status == 200
    for host in service_hosts("shipyard"):
        assert mlflow_api_status(server.url, host) == 403, host


def test_mlflow_image_carries_the_s3_artifact_client():
    """Issue 32, item 1: the plain ghcr.io/mlflow/mlflow:vX image has no boto3, so with the
    s3:// artifacts destination every upload is a 500 while /health passes. The Deployment runs the
    -full variant of the base runtime's MLflow release (mlflow's docker/README.md: "cloud storage
    integrations (AWS S3 ...)")."""
    docs = build(ROOT / "base" / "mlflow")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = " ".join(container["args"])
    assert "--artifacts-destination=s3://" in args and "--serve-artifacts" in args
    lock = (ROOT.parent / "images" / "base" / "requirements.in").read_text()
    version = re.search(r"^mlflow-skinny==(\S+)$", lock, re.M).group(1)
    assert container["image"].split("@")[0] == f"ghcr.io/mlflow/mlflow:v{version}-full", container["image"]


def test_multi_user_overlay_admits_the_sidecar_less_pipeline_pods_to_mlflow():
    """Issue 32, item 3: in a profile namespace Istio's owner-only policy answers the pipeline pods
    (no sidecar, so no mesh identity) "403 RBAC: access denied". The multi-user overlay ships an
    ALLOW AuthorizationPolicy on MLflow's pods with a rule a caller without identity matches (no
    `from`, no `when`: as kubeflow/manifests does for seaweedfs) on MLflow's port, validated
    against Istio's vendored CRD; the standalone overlay (no Istio) ships none."""
    docs = build(ROOT / "overlays" / "kubeflow-multi-user")
    (policy,) = [d for d in docs if d["kind"] == "AuthorizationPolicy"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow"]
    assert policy["apiVersion"] == "security.istio.io/v1" and policy["spec"]["action"] == "ALLOW"
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    port = str(container["ports"][0]["containerPort"])

    def admits_without_identity(rule: dict) -> bool:
        if rule.get("from") or rule.get("when"):
            return False
        ops = [t.get("operation") or {} for t in rule.get("to") or [{}]]
        return any(not op.get("ports") or port in op["ports"] for op in ops if not op.get("paths"))

    assert any(admits_without_identity(r) for r in policy["spec"]["rules"]), policy["spec"]["rules"]
    assert validate_object(policy) == []
    broken = {**policy, "spec": {**policy["spec"], "rules": [{"to": [{"operation": {"portz": ["5000"]}}]}]}}
    assert validate_object(broken), "the vendored Istio CRD must reject an unknown field"
    assert not [d for d in build(ROOT / "overlays" / "kfp-standalone") if d["kind"] == "AuthorizationPolicy"]


@pytest.mark.parametrize("path", [ROOT / "base" / "keda", ROOT / "overlays" / "prod"], ids=["base/keda", "overlays/prod"])
def test_keda_query_selects_the_scaled_objects_namespace(path):
    """Issue 32 minor: the prod overlay's KEDA query summed vllm:num_requests_waiting of every pod
    named like the decode pods in every namespace, so a same-named service elsewhere scaled this
    one. Each Prometheus trigger selects the namespace its ScaledObject is in (the overlay's, as
    ``shipyard deploy`` renders it)."""
    objects = [d for d in build(path) if d["kind"] == "ScaledObject"]
    assert objects
    for obj in objects:
        ns = obj["metadata"].get("namespace", "shipyard")
        for trigger in obj["spec"]["triggers"]:
            if trigger["type"] == "prometheus":
                selectors = re.findall(r"\{([^}]*)\}", trigger["metadata"]["query"])
                assert selectors and all(f'namespace="{ns}"' in s for s in selectors), trigger["metadata"]["query"]


def test_the_epp_metrics_reader_installs_as_the_readme_says(tmp_path):
    """manifests/README.md's Monitoring snippet added to the kustomization that installs KFP standalone's
    serving namespace: the reader's ServiceAccount and token Secret land there (the PodMonitor <service>-epp
    names that Secret), the binding's subject follows them, and the ClusterRole grants get /metrics only."""
    from shipyard.serving.gateway_slis import READER_SECRET

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Monitoring (opt-in)", 1)[1].split("\n## ", 1)[0]
    snippet = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    tree = tmp_path / "manifests"
    shutil.copytree(ROOT, tree)
    serving = tree / "overlays" / "kfp-standalone" / "serving" / "kustomization.yaml"
    serving.write_text(yaml.safe_dump({**yaml.safe_load(serving.read_text()), **snippet}))
    docs = build(tree / "overlays" / "kfp-standalone")
    assert validate_documents(docs, "epp-metrics-reader") == []
    serving_ns = cluster_layout("kfp-standalone")["serving_namespace"]
    by_kind = {d["kind"]: d for d in docs if "shipyard-metrics-reader" in d["metadata"]["name"]}
    assert set(by_kind) == {"ServiceAccount", "Secret", "ClusterRole", "ClusterRoleBinding"}
    secret = by_kind["Secret"]
    assert secret["metadata"]["name"] == READER_SECRET and secret["metadata"]["namespace"] == serving_ns
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "shipyard-metrics-reader"
    assert by_kind["ServiceAccount"]["metadata"]["namespace"] == serving_ns
    assert by_kind["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "shipyard-metrics-reader", "namespace": serving_ns}]
    assert by_kind["ClusterRole"]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
