"""``shipyard run --local --runner container``: the container rehearsal.

Runs the *compiled* pipeline (the IR ``shipyard compile`` writes, with the cpu-flavor runtime
images as each step's ``base_image``) through ``kfp.local.DockerRunner`` on podman: every step
in its runtime image, as the image's non-root user, as a cluster runs it. Around the run, on
127.0.0.1, it starts and afterwards stops:

* podman's Docker-compatible API socket (``DOCKER_HOST``);
* a ``docker-registry`` with htpasswd auth: the package step pushes there with the credentials
  of the contract's ``shipyard-registry`` Secret (a ``.dockerconfigjson`` file named by
  ``SHIPYARD_REGISTRY_AUTH_FILE``);
* an ``mlflow server`` with a sqlite database, reached only through ``MLFLOW_TRACKING_URI``;
* a moto S3 server, reached through the ``shipyard-s3`` names (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL_S3``). The base model and the calibration data
  are uploaded there and the pipeline reads them from ``s3://``;
* the Kubernetes API double over HTTP; the deploy step applies (``dry_run=false``) through a
  kubeconfig named by ``KUBECONFIG`` and waits for Ready;
* KServe's part (:func:`modelcar_servers`): the applied LLMInferenceService is served by a vLLM
  container running from the pushed modelcar, and its status URL
  (``http://NAME.NAMESPACE.svc.cluster.local:PORT``, a host entry) points there, so the deploy step
  verifies the served model (golden outputs, accuracy slice, SLO smoke) before the alias moves.

It rehearses one namespace layout (``--layout``, ``layouts`` in pipelines/cluster.yaml, default
kfp-standalone), as :class:`LayoutPlan` sets it up:

* the API double holds what ``kubectl apply -k manifests/overlays/<layout>`` creates (Roles,
  RoleBindings, ServiceAccounts, presets, MLflow's Deployment) and the contract Secrets in the
  namespace the pipeline pods run in; RBAC is enforced and the steps' kubeconfig authenticates
  as the layout's identity (``system:serviceaccount:<pipeline_namespace>:<service_account>``),
  so a verb the overlay's Role lacks is a 403 in the deploy step. The pipeline's ``namespace`` is
  the layout's serving namespace unless you set it;
* steps reach MLflow as ``mlflow.<pipeline_namespace>.svc.cluster.local`` (the layout's
  tracking URI), S3 as the ``shipyard-s3`` template's ``minio.minio.svc`` and the API server as
  ``kubernetes.default.svc``, each mapped to 127.0.0.1 by the container engine's host entries
  (the steps share the host's network). Only the names are the cluster's: the double and S3
  listen on free ports, and the API double speaks plain HTTP. The registry stays on 127.0.0.1
  (:meth:`LayoutPlan.wire` says why);
* MLflow runs with the ``MLFLOW_SERVER_ALLOWED_HOSTS`` of the overlay's Deployment (as the
  kubelet expands it), on the manifest's port 5000 when it is free here; otherwise on a free
  port, with only the port of the entries that name 5000 rewritten to it. It proxies artifacts to
  the Deployment's ``--artifacts-destination`` (``s3://mlflow-artifacts``) on the moto S3 server,
  and runs as the Deployment's image is built: with the plain ``ghcr.io/mlflow/mlflow:vX`` (no
  boto3) the first artifact upload is a 500 and the pre-flight's artifact round-trip fails
  (:mod:`shipyard.testing.mlflow_image`);
* every step gets ``SHIPYARD_CONTRACT`` (a cluster sets it through the downward API), so each
  behaves as in a pod: the pre-flight calls MLflow's API by its in-cluster name (its Host check)
  and asks the API server whether the identity may deploy.

Afterwards it checks what a cluster run would have left behind (the pushed digest resolves in
the registry, the applied object's ``model.uri`` is that reference and is Ready, the deploy step's
verification passed, MLflow holds the runs) and writes it into ``run-summary.json`` under ``rehearsal``. A step whose container left
no ``executor_output.json`` counts as failed, whatever kfp's DockerRunner reported.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shipyard.benchmarking.guidellm import parse_benchmark_config
from shipyard.core.contract import ENV_CONTRACT
from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_write_text, cache_dir, package_dir
from shipyard.core.net import free_port, port_free
from shipyard.core.records import load_decision
from shipyard.core.yamldocs import documents
from shipyard.models.s3 import upload_dir, upload_file
from shipyard.oci.attestation import PREDICATE_ANNOTATION, fallback_tag, generate_key_pair
from shipyard.pipelines import DEFAULT_PIPELINE, get_pipeline
from shipyard.run.compile import compile_pipeline
from shipyard.run.console import KFP_LOG, RunConsole, quiet_kfp
from shipyard.run.kfp_local_compat import enable_oneof_artifacts
from shipyard.run.local import (
    RunSummary,
    _component_runtimes,
    _display_names,
    candidate_labels,
    collect_steps,
    format_summary,
    gates_of,
    load_params_file,
    outcome,
    parse_param,
    pipeline_parameters,
    resolve_params,
)
from shipyard.runtimes.images import build_image, image_exists
from shipyard.runtimes.runtime import REPO_ROOT, run_in_runtime, runtime_image
from shipyard.testing.mlflow_image import lacks
from shipyard.testing.modelcar_server import ModelcarServers
from shipyard.testing.registry import LocalRegistry
from shipyard.testing.services import KubeAPI, MlflowServer, MotoS3, PodmanSocket
from shipyard.tracking.tracker import ui_url

BUCKET = "shipyard-rehearsal"
#: Where the rehearsal's secrets are mounted in every step (read-only), as a cluster mounts them.
SECRETS_MOUNT = "/var/run/secrets/shipyard"
REGISTRY_USER = "shipyard"
REGISTRY_PASSWORD = "rehearsal"  # noqa: S105 - a throwaway registry on 127.0.0.1
CALIBRATION = package_dir("shipyard.compression") / "calibration" / "default.jsonl"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
#: thread settings a step container takes from the machine that runs the rehearsal, when set there:
#: the rehearsal squeezes a cluster's pipeline onto a few shared cores, where an OpenMP team that
#: spins at its barriers (OMP_WAIT_POLICY's default) waits for a descheduled thread
HOST_THREAD_ENV = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")


#: the Kubernetes API's in-cluster name (a pod's ``kubernetes.default.svc``); the double serves
#: plain HTTP on a free loopback port, so only the name is the cluster's
KUBE_API_HOST = "kubernetes.default.svc"
LOOPBACK = "127.0.0.1"
#: the rehearsal's bearer token of the layout's pipeline identity (the deploy step's)
SA_TOKEN = "rehearsal-pipeline-identity"  # noqa: S105 - a throwaway token for the API double


def overlay_objects(layout: str) -> list[dict[str, Any]]:
    """What ``kubectl apply -k manifests/overlays/<layout>`` would create (``kubectl kustomize``)."""
    import shutil
    import subprocess

    folder = REPO_ROOT / "manifests" / "overlays" / layout
    if not folder.is_dir():
        raise ShipyardError("--layout", f"no overlay {folder}", "use a layout of pipelines/cluster.yaml")
    if shutil.which("kubectl") is None:
        raise ShipyardError("kubectl", "not installed (the rehearsal builds the layout's overlay with "
                            "`kubectl kustomize`)", "install kubectl (Debian: apt-get install kubernetes-client)")
    out = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise ShipyardError(f"overlay {layout}", f"kubectl kustomize failed: {out.stderr.strip()[:300]}",
                            f"kubectl kustomize {folder}")
    return documents(out.stdout)


def _mlflow_container(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The ``mlflow`` container of the overlay's Deployment, and the Deployment's namespace."""
    for doc in docs:
        if doc.get("kind") == "Deployment" and doc["metadata"]["name"] == "mlflow":
            containers = doc["spec"]["template"]["spec"]["containers"]
            return next(c for c in containers if c["name"] == "mlflow"), doc["metadata"].get("namespace", "default")
    raise ShipyardError("overlay", "has no Deployment mlflow", "include manifests/base/mlflow in the layout's overlay")


