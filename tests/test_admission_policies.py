"""manifests/components/attestation-policies(-kyverno): the opt-in admission policies (sigstore
policy-controller ClusterImagePolicy on pods; Kyverno ImageValidatingPolicy on the
LLMInferenceService's spec.model.uri, not usable yet with shipyard's attestations) built with the
real ``kubectl kustomize`` inside a tiny overlay per layout, both Components in it,
every document validated against its vendored CRD by the one validator
(:mod:`shipyard.serving.kserve.validate`), and checked against what shipyard signs and where its key lives.

No cluster here: whether Kyverno and policy-controller admit a real attested modelcar is not tested
(manifests/README.md, "Admission policies")."""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_tool

from shipyard.core import contract
from shipyard.gates import evidence
from shipyard.pipelines.platform import cluster_layout, load_cluster_config
from shipyard.schemas import SCHEMAS_DIR
from shipyard.serving.kserve.validate import known_kinds, validate_documents, validate_object

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
COMPONENT = MANIFESTS / "components" / "attestation-policies"
#: the Kyverno policy, its own Component (not usable yet with shipyard's attestations: manifests/README.md)
KYVERNO = MANIFESTS / "components" / "attestation-policies-kyverno"
KUBECTL = shutil.which("kubectl")
LAYOUTS = sorted(load_cluster_config()["layouts"])
IVP = ("policies.kyverno.io", "ImageValidatingPolicy")
CIP = ("policy.sigstore.dev", "ClusterImagePolicy")
LLMISVC = ("serving.kserve.io", "LLMInferenceService")


def _readme_patch() -> dict[str, Any]:
    """The multi-user overlay snippet manifests/README.md documents (the block after its marker line)."""
    text = (MANIFESTS / "README.md").read_text()
    block = re.search(r"```yaml\n# multi-user: the Secret's namespace\n(.*?)```", text, re.S)
    assert block, "manifests/README.md lost its multi-user snippet"
    return yaml.safe_load(block.group(1))


def build(tmp_path: Path, layout_name: str, components: tuple[Path, ...] = (COMPONENT, KYVERNO)) -> list[dict[str, Any]]:
    """The Component inside an overlay shaped like the layout's: none for kfp-standalone (whose top
    overlay sets no namespace), the profile namespace plus the README's patch for multi-user."""
    require_tool(KUBECTL is not None, "kubectl with kustomize (Debian/Google Cloud SDK kubectl)")
    layout = cluster_layout(layout_name)
    overlay = tmp_path / layout_name
    overlay.mkdir()
    kustomization: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                     "components": [os.path.relpath(c, overlay) for c in components]}
    if layout["pipeline_namespace"] != "kubeflow" and KYVERNO in components:
        snippet = _readme_patch()
        assert [Path(c).name for c in snippet["components"]] == [KYVERNO.name]
        patches = yaml.safe_dump(snippet["patches"]).replace("kubeflow-user-example-com", layout["pipeline_namespace"])
        kustomization |= {"namespace": layout["pipeline_namespace"], "patches": yaml.safe_load(patches)}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    proc = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _one(docs: list[dict[str, Any]], group_kind: tuple[str, str]) -> dict[str, Any]:
    (doc,) = [d for d in docs if (d["apiVersion"].rpartition("/")[0], d["kind"]) == group_kind]
    return doc


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("overlays")
    return {name: build(tmp, name) for name in LAYOUTS}


@pytest.mark.parametrize("layout_name", LAYOUTS)
def test_every_document_validates_against_its_vendored_crd(built, layout_name):
    docs = built[layout_name]
    assert sorted(d["kind"] for d in docs) == ["ClusterImagePolicy", "ImageValidatingPolicy", "Role", "RoleBinding"]
    assert validate_documents(docs, f"attestation-policies in {layout_name}") == []
    # the policies were checked against a schema, not waved through as unknown kinds
    kinds = set(known_kinds())
    for group, kind in (IVP, CIP):
        version = _one(docs, (group, kind))["apiVersion"].rpartition("/")[2]
        assert (group, version, kind) in kinds


def _trust_entry() -> str:
    """The entry of the trust Secret the cluster contract feeds the deploy step's public key from."""
    env = load_cluster_config()["secrets"][contract.ATTESTATION_TRUST_SECRET]["env"]
    (entry,) = [key for key, var in env.items() if var == contract.ENV_ATTESTATION_PUBLIC_KEY]
    return entry


