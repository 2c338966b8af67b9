"""manifests/: every kustomization builds with the real ``kubectl kustomize`` and every object it
produces validates against the upstream CRDs (KServe) or core schemas (kubernetes-validate)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import require_tool

from shipyard.serving.kserve.config import load_preset
from shipyard.serving.kserve.validate import upstream_dir, validate_documents, validate_object

ROOT = Path(__file__).resolve().parents[1] / "manifests"
KFP_DIRS = sorted((ROOT / "kfp").glob("*/kustomization.yaml"))
LOCAL_DIRS = sorted(p.parent for p in ROOT.rglob("kustomization.yaml") if "kfp" not in p.relative_to(ROOT).parts)
KUBECTL = shutil.which("kubectl")


def build(path: Path) -> list[dict]:
    require_tool(KUBECTL is not None, "kubectl with kustomize (Debian/Google Cloud SDK kubectl)")
    proc = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_there_are_overlays_and_bases():
    names = {str(p.relative_to(ROOT)) for p in LOCAL_DIRS}
    assert {"overlays/dev", "overlays/prod", "base/rbac", "base/presets", "base/mlflow", "base/secrets",
            "base/keda"} <= names


@pytest.mark.parametrize("path", LOCAL_DIRS, ids=lambda p: str(p.relative_to(ROOT)))
def test_kustomization_builds_and_validates(path):
    docs = build(path)
    assert docs
    problems = validate_documents(docs, str(path.relative_to(ROOT)))
    assert problems == [], [str(p) for p in problems]
    # nothing cluster-wide: every object is namespaced (the overlays set the namespace)
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Namespace", "CustomResourceDefinition"}
    if path.parts[-2] == "overlays":
        assert {d["metadata"].get("namespace") for d in docs} == {{"dev": "shipyard-dev", "prod": "shipyard"}[path.name]}


def test_role_is_limited_to_what_deploy_needs():
    docs = build(ROOT / "overlays" / "prod")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    groups = {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert groups == {"serving.kserve.io", "keda.sh", ""}
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources == {"llminferenceservices", "llminferenceservices/status", "llminferenceserviceconfigs",
                         "scaledobjects", "events"}
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])
    llmisvc = next(r for r in role["rules"] if r["resources"] == ["llminferenceservices"])
    assert {"get", "patch", "create", "delete"} <= set(llmisvc["verbs"])  # apply, wait, rollback
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert {"name": "pipeline-runner", "kind": "ServiceAccount", "namespace": "kubeflow"} in binding["subjects"]


def test_prod_patches_apply():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in build(ROOT / "overlays" / "prod")}
    assert docs[("PersistentVolumeClaim", "mlflow-backend")]["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert docs[("ScaledObject", "llm-decode")]["spec"]["maxReplicaCount"] == 8
    mlflow = docs[("Deployment", "mlflow")]["spec"]["template"]["spec"]["containers"][0]
    assert "--artifacts-destination=s3://mlflow-artifacts" in mlflow["args"]
    keys = {e["valueFrom"]["secretKeyRef"]["key"] for e in mlflow["env"]}
    secret = docs[("Secret", "shipyard-s3")]
    assert keys <= set(secret["stringData"])


def test_presets_referenced_by_deploy_presets_are_shipped():
    shipped = {d["metadata"]["name"] for d in build(ROOT / "base" / "presets")}
    assert load_preset("pd-nixl")["base_refs"] == ["shipyard-nixl-pd"]
    assert "shipyard-nixl-pd" in shipped


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