def manifest_mlflow_port(docs: list[dict[str, Any]]) -> int:
    """The port the overlay's MLflow container listens on (its ``containerPort``)."""
    container, _ = _mlflow_container(docs)
    return int((container.get("ports") or [{"containerPort": 5000}])[0]["containerPort"])


def mlflow_allowed_hosts(docs: list[dict[str, Any]], port: int) -> str | None:
    """``MLFLOW_SERVER_ALLOWED_HOSTS`` as the overlay's MLflow Deployment sets it, expanded as the
    kubelet does (``$(POD_NAMESPACE)`` is the Deployment's namespace); None when the Deployment sets
    none (MLflow's default: localhost and private addresses only).

    The rehearsal's MLflow listens on ``port``; when that is not the manifest's port (taken on
    this machine), only the port part of the entries naming the manifest's port is rewritten
    (``mlflow.<ns>.svc.cluster.local:5000`` -> ``...:<port>``): the names are the manifest's.
    """
    container, namespace = _mlflow_container(docs)
    values: dict[str, str] = {}
    for item in container.get("env") or []:
        field = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        value = namespace if field == "metadata.namespace" else item.get("value")
        if value is not None:
            for name, known in values.items():  # $(VAR) of a variable defined before it
                value = value.replace(f"$({name})", known)
            values[item["name"]] = value
    raw = values.get("MLFLOW_SERVER_ALLOWED_HOSTS")
    if raw is None:
        return None
    manifest_port = manifest_mlflow_port(docs)
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    if port != manifest_port:
        entries = [e.removesuffix(f":{manifest_port}") + f":{port}" if e.endswith(f":{manifest_port}") else e
                   for e in entries]
    return ",".join(entries)


def s3_cluster_host() -> str:
    """The object store's host as the ``shipyard-s3`` Secret template names it (``minio.minio.svc``)."""
    from urllib.parse import urlparse

    for doc in yaml.safe_load_all((REPO_ROOT / "manifests" / "base" / "secrets" / "secret.yaml").read_text()):
        if doc and doc["metadata"]["name"] == "shipyard-s3":
            return str(urlparse(doc["stringData"]["AWS_ENDPOINT_URL_S3"]).hostname)
    raise ShipyardError("manifests/base/secrets", "has no shipyard-s3 template", "restore it from git")