@pytest.mark.parametrize("layout_name", LAYOUTS)
def test_trust_root_is_the_secret_the_deploy_step_verifies_with(built, layout_name):
    """Kyverno reads the contract's trust Secret, at the entry the deploy step's public key comes
    from, in the layout's pipeline namespace (where the contract Secrets are), and the Role the
    Component adds lets it read exactly that one Secret, never the signing key's."""
    docs = built[layout_name]
    pods_ns = cluster_layout(layout_name)["pipeline_namespace"]
    entry = _trust_entry()
    ivp = _one(docs, IVP)["spec"]
    variables = {v["name"]: v["expression"] for v in ivp["variables"]}
    assert variables["trustNamespace"] == f"'{pods_ns}'"
    assert variables["trust"] == f'resource.get("v1", "secrets", variables.trustNamespace, "{contract.ATTESTATION_TRUST_SECRET}")'
    (attestor,) = ivp["attestors"]
    assert attestor["cosign"]["key"] == {
        "expression": f'string(base64.decode(variables.trust.data["{entry}"]))'}
    # shipyard's envelopes have no transparency-log entry: without this Kyverno would demand one
    # no log to look in; Kyverno (1.18+) still fails every image without a url ("rekor URL must be provided")
    assert attestor["cosign"]["ctlog"] == {"insecureIgnoreTlog": True, "url": "https://rekor.sigstore.dev"}
    role, binding = _one(docs, ("rbac.authorization.k8s.io", "Role")), _one(docs, ("rbac.authorization.k8s.io", "RoleBinding"))
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == pods_ns
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": [contract.ATTESTATION_TRUST_SECRET], "verbs": ["get"]}]
    assert contract.ATTESTATION_TRUST_SECRET != contract.ATTESTATION_SECRET
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # policy-controller: the same Secret by name, in its own namespace (a namespace other than
    # cosign-system is refused by its webhook); it takes a key Secret of exactly one entry
    (authority,) = _one(docs, CIP)["spec"]["authorities"]
    assert authority["key"] == {"secretRef": {"name": contract.ATTESTATION_TRUST_SECRET}}
    assert list(load_cluster_config()["secrets"][contract.ATTESTATION_TRUST_SECRET]["env"]) == [entry]
    assert "ctlog" not in authority  # a key authority without one skips the tlog check
    # the Secret template the user fills holds that entry alone
    templates = {d["metadata"]["name"]: d for d in yaml.safe_load_all(
        (MANIFESTS / "base" / "secrets" / "secret.yaml").read_text()) if d}
    assert list(templates[contract.ATTESTATION_TRUST_SECRET]["stringData"]) == [entry]


def _crd_versions(group: str, kind: str) -> set[str]:
    return {v for g, v, k in known_kinds() if (g, k) == (group, kind)}