def cluster_url(url: str, host: str) -> str:
    """``url`` (a loopback service) with its host replaced by ``host``, the port kept."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    return parsed._replace(netloc=f"{host}:{parsed.port}").geturl()


def cluster_hosts(*urls: str) -> dict[str, str]:
    """The container engine's host entries (``--add-host``) that map each URL's host to the loopback."""
    from urllib.parse import urlparse

    return {str(urlparse(u).hostname): LOOPBACK for u in urls if urlparse(u).hostname not in (LOOPBACK, "localhost")}


def rehearsal_secrets(pods_ns: str, values: dict[str, str]) -> list[dict[str, Any]]:
    """The contract Secrets (templates of ``manifests/base/secrets``) created where the pipeline
    pods run, holding the rehearsal's ``values``; a key without a value is left out (an
    ``optional`` key the step does not get), a Secret without any is not created."""
    docs = []
    for template in yaml.safe_load_all((REPO_ROOT / "manifests" / "base" / "secrets" / "secret.yaml").read_text()):
        if not template or template["metadata"]["name"] == "minio-root-credentials":
            continue
        data = {k: values[k] for k in template["stringData"] if values.get(k)}
        if data:
            docs.append({"apiVersion": "v1", "kind": "Secret", "type": template.get("type", "Opaque"),
                         "metadata": {"name": template["metadata"]["name"], "namespace": pods_ns}, "stringData": data})
    return docs


def attestation_secret_values() -> dict[str, str]:
    """The attestation Secrets' keys as a cluster holds them (PEM text): this machine's local key
    pair (``$SHIPYARD_CACHE/attestation``, the one ``shipyard run --local`` signs with), so that the
    package step signs in its container and the deploy step refuses what does not verify."""
    private, public = generate_key_pair(cache_dir() / "attestation")
    return {"signing-key.pem": private.read_text(), "public-key.pem": public.read_text()}


def contract_env(secrets: list[dict[str, Any]]) -> dict[str, str]:
    """The environment the cluster contract (``secrets`` of pipelines/cluster.yaml) gives a step from
    these Secrets, and ``SHIPYARD_CONTRACT`` as the downward API sets it (so each step knows it runs
    in a cluster: the pre-flight then checks MLflow's API by its in-cluster name and the deploy
    identity's permissions). kfp.local gives every step one environment: the union of the steps'."""
    from shipyard.pipelines.platform import load_cluster_config

    held = {d["metadata"]["name"]: d.get("stringData") or {} for d in secrets}
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    for secret, entry in (load_cluster_config().get("secrets") or {}).items():
        for key, var in ((entry or {}).get("env") or {}).items():
            sources[str(var)] = f"{secret}/{key}"
            if held.get(secret, {}).get(key):
                env[str(var)] = str(held[secret][key])
    registry = load_cluster_config().get("registry_secret_volume") or {}
    sources[registry.get("env") or "SHIPYARD_REGISTRY_AUTH_FILE"] = f"{registry.get('secret')}/.dockerconfigjson"
    env[ENV_CONTRACT] = json.dumps({"step": "rehearsal", "env": sources}, sort_keys=True)
    return env


@dataclass
class LayoutPlan:
    """The rehearsal of one namespace layout (``layouts`` of pipelines/cluster.yaml), decided before
    any service starts: the overlay's objects, the pipeline identity, MLflow's port and allowed hosts."""

    layout: dict[str, str]
    docs: list[dict[str, Any]]
    mlflow_port: int
    allowed_hosts: str | None

    @classmethod
    def of(cls, layout: str = "") -> LayoutPlan:
        """``layout`` (default: the cluster config's); MLflow on the manifest's port when it is free
        here, so that the steps' tracking URI is the layout's own, else on a free one."""
        from shipyard.pipelines.platform import cluster_layout

        chosen = cluster_layout(layout)
        docs = overlay_objects(chosen["name"])
        manifest_port = manifest_mlflow_port(docs)
        port = manifest_port if port_free(manifest_port, LOOPBACK) else free_port()
        return cls(chosen, docs, port, mlflow_allowed_hosts(docs, port))

    @property
    def pods_namespace(self) -> str:
        return self.layout["pipeline_namespace"]

    @property
    def identity(self) -> str:
        """The user the pipeline pods (the deploy step's among them) run as."""
        return f"system:serviceaccount:{self.pods_namespace}:{self.layout['service_account']}"

    @property
    def mlflow_image(self) -> dict[str, Any]:
        """How the overlay's MLflow Deployment runs the server: its ``image``, its
        ``--artifacts-destination`` (``artifacts``) and the modules that image lacks (``absent``:
        boto3 and botocore for the plain ``ghcr.io/mlflow/mlflow:vX``, :mod:`shipyard.testing.mlflow_image`)."""
        container, _ = _mlflow_container(self.docs)
        args = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        artifacts = next((a.split("=", 1)[1] for a in args if a.startswith("--artifacts-destination=")), "")
        image = str(container.get("image") or "")
        return {"image": image, "artifacts": artifacts, "absent": list(lacks(image))}

    def mlflow_server(self, root: Path, s3: Any) -> Any:
        """MLflow as the overlay's Deployment runs it: its allowed hosts (none when it sets none), its
        ``s3://`` artifacts destination on the S3 double ``s3`` (the bucket created, as the install
        creates it; ``MLFLOW_S3_ENDPOINT_URL`` and the keys, as the Deployment takes them from
        ``shipyard-s3``), and only the modules its image carries (no boto3 in the plain image: the
        first artifact upload is then a 500, as in the cluster)."""
        env = {} if self.allowed_hosts is None else {"MLFLOW_SERVER_ALLOWED_HOSTS": self.allowed_hosts}
        how = self.mlflow_image
        artifacts = how["artifacts"] or None
        if artifacts and artifacts.startswith("s3://"):
            s3.make_bucket(artifacts.removeprefix("s3://").split("/", 1)[0])
            env.update(MLFLOW_S3_ENDPOINT_URL=s3.endpoint, AWS_ACCESS_KEY_ID=s3.ACCESS_KEY,
                       AWS_SECRET_ACCESS_KEY=s3.SECRET_KEY)
        return MlflowServer(root, env=env, port=self.mlflow_port, artifacts=artifacts,
                            absent_modules=tuple(how["absent"]))

    def kube_api(self, root: Path) -> Any:
        """The API double, RBAC enforced; its kubeconfig authenticates as :attr:`identity` and
        names the API server ``kubernetes.default.svc``."""
        return KubeAPI(root, users={SA_TOKEN: self.identity}, enforce_rbac=True, token=SA_TOKEN,
                       namespace=self.pods_namespace, server_host=KUBE_API_HOST)

    def mlflow_url(self, mlflow: Any) -> str:
        """The steps' MLflow URL: the layout's tracking URI's host, the server's port."""
        from urllib.parse import urlparse

        return cluster_url(mlflow.url, str(urlparse(self.layout["tracking_uri"]).hostname))

    def wire(self, s3: Any, mlflow: Any, registry: Any, kube: Any) -> dict[str, Any]:
        """Install the layout in the double (its overlay, the contract Secrets where the pods run)
        and return the steps' view: ``names`` (each service's cluster URL), ``contract`` (their
        environment) and ``hosts`` (the host entries mapping the names to 127.0.0.1).

        The registry keeps its loopback address: the modelcar reference it names is pulled by a
        node's container runtime, which does not resolve cluster Service names, so a
        ``*.svc.cluster.local`` registry would rehearse a reference no node can pull (and plain
        HTTP to a name other than 127.0.0.1/localhost needs ``insecure_registry=true``).
        """
        names = {"mlflow": self.mlflow_url(mlflow), "s3": cluster_url(s3.endpoint, s3_cluster_host()),
                 "kubernetes": kube.server, "registry": registry.address}
        secrets = rehearsal_secrets(self.pods_namespace, {
            **s3.env, "AWS_ENDPOINT_URL_S3": names["s3"], "MLFLOW_TRACKING_URI": names["mlflow"],
            ".dockerconfigjson": dockerconfig(registry.address), **attestation_secret_values()})
        kube.load([*self.docs, *secrets])
        return {"names": names, "contract": contract_env(secrets),
                "hosts": cluster_hosts(names["mlflow"], names["s3"], names["kubernetes"])}


def compile_for_containers(pipeline: str, out_dir: Path) -> Path:
    """Compile ``pipeline`` with the cpu-flavor images of the checkout as it is now (the one
    compile path, :func:`shipyard.run.compile.compile_pipeline`)."""
    return compile_pipeline(pipeline, out_dir, image_flavor="cpu")


def pipeline_images(compiled: Path) -> dict[str, str]:
    """Runtime -> image of every shipyard step image named in a compiled pipeline."""
    spec = documents(compiled.read_text())[0]
    images: dict[str, str] = {}
    for executor in (spec.get("deploymentSpec") or {}).get("executors", {}).values():
        image = (executor.get("container") or {}).get("image", "")
        name = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
        if name.startswith("shipyard-"):
            images[name.removeprefix("shipyard-")] = image
    return images


class _TagDrift(Exception):
    """The checkout changed between compiling and building (the tags hash the code)."""


def ensure_images(images: dict[str, str], build: bool) -> list[Any]:
    """Check (or build) every image the compiled pipeline names; returns the builds."""
    built = []
    for runtime, image in sorted(images.items()):
        if image_exists(image):
            continue
        if not build:
            raise ShipyardError(f"image {image}", "is not in the local image store",
                                f"run `shipyard images build --runtime {runtime} --flavor cpu`")
        result = build_image(runtime, "cpu")
        built.append(result)
        if result.ref != image:
            raise _TagDrift(result.ref)
    return built


def compile_with_images(pipeline: str, out_dir: Path, build: bool, attempts: int = 3) -> tuple[Path, list[Any]]:
    """Compile, then make sure every image it names exists (building the missing ones). An edit
    to the checkout during a build changes the tags, so compile again until they agree."""
    built: list[Any] = []
    for _ in range(attempts):
        compiled = compile_for_containers(pipeline, out_dir)
        try:
            built += ensure_images(pipeline_images(compiled), build)
            return compiled, built
        except _TagDrift as drift:
            print(f"shipyard: the checkout changed during the build of {drift}; compiling again", flush=True)
    raise ShipyardError("images", f"the checkout kept changing while the images were built ({attempts} tries)",
                        "run again when the source tree is not being edited")


def check_traversable(path: Path) -> None:
    """Containers run as uid 1001: every folder above ``path`` must be searchable by others."""
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.stat().st_mode & 0o001:
            raise ShipyardError("--work-dir", f"{parent} is not searchable by other users, so the step "
                                "containers (uid 1001) cannot reach the pipeline root",
                                f"chmod o+x {parent}, or choose a work dir under /tmp or the checkout")


def _user_keys(file_params: dict[str, Any], overrides: list[str]) -> set[str]:
    """The parameters the user set (in the params file or by ``--param``)."""
    return set(file_params) | {parse_param(item)[0] for item in overrides}


def stage_inputs(params: dict[str, Any], work: Path, explicit: set[str]) -> dict[str, Any]:
    """Upload the base model and the calibration data to the rehearsal bucket; return the
    parameters that point the pipeline at them (``s3://``)."""
    from shipyard.models.resolve import parse_model_uri, resolve_model

    out: dict[str, Any] = {}
    model = parse_model_uri(str(params.get("model_uri", "")))
    if model.scheme in ("embedded", "file"):
        folder = Path(model.location)
        if model.scheme == "embedded":
            folder = work / "staged-model"
            if not (folder / "config.json").exists():
                run_in_runtime("compress", resolve_model, uri=str(model), out_dir=str(folder))
        name = Path(model.location).name or "model"
        out["model_uri"] = upload_dir(folder, f"s3://{BUCKET}/models/{name}")["uri"]
    if not params.get("calibration_dataset") and "calibration_dataset" not in explicit:
        out["calibration_dataset"] = upload_file(CALIBRATION, f"s3://{BUCKET}/calibration/{CALIBRATION.name}")["uri"]
    return out


def dockerconfig(registry: str) -> str:
    """The ``.dockerconfigjson`` of the contract's ``shipyard-registry`` Secret for ``registry``."""
    auth = base64.b64encode(f"{REGISTRY_USER}:{REGISTRY_PASSWORD}".encode()).decode()
    return json.dumps({"auths": {registry: {"auth": auth}}})


def write_secrets(root: Path, registry: str, kubeconfig: Path) -> None:
    """The files a cluster mounts from Secrets: a kubeconfig and a registry ``.dockerconfigjson``."""
    (root / "kube").mkdir(parents=True, exist_ok=True)
    (root / "registry").mkdir(parents=True, exist_ok=True)
    (root / "kube" / "config").write_text(kubeconfig.read_text())
    (root / "registry" / ".dockerconfigjson").write_text(dockerconfig(registry))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def step_env(contract: dict[str, str], step_log: Path) -> dict[str, str]:
    """Every step's environment: what the contract Secrets give it (:func:`contract_env`: the
    services by their cluster names), the mounted registry auth file and kubeconfig, and the
    machine's OpenMP settings (:data:`HOST_THREAD_ENV`) where it has any."""
    return {
        **contract,
        "SHIPYARD_REGISTRY_AUTH_FILE": f"{SECRETS_MOUNT}/registry/.dockerconfigjson",
        "KUBECONFIG": f"{SECRETS_MOUNT}/kube/config",
        "SHIPYARD_STEP_LOG": str(step_log),
        **OFFLINE_ENV,
        **{name: os.environ[name] for name in HOST_THREAD_ENV if os.environ.get(name)},
    }


def _find_param(summary: RunSummary, component: str, name: str) -> str:
    for step in summary.steps:
        if step.task.rsplit("/", 1)[-1] == component and step.parameters.get(name):
            return str(step.parameters[name])
    return ""


def verify(summary: RunSummary, params: dict[str, Any], services: dict[str, Any]) -> dict[str, Any]:
    """What the run left behind, checked: registry digest, applied object, MLflow runs."""
    import requests

    problems: list[str] = []
    out: dict[str, Any] = {}
    uri = _find_param(summary, "package-champion", "uri")
    out["registry_reference"] = uri
    if not uri.startswith(f"oci://{services['registry'].address}/") or "@sha256:" not in uri:
        problems.append(f"package pushed no registry reference (uri={uri!r})")
    else:
        repo, digest = uri.removeprefix(f"oci://{services['registry'].address}/").split("@", 1)
        resp = requests.head(f"http://{services['registry'].address}/v2/{repo}/manifests/{digest}",
                             auth=(REGISTRY_USER, REGISTRY_PASSWORD), timeout=10,
                             headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        out["digest_resolves"] = resp.status_code == 200
        if resp.status_code != 200:
            problems.append(f"{uri} does not resolve in the registry ({resp.status_code})")
    name, namespace = str(params.get("deploy_name")), str(params.get("namespace"))
    obj = services["kube"].get(name, namespace)
    if obj is None:
        problems.append(f"no LLMInferenceService {namespace}/{name} was applied")
    else:
        conditions = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions", [])}
        out["applied_object"] = {"kind": obj.get("kind"), "namespace": namespace, "name": name,
                                 "model_uri": (obj.get("spec") or {}).get("model", {}).get("uri"),
                                 "ready": conditions.get("Ready") == "True",
                                 "url": (obj.get("status") or {}).get("url", "")}
        if out["applied_object"]["model_uri"] != uri:
            problems.append(f"the applied model.uri {out['applied_object']['model_uri']!r} is not the pushed {uri!r}")
    out["attestations"] = registry_attestations(services["registry"].address, uri) if "@sha256:" in uri else {}
    out["deploy_attestation"] = (deploy_record(summary).get("deployment") or {}).get("attestation") or {}
    if not out["attestations"].get("manifests"):
        problems.append(f"the registry holds no attestations of {uri} ({out['attestations'].get('error', 'none found')})")
    if not out["deploy_attestation"].get("passed"):
        problems.append(f"the deploy step did not verify the attestations: {out['deploy_attestation']}")
    out["verification"] = deploy_verification(summary)
    if out["verification"].get("outcome") != "passed":
        problems.append(f"the deploy step's verification of the served modelcar: {out['verification'].get('outcome', 'no record')}"
                        + (f" ({out['verification']['reason']})" if out["verification"].get("reason") else ""))
    out["mlflow_runs"] = mlflow_runs(services["mlflow"].url, str(params.get("experiment") or "shipyard"))
    if not out["mlflow_runs"]:
        problems.append("MLflow holds no run of this pipeline")
    out["problems"] = problems
    return out


def deploy_record(summary: RunSummary) -> dict[str, Any]:
    """The deploy step's ``decision-record.json`` (``{}`` when it wrote none)."""
    for step in summary.steps:
        path = step.artifacts.get("decision_record") if step.task.rsplit("/", 1)[-1] == "deploy" else None
        if path and Path(path).is_file():
            try:
                return dict(load_decision(path))
            except ShipyardError:
                return {"verification": {"outcome": "unreadable decision record"}}
    return {}


def deploy_verification(summary: RunSummary) -> dict[str, Any]:
    """The deploy step's verification as its decision record holds it: the outcome, the golden
    match and every check (golden outputs, accuracy slice, SLO smoke, ...) with its figures."""
    return dict(deploy_record(summary).get("verification") or {})


def registry_attestations(address: str, uri: str) -> dict[str, Any]:
    """What the registry holds about ``uri``'s digest: the OCI referrers tag ``sha256-<hex>`` (the
    registry has no referrers API: distribution 2.x) and the artifact type of each manifest it lists."""
    import requests

    repo, digest = uri.removeprefix(f"oci://{address}/").split("@", 1)
    tag = fallback_tag(digest)
    resp = requests.get(f"http://{address}/v2/{repo}/manifests/{tag}", timeout=10,
                        auth=(REGISTRY_USER, REGISTRY_PASSWORD),
                        headers={"Accept": "application/vnd.oci.image.index.v1+json"})
    if resp.status_code != 200:
        return {"tag": tag, "error": f"HTTP {resp.status_code}", "manifests": []}
    return {"tag": tag, "manifests": [{"digest": m.get("digest"), "artifactType": m.get("artifactType"),
                                       "predicateType": (m.get("annotations") or {}).get(PREDICATE_ANNOTATION)}
                                      for m in resp.json().get("manifests") or []]}


def twin_refusals(checks: dict[str, Any], work: Path) -> dict[str, Any]:
    """Issue 37's enforcement in the rehearsal's registry (:func:`shipyard.testing.twins.attestation_refusals`):
    an unattested twin and a tampered one of the champion ``checks`` found attested, through
    verify-model's check and the deploy step's with the key the deploy step trusted; each twin not
    refused (and a champion not passed) joins ``checks["problems"]``."""
    from shipyard.core.files import cache_dir
    from shipyard.oci.attestation import generate_key_pair
    from shipyard.testing.twins import attestation_refusals

    if not (checks.get("attestations") or {}).get("manifests"):
        return {"skipped": "the registry holds no attestations of the champion (see problems)"}
    _, public = generate_key_pair(cache_dir() / "attestation")  # the Secret's public-key.pem (attestation_secret_values)
    try:
        out = attestation_refusals(checks["registry_reference"], str(public), work,
                                   credentials=(REGISTRY_USER, REGISTRY_PASSWORD))
    except ShipyardError as err:
        out = {"error": str(err), "problems": [f"the attestation twins could not be checked: {err}"]}
    checks["problems"] += out["problems"]
    return out


def mlflow_runs(url: str, experiment: str) -> list[dict[str, str]]:
    """The runs of ``experiment`` on the server, with their UI URLs."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs = client.search_runs([exp.experiment_id], max_results=50)
    return [{"name": r.info.run_name or "", "status": r.info.status,
             "url": ui_url(url, exp.experiment_id, r.info.run_id)} for r in runs]


def exact_exit_codes() -> None:
    """Make kfp.local's DockerRunner report a step's real exit status (idempotent).

    kfp 2.17 runs each container with ``auto_remove=True`` and, when the container is already
    gone as it asks for the exit status, assumes 0: a failed step "succeeds" with no outputs
    (seen here: a compress step that exited 1 was reported SUCCESS). This keeps the container
    until its status is read, then removes it. It also looks the step's image up by name instead
    of inspecting every image in the store (which failed when another image was removed meanwhile),
    and never pulls: the rehearsal's images are built here.
    """
    from kfp.local import docker_task_handler

    if getattr(docker_task_handler.run_docker_container, "_shipyard", False):
        return

    def run_docker_container(client: Any, image: str, command: list[str], volumes: dict[str, Any],
                             **run_args: Any) -> int:
        import docker

        image = docker_task_handler.add_latest_tag_if_not_present(image=image)
        try:  # one lookup (kfp lists and inspects every image, which fails when one goes meanwhile)
            client.images.get(image)
        except docker.errors.ImageNotFound:
            raise ShipyardError(f"image {image}", "is not in the local image store",
                                "shipyard images build --flavor cpu") from None
        run_args.pop("auto_remove", None)
        container = client.containers.run(image=image, command=command, detach=True, stdout=True, stderr=True,
                                          volumes=volumes, auto_remove=False, **run_args)
        try:
            for line in container.logs(stream=True, follow=True):
                print(line.decode(errors="replace"), end="")
            return int(container.wait()["StatusCode"])
        finally:
            container.remove(force=True)

    run_docker_container._shipyard = True  # type: ignore[attr-defined]
    docker_task_handler.run_docker_container = run_docker_container


def _runner(contract: dict[str, str], hosts: dict[str, str], step_log: Path, secrets: Path) -> Any:
    from docker.types import Mount
    from kfp import local

    return local.DockerRunner(
        network_mode="host",  # steps reach the loopback services
        # the services' cluster names -> 127.0.0.1 in each step's /etc/hosts (podman honours
        # --add-host with the host network; tests/test_container_rehearsal.py checks it)
        extra_hosts=hosts,
        shm_size="1g",  # vLLM's CPU workers need more than the 64 MiB default /dev/shm
        environment=step_env(contract, step_log),
        mounts=[Mount(target=SECRETS_MOUNT, source=str(secrets), type="bind", read_only=True)],
    )


def service_host(name: str, namespace: str) -> str:
    """The in-cluster name of a deployed service (its status URL here), mapped to the loopback."""
    return f"{name}.{namespace}.svc.cluster.local"


#: the start-up the rehearsal's KServe reports at least (MinimumReplicasUnavailable): longer than the
#: deploy's 120 s grace for False conditions, as a GPU start-up is (issue 32, item 2)
REHEARSAL_START_S = 150.0


def modelcar_servers(registry: str, params: dict[str, Any]) -> Any:
    """KServe's part in the rehearsal: every LLMInferenceService the deploy step applies is served
    by a vLLM container (the cpu vllm image) running from the modelcar the package step pushed,
    with the vLLM flags and KV cache of the benchmark config (the measure step's, so greedy answers
    match its golden outputs); the double reports it Ready with ``http://NAME.NS.svc.cluster.local:PORT``
    once ``/v1/models`` answers, and the deploy step verifies through that URL."""
    bench = parse_benchmark_config(params.get("benchmark_config"))
    return ModelcarServers(registry, REGISTRY_USER, REGISTRY_PASSWORD, runtime_image("vllm", "cpu"),
                           url_for=lambda name, ns, port: f"http://{service_host(name, ns)}:{port}",
                           vllm_args=bench["vllm_args"],
                           cpu_kv_cache_gib=int(bench["cpu_kv_cache_gib"]), min_start_s=REHEARSAL_START_S)


def _serve_deploys(stack: contextlib.ExitStack, registry: Any, kube: Any, params: dict[str, Any],
                   hosts: dict[str, str]) -> Any:
    """KServe's part: the deploy's service served from its pushed modelcar (stopped when deleted), its
    cluster name on the loopback; the servers."""
    serving = stack.enter_context(modelcar_servers(registry.address, params))
    serving.watch(kube.double)  # a deleted (rolled-back) service stops its server
    deploy_name, namespace = str(params["deploy_name"]), str(params["namespace"])
    kube.double.script(deploy_name, serving.script)  # KServe's part: serve the pushed modelcar, then Ready
    hosts[service_host(deploy_name, namespace)] = LOOPBACK
    return serving


def _run_steps(pipeline: str, compiled: Path, params: dict[str, Any], work: Path, root: Path, step_log: Path,
               wired: dict[str, Any], secrets: Path) -> RunSummary:
    """Run the compiled pipeline's step containers through kfp.local, one console line per task start
    and end; the run's summary."""
    from kfp import components, local

    before = {p.name for p in root.iterdir()}
    enable_oneof_artifacts()
    exact_exit_codes()
    local.init(runner=_runner(wired["contract"], wired["hosts"], step_log, secrets), pipeline_root=str(root), raise_on_error=False)
    run_started = time.perf_counter()
    component = components.load_component_from_file(str(compiled))
    # as quiet as the local run: one line per task start and end; kfp.local's log, the executor
    # inputs and every step container's output go to the log
    log_path = work / KFP_LOG
    print(f"shipyard: running {pipeline} in containers; kfp.local's log and every step's output: {log_path}",
          flush=True)
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:
        watcher = RunConsole(sys.stdout, log, root, before, step_log, _display_names(component),
                             candidate_labels(params))
        print_before = builtins.print
        try:
            with quiet_kfp(watcher):
                component(**params)
            watcher.settle()
        finally:
            builtins.print = print_before  # kfp.local swaps print per task (see run_local)
    seconds = round(time.perf_counter() - run_started, 2)
    summary = _summarise(pipeline, compiled, root, before, step_log, params, seconds)
    summary.log = str(log_path)
    return summary


def run_container(
    pipeline: str = DEFAULT_PIPELINE,
    work_dir: str = "shipyard-run",
    params_file: str | None = None,
    overrides: list[str] | None = None,
    build: bool = True,
    layout: str = "",
) -> RunSummary:
    """Run ``pipeline`` in its runtime images against loopback services reached by their cluster
    names, in the namespace ``layout`` of pipelines/cluster.yaml (default: its ``layout``); write
    the summary."""
    overrides = overrides or []
    work = Path(work_dir).resolve()
    root = work / "pipeline-root"
    # everything the user gave is checked before anything is written (a bad layout, parameter or work dir
    # leaves no pipeline-root behind) or built
    pipeline_func = get_pipeline(pipeline)
    file_params = load_params_file(params_file) if params_file else {}  # read once: it may be standard input
    params = resolve_params(pipeline_func, file_params, overrides)
    defaults = {k: v for k, v in pipeline_parameters(pipeline_func).items() if v is not None}
    explicit = _user_keys(file_params, overrides)
    plan = LayoutPlan.of(layout)
    _make_pipeline_root(root)
    compiled, built = compile_with_images(pipeline, work / "compiled", build)
    step_log = _empty_step_log(root)
    services_dir = work / "services"
    secrets = work / "secrets"
    started = time.perf_counter()
    with (PodmanSocket(services_dir / "podman") as podman, MotoS3() as s3,
          plan.mlflow_server(services_dir / "mlflow", s3) as mlflow, LocalRegistry(users={REGISTRY_USER: REGISTRY_PASSWORD}, root=services_dir / "registry") as registry,
          plan.kube_api(services_dir / "kube") as kube, contextlib.ExitStack() as stack):
        services = {"podman": podman, "s3": s3, "mlflow": mlflow, "registry": registry, "kube": kube}
        wired = plan.wire(s3, mlflow, registry, kube)  # steps reach each service by its cluster name
        s3.also_named(wired["names"]["s3"])
        os.environ.update(s3.env)
        s3.make_bucket(BUCKET)
        staged = stage_inputs({**defaults, **params}, work, explicit)
        params.update(_rehearsal_params(registry.address, plan.layout["serving_namespace"], staged, explicit))
        serving = _serve_deploys(stack, registry, kube, {**defaults, **params}, wired["hosts"])
        write_secrets(secrets, registry.address, kube.kubeconfig)
        os.environ["DOCKER_HOST"] = podman.docker_host
        summary = _run_steps(pipeline, compiled, params, work, root, step_log, wired, secrets)
        checks = verify(summary, {**defaults, **params}, services)
        checks["twins"] = twin_refusals(checks, work / "twins")  # while the registry is up
        checks["serving"] = serving.timings()
    checks.update(services={"registry": registry.address, "mlflow": mlflow.url, "s3": s3.endpoint,
                            "kubernetes": kube.double.url},
                  cluster_names=wired["names"], hosts=wired["hosts"], mlflow_allowed_hosts=plan.allowed_hosts,
                  mlflow_server=plan.mlflow_image,
                  layout={**plan.layout, "identity": plan.identity},
                  wall_seconds=round(time.perf_counter() - started, 2),
                  images_built=[b.__dict__ for b in built], staged=staged)
    _write_rehearsal_summary(work, summary, checks)
    return summary


def _make_pipeline_root(root: Path) -> None:
    """The pipeline root, checked for the folders above it and open to the steps, which run as
    uid 1001 and create the run folders."""
    check_traversable(root)  # the folders that exist above it
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o777)


def _empty_step_log(root: Path) -> Path:
    """The steps' shared JSON-lines log in the pipeline root, empty and writable by every step."""
    step_log = root / "shipyard-steps.jsonl"
    step_log.write_text("")
    step_log.chmod(0o666)
    return step_log


def _rehearsal_params(registry: str, namespace: str, staged: dict[str, Any], explicit: set[str]) -> dict[str, Any]:
    """The parameters the rehearsal sets: its registry and serving namespace, no dry run, no
    tracking URI, safety off (the cpu vllm image is built without the garak venv: GARAK=0, a shorter
    build), and the staged inputs; what the user set stays theirs unless it was staged."""
    rehearsal = {"registry": registry, "dry_run": False, "tracking_uri": "", "safety": "", "namespace": namespace}
    return {k: v for k, v in {**rehearsal, **staged}.items() if k not in explicit or k in staged}


def _write_rehearsal_summary(work: Path, summary: RunSummary, checks: dict[str, Any]) -> None:
    """``run-summary.json`` with the rehearsal's checks (a problem fails the run), also kept on
    ``summary.rehearsal``."""
    if checks["problems"]:
        summary.status = "FAILURE"
    payload = {**summary.to_dict(), "runner": "container", "rehearsal": checks}
    atomic_write_text(work / "run-summary.json", json.dumps(payload, indent=2, default=str))
    summary.rehearsal = checks  # type: ignore[attr-defined]


def _summarise(pipeline: str, compiled: Path, root: Path, before: set[str], step_log: Path,
               params: dict[str, Any], seconds: float) -> RunSummary:
    from kfp import components

    component = components.load_component_from_file(str(compiled))
    new_runs = sorted(p for p in root.iterdir() if p.name not in before and p.is_dir())
    if not new_runs:
        raise ShipyardError("pipeline", f"{pipeline} produced no run folder under {root} (the step containers "
                            "could not write the pipeline root?)", "see the step logs above")
    run_dir = new_runs[-1]
    steps = collect_steps(run_dir, step_log, _component_runtimes(component))
    display = _display_names(component)
    for step in steps:
        step.name = display.get(step.task.rsplit("/", 1)[-1], "")
        if step.status == "FAILURE" and not step.error:
            step.error = "the container left no executor_output.json (it ended without writing its outputs)"
    failed = [s for s in steps if s.status == "FAILURE"]
    summary = RunSummary(pipeline=pipeline, status="FAILURE" if failed else "SUCCESS", seconds=seconds,
                         run_dir=str(run_dir), parameters=params, steps=steps, **outcome(steps, params))
    summary.gates = gates_of(steps, run_dir)  # the same answer fields as the local run's summary
    return summary


def format_rehearsal(summary: RunSummary, work_dir: str) -> str:
    """The local run's table plus where everything went."""
    checks: dict[str, Any] = getattr(summary, "rehearsal", {})
    lines = [format_summary(summary, work_dir), "", "rehearsal (containers, podman):"]
    layout = checks.get("layout") or {}
    if layout:
        lines.append(f"  layout {layout['name']}: steps in {layout['pipeline_namespace']} as {layout['identity']}, "
                     f"deploy into {layout['serving_namespace']}")
    for service, url in (checks.get("cluster_names") or {}).items():
        lines.append(f"  {service}: {url}")
    mlflow = checks.get("mlflow_server") or {}
    if mlflow:
        lines.append(f"  mlflow server as {mlflow.get('image') or 'its image'} (without: "
                     f"{', '.join(mlflow.get('absent') or []) or 'nothing'}), artifacts to "
                     f"{mlflow.get('artifacts') or 'a local folder'}"
                     f"{' on the S3 double' if str(mlflow.get('artifacts')).startswith('s3://') else ''}")
    lines.append(f"  registry reference: {checks.get('registry_reference') or '-'}"
                 f"  (digest resolves: {checks.get('digest_resolves', False)})")
    obj = checks.get("applied_object") or {}
    if obj:
        lines.append(f"  applied: {obj['kind']} {obj['namespace']}/{obj['name']} Ready={obj['ready']} "
                     f"model.uri={obj['model_uri']}")
    verification = checks.get("verification") or {}
    if verification:
        lines.append(f"  verification through {obj.get('url') or 'the status URL'}: {verification.get('outcome')}")
        for check in verification.get("checks") or []:
            state = "not compared" if check.get("compared") is False else ("pass" if check.get("passed") else "FAIL")
            reference = "" if check.get("reference") is None else f" vs {check.get('reference')}"
            lines.append(f"    {check.get('name')}: {state}  measured {check.get('measured')}{reference}"
                         f" (threshold {check.get('threshold')})")
    for server in checks.get("serving") or []:
        lines.append(f"  {server['service']} served by a vLLM container from {server['ref']}: {server['phase']}"
                     f" (pull {server['pull_seconds']} s, start {server['start_seconds']} s)")
    twins = checks.get("twins") or {}
    for name in ("champion", "unattested", "tampered"):
        if twins.get(name):
            said = "passed" if twins[name]["passed"] else "refused" if twins[name]["refused"] else "NOT refused"
            lines.append(f"  attestation check, {name}{'' if name == 'champion' else ' twin'}: {said}"
                         f" ({twins[name]['verify_model']})")
    for run in checks.get("mlflow_runs", [])[:5]:
        lines.append(f"  mlflow run {run['name'] or '-'} [{run['status']}]: {run['url']}")
    for problem in checks.get("problems", []):
        lines.append(f"  ! {problem}")
    return "\n".join(lines)