def test_kyverno_policy_reads_the_llminferenceservice_model_uri(built):
    ivp = _one(built[LAYOUTS[0]], IVP)["spec"]
    (rule,) = ivp["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [LLMISVC[0]] and rule["resources"] == ["llminferenceservices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    # every version the vendored CRD serves, so no version of the object slips past
    assert set(rule["apiVersions"]) == _crd_versions(*LLMISVC) != set()
    # ... and spec.model.uri is a field of each of them
    schemas = yaml.safe_load((SCHEMAS_DIR / "kserve" / "crd" / "serving.kserve.io_llminferenceservices.yaml").read_text())
    for version in schemas["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert spec["properties"]["model"]["properties"]["uri"]["type"] == "string", version["name"]
    # the layouts' serving namespaces, nothing else
    (selector,) = ivp["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert selector["key"] == "kubernetes.io/metadata.name" and selector["operator"] == "In"
    assert set(selector["values"]) == {cluster_layout(n)["serving_namespace"] for n in LAYOUTS}
    # the image is spec.model.uri without its scheme, for both schemes the deploy renders
    (image,) = ivp["images"]
    expr = " ".join(image["expression"].split())
    cuts = dict(re.findall(r"object\.spec\.model\.uri\.startsWith\('([^']+)'\) \? \[object\.spec\.model\.uri\.substring\((\d+)\)\]", expr))
    from shipyard.serving.kserve.config import DeployConfig
    from shipyard.serving.kserve.render import model_uri

    ref = "registry.example.com/team/model@sha256:" + "a" * 64
    rendered = {model_uri(DeployConfig(name="m", model_uri=f"oci://{ref}", oci_delivery=mode)) for mode in ("modelcar", "native")}
    assert {scheme + ref for scheme in cuts} == rendered
    for scheme, cut in cuts.items():
        assert (scheme + ref)[int(cut):] == ref
    assert "has(object.spec.model.uri)" in expr  # no uri (a model from baseRefs) -> no image -> refused
    assert ivp["validations"][0]["expression"] == f"size(images.{image['name']}) == 1"
    assert ivp["validationConfigurations"] == {"verifyDigest": True, "mutateDigest": False, "required": True}
    assert ivp["failurePolicy"] == "Fail" and ivp["validationActions"] == ["Deny"]


def test_both_policies_require_what_shipyard_signs(built):
    """The predicate types are the ones shipyard.gates.evidence writes (all five, the VSA among
    them), each signature is checked, and the VSA must say PASSED."""
    docs = built[LAYOUTS[0]]
    ivp = _one(docs, IVP)["spec"]
    types = {a["name"]: a["intoto"]["type"] for a in ivp["attestations"]}
    assert sorted(types.values()) == sorted(evidence.REQUIRED_TYPES) and evidence.VSA in types.values()
    vsa = next(name for name, t in types.items() if t == evidence.VSA)
    checks = [" ".join(v["expression"].split()) for v in ivp["validations"]]
    signed = next(c for c in checks if "verifyAttestationSignatures" in c)
    listed = re.search(r"^\[(.*?)\]", signed).group(1)
    assert {x.strip() for x in listed.split(",")} == {f"attestations.{name}" for name in types}
    assert "[attestors.shipyard]) > 0" in signed and signed.count(".all(") == 2
    assert any(f"extractPayload(image, attestations.{vsa}).predicate.verificationResult == '{evidence.PASSED}'" in c
               for c in checks)

    (authority,) = _one(docs, CIP)["spec"]["authorities"]
    by_type = {a["predicateType"]: a for a in authority["attestations"]}
    assert sorted(by_type) == sorted(evidence.REQUIRED_TYPES)
    policy = by_type[evidence.VSA]["policy"]
    assert policy["type"] == "cue"
    assert f'predicate: verificationResult: "{evidence.PASSED}"' in policy["data"]
    assert f'predicateType: "{evidence.VSA}"' in policy["data"]
    cip = _one(docs, CIP)["spec"]
    assert cip["mode"] == "enforce" and cip["match"] == [{"group": "", "version": "v1", "resource": "pods"}]


def test_the_predicate_field_the_policies_read_is_the_one_shipyard_writes():
    predicate = evidence.vsa_predicate(evidence.PASSED, "", "oci://r/m@sha256:" + "0" * 64, [])
    assert predicate["verificationResult"] == evidence.PASSED


def _set(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


BAD = [  # fields each upstream CRD lacks, at the places one would guess them
    (IVP, ["spec", "attestors", 0, "cosign", "key", "secretRef"], {"name": contract.ATTESTATION_TRUST_SECRET}),
    (IVP, ["spec", "attestations", 0, "intoto", "predicateType"], evidence.VSA),
    (IVP, ["spec", "matchConstraints", "resourceRules", 0, "kinds"], ["LLMInferenceService"]),
    (CIP, ["spec", "authorities", 0, "key", "secretRef", "key"], "public-key.pem"),
    (CIP, ["spec", "authorities", 0, "attestations", 0, "type"], evidence.VSA),
    (CIP, ["spec", "match", 0, "kind"], "Pod"),
]


@pytest.mark.parametrize(("group_kind", "path", "value"), BAD, ids=lambda x: ".".join(map(str, x)) if isinstance(x, list) else None)
def test_the_validator_refuses_a_field_the_vendored_crd_lacks(built, group_kind, path, value):
    good = _one(built[LAYOUTS[0]], group_kind)
    problems = validate_object(_set(good, path, value))
    assert problems, path
    assert any(repr(path[-1]) in p.message and "Additional properties" in p.message for p in problems), problems


def test_the_validator_refuses_a_version_or_type_the_crd_does_not_serve(built):
    ivp = _one(built[LAYOUTS[0]], IVP)
    problems = validate_object(_set(ivp, ["apiVersion"], "policies.kyverno.io/v2"))
    assert problems and "no upstream schema" in problems[0].message
    problems = validate_object(_set(ivp, ["spec", "validationActions"], ["Reject"]))
    assert problems and "is not one of" in problems[0].message


def _blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("local", ["kyverno/policies.kyverno.io_imagevalidatingpolicies.yaml",
                                   "policy-controller/300-clusterimagepolicy.yaml"])
def test_vendored_crds_are_the_upstream_blobs_sources_md_names(local):
    """Byte-for-byte copies: the file's git blob id is the one SOURCES.md gives for it."""
    sources = (SCHEMAS_DIR / "SOURCES.md").read_text()
    row = next(line for line in sources.splitlines() if line.startswith(f"| {local} |"))
    assert re.search(r"\| ([0-9a-f]{40}) \|", row).group(1) == _blob_id(SCHEMAS_DIR / local)


def test_the_usable_component_needs_no_kyverno(tmp_path: Path) -> None:
    """components/attestation-policies alone is the policy-controller policy: a cluster without Kyverno
    (no ImageValidatingPolicy CRD) can apply it."""
    docs = build(tmp_path, "kfp-standalone", (COMPONENT,))
    assert [(d["apiVersion"].rpartition("/")[0], d["kind"]) for d in docs] == [CIP]
