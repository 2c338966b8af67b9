"""Rendering LLMInferenceService manifests: aggregated, P/D, TP, DP, planner, links, scaling, bad input.

Every rendered object is validated against the upstream KServe v1alpha2 CRD schema (unknown
fields rejected) plus the CEL/webhook rules re-implemented in validate.py.
"""

import json
import shlex
from pathlib import Path

import pytest
import yaml
from conftest import VllmArgs

from shipyard.cli.main import main
from shipyard.core.errors import ShipyardError
from shipyard.schemas import SCHEMAS_DIR
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.serving.kserve.validate import validate_documents, validate_file, validate_object

DIGEST = "sha256:" + "ab" * 32
URI = f"oci://registry.example/models/qwen@{DIGEST}"
UPSTREAM_PRESETS = SCHEMAS_DIR / "kserve" / "llmisvcconfig"


def rendered(**params):
    docs = render(parse_config({"name": "llm", "model_uri": URI, **params}))
    problems = validate_documents(docs)
    assert problems == [], [str(p) for p in problems]
    return docs


def main_container(pod: dict) -> dict:
    (container,) = [c for c in pod["containers"] if c["name"] == "main"]
    return container


def vllm_args(pod: dict) -> list[str]:
    env = {e["name"]: e for e in main_container(pod).get("env", [])}
    return shlex.split(env["VLLM_ADDITIONAL_ARGS"]["value"]) if "VLLM_ADDITIONAL_ARGS" in env else []


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_aggregated():
    (svc,) = rendered(replicas=2)
    spec = svc["spec"]
    assert svc["apiVersion"] == "serving.kserve.io/v1alpha2" and svc["kind"] == "LLMInferenceService"
    assert spec["model"] == {"uri": URI, "name": "llm"}
    assert spec["replicas"] == 2 and "prefill" not in spec and "worker" not in spec
    assert spec["router"] == {"gateway": {}, "route": {}, "scheduler": {}}
    assert spec["parallelism"] == {"tensor": 1}
    assert main_container(spec["template"])["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env_names = [e["name"] for e in main_container(spec["template"]).get("env", [])]
    assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in env_names
    assert svc["metadata"]["annotations"]["shipyard.io/oci-digest"] == DIGEST


def test_prefill_decode_disaggregation():
    (svc,) = rendered(prefill_replicas=3, replicas=2)
    spec = svc["spec"]
    assert spec["replicas"] == 2 and spec["prefill"]["replicas"] == 3
    assert spec["router"]["scheduler"] == {}
    for pod, role in ((spec["template"], "kv_consumer"), (spec["prefill"]["template"], "kv_producer")):
        transfer = json.loads(flag(vllm_args(pod), "--kv-transfer-config"))
        assert transfer == {"kv_connector": "NixlConnector", "kv_role": role}
        side = {e["name"]: e for e in main_container(pod)["env"]}["VLLM_NIXL_SIDE_CHANNEL_HOST"]
        assert side["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_kv_both_roles_and_preset_file():
    (svc,) = rendered(preset="pd-nixl", kv_role="both")
    spec = svc["spec"]
    assert spec["baseRefs"] == [{"name": "shipyard-nixl-pd"}]
    roles = {json.loads(flag(vllm_args(p), "--kv-transfer-config"))["kv_role"]
             for p in (spec["template"], spec["prefill"]["template"])}
    assert roles == {"kv_both"}


def test_multi_gpu_tensor_parallel():
    (svc,) = rendered(tensor_parallel=4, prefill_replicas=1, prefill_tensor_parallel=2, gpu_type="NVIDIA-H100-80GB-HBM3",
                      node_selector={"pool": "gpu"}, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    spec = svc["spec"]
    assert spec["parallelism"] == {"tensor": 4} and spec["prefill"]["parallelism"] == {"tensor": 2}
    assert main_container(spec["template"])["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert main_container(spec["prefill"]["template"])["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert spec["template"]["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "dedicated", "operator": "Exists"} in spec["template"]["tolerations"]
    # the presets pass --tensor-parallel-size from spec.parallelism; never twice
    assert "--tensor-parallel-size" not in vllm_args(spec["template"])


def test_single_pod_data_parallel():
    (svc,) = rendered(tensor_parallel=2, data_parallel=4, data_local=4)
    spec = svc["spec"]
    assert spec["parallelism"] == {"tensor": 2, "data": 4, "dataLocal": 4}
    assert "worker" not in spec
    assert main_container(spec["template"])["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert flag(vllm_args(spec["template"]), "--data-parallel-size") == "4"


def test_multi_node_data_expert_parallel():
    (svc,) = rendered(preset="dp-ep-multinode")
    spec = svc["spec"]
    assert spec["parallelism"] == {"tensor": 1, "data": 16, "dataLocal": 8, "expert": True}
    assert main_container(spec["worker"])["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # multi-node: the worker-data-parallel presets own the data-parallel flags
    assert "--data-parallel-size" not in vllm_args(spec["template"])


def test_planner_sizes_vllm(tmp_path):
    from shipyard.serving.planner import plan_memory

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = parse_config({"name": "llm", "model_uri": URI, "gpu_memory_gib": 80, "tensor_parallel": 2, "gpus": 2,
                        "planner": {"max_model_len": 4096, "max_num_seqs": 64, "gpu_memory_utilization": 0.85}})
    (svc,) = render(cfg, json.loads((tmp_path / "config.json").read_text()))
    args = vllm_args(svc["spec"]["template"])
    plan = plan_memory(config, gpu_memory_gib=80, gpu_count=2, tensor_parallel_size=2, max_model_len=4096,
                       max_num_seqs=64, gpu_memory_utilization=0.85)
    assert flag(args, "--max-model-len") == str(plan.max_model_len) == "4096"
    assert flag(args, "--max-num-seqs") == "64" and flag(args, "--gpu-memory-utilization") == "0.85"
    assert "--tensor-parallel-size" not in args
    # user vllm_args win over the planner's
    cfg.vllm_args = {"max_num_seqs": 32}
    assert flag(vllm_args(render(cfg, config)[0]["spec"]["template"]), "--max-num-seqs") == "32"
    # a model that cannot fit is refused in one line
    with pytest.raises(ShipyardError, match="does not fit"):
        render(parse_config({"name": "llm", "model_uri": URI, "gpu_memory_gib": 8}), config)


def test_fast_start_and_links():
    (svc,) = rendered(fast_start=True, mlflow_model_name="qwen-w8a8", mlflow_model_version="7",
                      pipeline_run_id="0f4c1a2e-5b6d-4e7f-8a9b-0c1d2e3f4a5b")
    meta = svc["metadata"]
    assert flag(vllm_args(svc["spec"]["template"]), "--load-format") == "runai_streamer"
    assert meta["labels"]["shipyard.io/mlflow-model-version"] == "7"
    assert meta["labels"]["shipyard.io/pipeline-run"] == "0f4c1a2e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
    assert meta["annotations"]["shipyard.io/mlflow-model-name"] == "qwen-w8a8"
    assert meta["annotations"]["shipyard.io/oci-digest"] == DIGEST
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "shipyard"


def test_wva_scaling_replaces_replicas():
    (svc,) = rendered(prefill_replicas=1, scaling={"mode": "wva", "min_replicas": 1, "max_replicas": 6,
                                                    "actuator": "keda", "prefill_max_replicas": 3})
    spec = svc["spec"]
    assert "replicas" not in spec and "replicas" not in spec["prefill"]
    assert spec["scaling"] == {"minReplicas": 1, "maxReplicas": 6, "wva": {"keda": {}}}
    assert spec["prefill"]["scaling"]["maxReplicas"] == 3


def test_wva_gets_the_accelerator_label_kserve_copies_onto_its_variant_autoscalings():
    """KServe v0.20 copies spec.labels / spec.prefill.labels' inference.optimization/acceleratorName onto
    the VariantAutoscaling it creates for WVA ("unknown" without it); validated against the vendored CRD."""
    label = "inference.optimization/acceleratorName"
    (svc,) = rendered(prefill_replicas=1, gpu_type="NVIDIA-H100-80GB-HBM3", scaling={"mode": "wva", "max_replicas": 4})
    assert svc["spec"]["labels"] == {label: "NVIDIA-H100-80GB-HBM3"}
    assert svc["spec"]["prefill"]["labels"] == {label: "NVIDIA-H100-80GB-HBM3"}
    (own,) = rendered(gpu_type="NVIDIA-H100-80GB-HBM3", scaling={"mode": "wva", "accelerator_name": "H100"})
    assert own["spec"]["labels"] == {label: "H100"}
    assert own["spec"]["template"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    keda = rendered(gpu_type="NVIDIA-H100-80GB-HBM3", scaling={"mode": "keda", "max_replicas": 4})[0]
    assert "labels" not in keda["spec"]  # WVA only
    assert "labels" not in rendered(scaling={"mode": "wva"})[0]["spec"]  # nothing to say: the deploy step warns


def test_keda_scaled_objects():
    svc, decode, prefill = rendered(preset="autoscale-keda", namespace="serving")
    assert "replicas" not in svc["spec"]
    assert decode["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-kserve"}
    assert prefill["spec"]["scaleTargetRef"]["name"] == "llm-kserve-prefill"
    trigger = decode["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["threshold"] == "5"
    assert trigger["metadata"]["query"].startswith('sum(vllm:num_requests_waiting{namespace="serving"')


def test_router_references():
    (svc,) = rendered(router={"gateway": [{"name": "inference-gw", "namespace": "gateways"}],
                              "route": ["llm-route"], "scheduler": {"pool": "shared-pool"}}, prefill_replicas=1)
    assert svc["spec"]["router"] == {"gateway": {"refs": [{"name": "inference-gw", "namespace": "gateways"}]},
                                     "route": {"http": {"refs": [{"name": "llm-route"}]}},
                                     "scheduler": {"pool": {"ref": {"name": "shared-pool"}}}}


@pytest.mark.parametrize(
    ("params", "field", "text"),
    [
        ({"tensor_parallel": 3, "gpus": 4}, "deploy_config.tensor_parallel", "does not divide the 4 GPUs"),
        ({"prefill_replicas": 2, "router": {"scheduler": "none"}}, "deploy_config.router.scheduler", "needs the llm-d scheduler"),
        ({"pipeline_parallel": 2, "data_parallel": 4, "data_local": 2}, "deploy_config.pipeline_parallel", "data parallelism"),
        ({"model_uri": "oci://registry.example/models/qwen:v1"}, "deploy_config.model_uri", "mutable tag 'v1'"),
        ({"model_uri": "oci://registry.example/models/qwen"}, "deploy_config.model_uri", "mutable tag 'latest'"),
        ({"model_uri": "/local/folder"}, "deploy_config.model_uri", "not a URI KServe can load"),
        ({"data_parallel": 4}, "deploy_config.data_local", "set together"),
        ({"name": "Bad_Name"}, "deploy_config.name", "DNS-1035"),
        # a final newline is no name (the rule of shipyard.core.k8s_names: \Z, not $)
        ({"name": "llm\n"}, "deploy_config.name", "DNS-1035"),
        ({"namespace": "serving\n"}, "deploy_config.namespace", "not a valid namespace"),
        ({"base_refs": ["config-llm-template\n"]}, "deploy_config.base_refs", "LLMInferenceServiceConfig names"),
        ({"model_uri": "hf://org/m", "oci_digest": DIGEST + "\n"}, "deploy_config.oci_digest", "is not a sha256 digest"),
        ({"replicaz": 2}, "deploy_config.replicaz", "not a deploy parameter"),
        ({"vllm_args": {"tensor_parallel_size": 2}}, "deploy_config.vllm_args", "--tensor-parallel-size"),
        ({"gpus": 4}, "deploy_config.gpus", "uses 1"),
        ({"scaling": {"mode": "wva", "min_replicas": 5, "max_replicas": 2}}, "deploy_config.scaling", "valid range"),
        ({"scaling": {"mode": "wva", "accelerator_name": "H100 80GB"}}, "deploy_config.scaling.accelerator_name",
         "not a Kubernetes label value"),
        ({"gpu_type": "x" * 64, "scaling": {"mode": "wva"}}, "deploy_config.gpu_type", "not a Kubernetes label value"),
        ({"scaling": {"mode": "wva", "accelerator_name": "H100\n"}}, "deploy_config.scaling.accelerator_name",
         "not a Kubernetes label value"),
        ({"scaling": {"mode": "keda", "accelerator_name": "H100"}}, "deploy_config.scaling.accelerator_name",
         "only applies to WVA"),
        ({"planner": {"max_len": 5}}, "deploy_config.planner.max_len", "not a planner option"),
        ({"preset": "nope"}, "deploy_config.preset", "unknown preset"),
    ],
)
def test_bad_input_is_one_line(params, field, text):
    with pytest.raises(ShipyardError) as info:
        render(parse_config({"name": "llm", "model_uri": URI, **params}))
    err = info.value
    assert err.field == field and text in str(err)
    assert "\n" not in str(err) and err.fix


def test_mutable_tag_allowed_when_asked():
    (svc,) = render(parse_config({"name": "llm", "model_uri": "oci://registry.example/m:v1", "allow_mutable_tag": True}))
    assert svc["spec"]["model"]["uri"] == "oci://registry.example/m:v1"
    assert "shipyard.io/oci-digest" not in svc["metadata"]["annotations"]


# --- the validator itself ----------------------------------------------------------------------

def _svc(**spec):
    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": {"name": "llm", "namespace": "default"}, "spec": {"model": {"uri": URI}, **spec}}


@pytest.mark.parametrize(
    ("spec", "path", "text"),
    [
        ({"replicaz": 1}, "spec", "Additional properties are not allowed ('replicaz'"),
        ({"template": {"containers": [{"name": "main", "imagePolicy": "x"}]}}, "spec.template.containers[0]", "imagePolicy"),
        ({"replicas": -1}, "spec.replicas", "less than the minimum"),
        ({"parallelism": {"tensor": 0}}, "spec.parallelism.tensor", "less than the minimum"),
        ({"replicas": 1, "scaling": {"maxReplicas": 2, "wva": {"hpa": {}}}}, "spec", "mutually exclusive"),
        ({"scaling": {"maxReplicas": 2}}, "spec.scaling", "wva is required"),
        ({"scaling": {"minReplicas": 3, "maxReplicas": 2, "wva": {"hpa": {}}}}, "spec.scaling", "cannot exceed"),
        ({"parallelism": {"pipeline": 2, "data": 4, "dataLocal": 2}}, "spec.parallelism", "pipeline parallelism and data"),
        ({"parallelism": {"data": 4}}, "spec.parallelism.dataLocal", "dataLocal must be set"),
        ({"worker": {"containers": [{"name": "main"}]}}, "spec.worker", "parallelism must be configured"),
        ({"template": {"containers": [{"name": "main", "ports": [{"containerPort": 8000}, {"containerPort": 8000}]}]}},
         "spec.template.containers[0].ports[1]", "duplicate entry"),
    ],
)
def test_validator_rejects(spec, path, text):
    problems = validate_object(_svc(**spec))
    assert any(p.path == path and text in p.message for p in problems), [str(p) for p in problems]


@pytest.mark.parametrize(
    ("meta", "path", "text"),
    [
        ({"name": "Llm"}, "metadata.name", "not a valid DNS-1123 subdomain"),
        ({"name": "llm\n"}, "metadata.name", "not a valid DNS-1123 subdomain"),
        ({"name": "llm..pd"}, "metadata.name", "not a valid DNS-1123 subdomain"),
        ({"name": "x" * 254}, "metadata.name", "not a valid DNS-1123 subdomain"),
        ({"namespace": "default\n"}, "metadata.namespace", "not a valid DNS-1123 label"),
        ({"namespace": "team.prod"}, "metadata.namespace", "not a valid DNS-1123 label"),
        ({"namespace": "n" * 64}, "metadata.namespace", "not a valid DNS-1123 label"),
    ],
)
def test_validator_rejects_metadata_names(meta, path, text):
    """The API server's name rules (``shipyard.core.k8s_names``): a name is a DNS-1123 subdomain, a
    namespace a DNS-1123 label; a final newline is neither."""
    doc = _svc()
    doc["metadata"].update(meta)
    problems = validate_object(doc)
    assert any(p.path == path and text in p.message for p in problems), [str(p) for p in problems]


@pytest.mark.parametrize(
    ("meta", "path", "text"),
    [
        ({"labels": {"app": "llm\n"}}, "metadata.labels.app", "not a valid label value"),
        ({"labels": {"app\n": "llm"}}, "metadata.labels.app\n", "not a valid label key"),
        ({"annotations": {"note\n": "x"}}, "metadata.annotations.note\n", "not a valid annotation key"),
    ],
)
def test_validator_rejects_a_final_newline_in_labels(meta, path, text):
    """Label keys, label values and annotation keys: ``\\Z``, not ``$`` (which also matches before a final
    newline, so ``"llm\\n"`` passed)."""
    doc = _svc()
    doc["metadata"].update(meta)
    problems = validate_object(doc)
    assert any(p.path == path and text in p.message for p in problems), [str(p) for p in problems]


def test_validator_metadata_and_unknown_kinds():
    bad = _svc()
    bad["metadata"]["labels"] = {"shipyard.io/oci-digest": DIGEST}  # ':' is not allowed in label values
    assert any("label value" in p.message for p in validate_object(bad))
    wrong_version = {**_svc(), "apiVersion": "serving.kserve.io/v1beta9"}
    assert any("no upstream schema" in p.message for p in validate_object(wrong_version))


def test_upstream_presets_pass_the_validator():
    files = sorted(UPSTREAM_PRESETS.glob("config-*.yaml"))
    assert len(files) >= 10
    for path in files:
        assert validate_file(path) == [], path


# --- CLI -------------------------------------------------------------------------------------------

def test_cli_dry_run_writes_a_valid_pd_manifest(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"namespace": "serving", "vllm_args": {"max-model-len": 8192},
                                      "mlflow_model_version": "3"}))
    out = tmp_path / "llm.yaml"
    code = main(["deploy", "--dry-run", "--name", "llm", "--model-uri", URI, "--prefill-replicas", "2",
                 "--decode-replicas", "1", "--tensor-parallel", "2", "--params-file", str(params), "--out-file", str(out),
                 "-o", "json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "DryRun" and result["mode"] == "pd"
    (svc,) = yaml.safe_load_all(out.read_text())
    assert svc["metadata"]["namespace"] == "serving" and svc["spec"]["prefill"]["replicas"] == 2
    assert flag(vllm_args(svc["spec"]["template"]), "--max-model-len") == "8192"
    assert main(["validate", str(out)]) == 0


def test_cli_bad_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "llm.yaml"
    code = main(["deploy", "--dry-run", "--name", "llm", "--model-uri", "oci://r.example/m:latest", "--out-file", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and "mutable tag" in err


def test_cli_validate_reports_problems(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_svc(replicaz=1)))
    assert main(["validate", str(bad)]) == 1
    assert "replicaz" in capsys.readouterr().out


# --- the KFP component through kfp.local (the local pipeline's dry run) -----------------------------

LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 16384,
                "torch_dtype": "bfloat16", "tie_word_embeddings": True}


def test_component_dry_run_with_kfp_local(tmp_path):
    import kfp.local
    from kfp import dsl
    from kfp.dsl import Artifact, Output

    from shipyard.components.deploy.component import deploy

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def candidate(config_json: str, model_files: Output[Artifact]):
        import os

        os.makedirs(model_files.path, exist_ok=True)  # the package step's model_files: config, no weights
        with open(os.path.join(model_files.path, "config.json"), "w") as fh:
            fh.write(config_json)

    @dsl.pipeline(name="deploy-dry-run")
    def pipeline(model_uri: str):
        made = candidate(config_json=json.dumps(LLAMA_CONFIG))
        deploy(model_uri=model_uri, name="llm", namespace="serving", dry_run=True,
               model_files=made.outputs["model_files"],
               deploy_config=json.dumps({"preset": "pd-nixl", "gpu_memory_gib": 24,
                                         "planner": {"max_model_len": 8192}}))

    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    pipeline(model_uri=URI)
    (manifest,) = tmp_path.rglob("deploy/manifest")
    (svc,) = yaml.safe_load_all(manifest.read_text())
    assert validate_object(svc) == []
    assert svc["spec"]["model"]["uri"] == URI and "prefill" in svc["spec"]
    args = vllm_args(svc["spec"]["prefill"]["template"])
    assert flag(args, "--max-model-len") == "8192" and "--gpu-memory-utilization" in args


def test_component_without_model_artifact(tmp_path):
    import kfp.local

    from shipyard.components.deploy.component import deploy

    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    task = deploy(model_uri=URI, name="llm", namespace="serving", deploy_config="{}", dry_run=True)
    assert task.outputs["status"] == "DryRun" and task.outputs["url"] == ""
    assert task.outputs["manifest"].metadata["mode"] == "aggregated"
    # no champion record reached the step: the decision_record output says the verification did not run
    record = json.loads(open(task.outputs["decision_record"].path).read())
    assert record["verification"]["outcome"] == "not run"
    (svc,) = yaml.safe_load_all(Path(task.outputs["manifest"].path).read_text())
    assert svc["spec"]["replicas"] == 1


def test_schemas_ship_inside_the_package(tmp_path, monkeypatch):
    """No environment variable and nothing outside the package decides what is validated."""
    import shipyard
    from shipyard.serving.kserve import validate
    monkeypatch.setenv("SHIPYARD_UPSTREAM_DIR", str(tmp_path))  # an old setting: changes nothing now
    validate._crd_index.cache_clear()
    validate._validator.cache_clear()
    assert validate.upstream_dir().is_relative_to(Path(shipyard.__file__).parent)
    validate.require_valid([_svc(replicas=1)])
    bad = _svc(replicas=1)
    bad["spec"]["replicaz"] = 2
    with pytest.raises(ShipyardError, match="replicaz"):
        validate.require_valid([bad])
    manifest = tmp_path / "svc.yaml"
    manifest.write_text(yaml.safe_dump(bad))
    assert any("replicaz" in p.message for p in validate_file(manifest))


# --- the two fields that rendered as something else (issue 21) --------------------------------------

def env_of(pod: dict) -> dict:
    return {e["name"]: e for e in main_container(pod).get("env", [])}


def test_env_value_from_a_secret_renders_as_value_from():
    ref = {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    (svc,) = rendered(env={"HF_TOKEN": {"valueFrom": ref}, "MODE": {"value": "x"}, "LEVEL": "DEBUG"})
    env = env_of(svc["spec"]["template"])
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": ref}
    assert env["MODE"] == {"name": "MODE", "value": "x"} and env["LEVEL"]["value"] == "DEBUG"


def test_scheduler_pool_with_inline_config_keeps_the_config():
    config = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
              "plugins": [{"type": "pd-profile-handler", "parameters": {"threshold": 100}}]}
    (svc,) = rendered(prefill_replicas=1, router={"scheduler": {"pool": "shared", "config": config}})
    assert svc["spec"]["router"]["scheduler"] == {"pool": {"ref": {"name": "shared"}}, "config": {"inline": config}}


# --- typed options: each renders as the CRD field and validates ------------------------------------

def test_probes_from_a_startup_time():
    (svc,) = rendered(probes={"startup_seconds": 4800, "liveness": {"period_seconds": 30, "failure_threshold": 5},
                              "readiness": {"period_seconds": 5, "timeout_seconds": 2}})
    main = main_container(svc["spec"]["template"])
    assert main["startupProbe"] == {"periodSeconds": 10, "failureThreshold": 480}
    assert main["livenessProbe"] == {"periodSeconds": 30, "failureThreshold": 5}
    assert main["readinessProbe"] == {"periodSeconds": 5, "timeoutSeconds": 2}
    (svc,) = rendered(probes={"startup_seconds": 95, "period_seconds": 30})  # rounded up, never short
    assert main_container(svc["spec"]["template"])["startupProbe"] == {"periodSeconds": 30, "failureThreshold": 4}


def test_service_account_pull_secrets_resources_rdma_shm():
    (svc,) = rendered(prefill_replicas=1, service_account="llm-runner", image_pull_secrets=["quay-pull"],
                      resources={"requests": {"cpu": "8", "memory": "64Gi", "ephemeral-storage": "100Gi"},
                                 "limits": {"cpu": "16", "memory": "128Gi"}},
                      extra_resources={"rdma/roce_gdr": 1}, shm_size="32Gi")
    for pod in (svc["spec"]["template"], svc["spec"]["prefill"]["template"]):
        assert pod["serviceAccountName"] == "llm-runner" and pod["imagePullSecrets"] == [{"name": "quay-pull"}]
        res = main_container(pod)["resources"]
        assert res["requests"] == {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi", "ephemeral-storage": "100Gi",
                                   "rdma/roce_gdr": "1"}
        assert res["limits"] == {"nvidia.com/gpu": "1", "cpu": "16", "memory": "128Gi", "rdma/roce_gdr": "1"}
        assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]


def test_secret_env():
    (svc,) = rendered(secret_env={"HF_TOKEN": {"secret": "hf-token", "key": "token"}, "API_KEY": "api-keys"})
    env = env_of(svc["spec"]["template"])
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert env["API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "api-keys", "key": "API_KEY"}}


def test_per_pool_vllm_args_win_over_the_shared_ones():
    (svc,) = rendered(prefill_replicas=1, vllm_args={"max-num-seqs": 128, "max-model-len": 8192},
                      prefill={"vllm_args": {"max-num-batched-tokens": 16384, "max-num-seqs": 16}},
                      decode={"vllm_args": {"max-num-seqs": 256}})
    decode, prefill = vllm_args(svc["spec"]["template"]), vllm_args(svc["spec"]["prefill"]["template"])
    assert flag(decode, "--max-num-seqs") == "256" and "--max-num-batched-tokens" not in decode
    assert flag(prefill, "--max-num-seqs") == "16" and flag(prefill, "--max-num-batched-tokens") == "16384"
    assert flag(prefill, "--max-model-len") == flag(decode, "--max-model-len") == "8192"


def test_planner_sizes_each_pool_at_its_own_tensor_parallelism():
    cfg = parse_config({"name": "llm", "model_uri": URI, "gpu_memory_gib": 24, "tensor_parallel": 2,
                        "prefill_replicas": 1, "prefill_tensor_parallel": 1})
    (svc,) = render(cfg, LLAMA_CONFIG)
    decode, prefill = vllm_args(svc["spec"]["template"]), vllm_args(svc["spec"]["prefill"]["template"])
    assert int(flag(decode, "--max-model-len")) >= int(flag(prefill, "--max-model-len"))
    assert validate_documents([svc]) == []


def test_scheduler_config_ref():
    (svc,) = rendered(router={"scheduler": {"config_ref": {"name": "epp-config", "key": "config.yaml"}}})
    assert svc["spec"]["router"]["scheduler"] == {"config": {"ref": {"name": "epp-config", "key": "config.yaml"}}}


def test_kv_cache_offloading_aggregated_is_the_crd_field():
    tiers = [{"fileSystem": {"emptyDir": {"size": "200Gi"}}}]
    (svc,) = rendered(kv_cache_offloading={"cpu": "100Gi", "eviction_policy": "arc", "secondary": tiers})
    assert svc["spec"]["kvCacheOffloading"] == {"cpu": "100Gi", "evictionPolicy": "arc", "secondary": tiers}
    assert "--kv-transfer-config" not in vllm_args(svc["spec"]["template"])  # the preset renders the connector


def test_kv_cache_offloading_with_pd_chains_the_connectors():
    (svc,) = rendered(prefill_replicas=1, kv_cache_offloading={"cpu": "64Gi"})
    spec = svc["spec"]
    assert spec["kvCacheOffloading"] == spec["prefill"]["kvCacheOffloading"] == {"cpu": "64Gi", "evictionPolicy": "lru"}
    for pod, role in ((spec["template"], "kv_consumer"), (spec["prefill"]["template"], "kv_producer")):
        transfer = json.loads(flag(vllm_args(pod), "--kv-transfer-config"))
        assert transfer["kv_connector"] == "MultiConnector" and transfer["kv_role"] == role
        nixl, offload = transfer["kv_connector_extra_config"]["connectors"]
        assert nixl == {"kv_connector": "NixlConnector", "kv_role": role}
        assert offload["kv_connector"] == "OffloadingConnector"
        assert offload["kv_connector_extra_config"] == {"cpu_bytes_to_use": 64 * 2**30, "eviction_policy": "lru"}


def test_lora_adapters_and_served_model_name():
    (svc,) = rendered(served_model_name="qwen2-7b", lora={
        "adapters": [{"name": "sql", "uri": "hf://org/sql-lora"}, {"name": "chat", "uri": "s3://adapters/chat"}],
        "max_adapters": 4, "max_rank": 16})
    assert svc["spec"]["model"] == {"uri": URI, "name": "qwen2-7b", "lora": {
        "adapters": [{"name": "sql", "uri": "hf://org/sql-lora"}, {"name": "chat", "uri": "s3://adapters/chat"}],
        "maxAdapters": 4, "maxRank": 16}}



def test_an_adapter_named_like_the_served_model_is_refused_in_one_line():
    """Issue 32 minor: an adapter taking the served model's name (served_model_name, else
    model_name, else the service's name) passed shipyard and failed at apply; it is refused here,
    naming the adapter's field."""
    adapters = {"adapters": [{"name": "sql", "uri": "hf://org/sql-lora"}, {"name": "qwen2-7b", "uri": "s3://a/b"}]}
    with pytest.raises(ShipyardError) as err:
        parse_config({"served_model_name": "qwen2-7b", "lora": adapters}, name="llm", namespace="ns", model_uri=URI)
    assert err.value.field == "deploy_config.lora.adapters[1].name" and "served model's name" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ShipyardError, match=r"lora.adapters\[0\].name: 'llm' is also the served model's name"):
        parse_config({"lora": {"adapters": [{"name": "llm", "uri": "hf://org/x"}]}}, name="llm", namespace="ns",
                     model_uri=URI)
    parse_config({"served_model_name": "base", "lora": adapters}, name="llm", namespace="ns", model_uri=URI)

def test_precise_prefix_cache_preset_keeps_vllm_and_the_scheduler_in_step():
    (svc,) = rendered(served_model_name="qwen", router={"scheduler": {"preset": "precise-prefix-cache", "block_size": 32,
                                                                      "hash_seed": 7}})
    inline = svc["spec"]["router"]["scheduler"]["config"]["inline"]
    producer = next(p for p in inline["plugins"] if p["type"] == "precise-prefix-cache-producer")
    assert producer["parameters"]["tokenProcessorConfig"]["blockSize"] == 32
    assert producer["parameters"]["kvEventsConfig"]["podDiscoveryConfig"]["socketPort"] == 5557
    args = vllm_args(svc["spec"]["template"])
    assert flag(args, "--block-size") == "32" and flag(args, "--prefix-caching-hash-algo") == "sha256_cbor"
    events = json.loads(flag(args, "--kv-events-config"))
    assert events == {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557",
                      "topic": "kv@$(POD_IP)@qwen"}
    names = [e["name"] for e in main_container(svc["spec"]["template"])["env"]]
    assert names.index("POD_IP") < names.index("VLLM_ADDITIONAL_ARGS")  # Kubernetes expands $(POD_IP) in order
    assert env_of(svc["spec"]["template"])["PYTHONHASHSEED"]["value"] == "7"


def test_latency_predictor_preset_names_the_vendored_config():
    (svc,) = rendered(router={"scheduler": {"preset": "latency-predictor"}})
    assert {"name": "kserve-config-llm-scheduler-latency-predictor"} in svc["spec"]["baseRefs"]
    preset = yaml.safe_load((UPSTREAM_PRESETS / "config-llm-scheduler-latency-predictor.yaml").read_text())
    assert preset["metadata"]["name"] == "kserve-config-llm-scheduler-latency-predictor"
    plugins = {p["type"] for p in svc["spec"]["router"]["scheduler"]["config"]["inline"]["plugins"]}
    assert {"predicted-latency-producer", "latency-scorer"} <= plugins


def test_inference_objectives_next_to_the_service():
    svc, premium, batch = rendered(objectives=[{"name": "premium", "priority": 10}, {"name": "batch", "priority": -1,
                                                                                     "pool": "shared-pool"}])
    assert premium["apiVersion"] == "inference.networking.x-k8s.io/v1alpha2" and premium["kind"] == "InferenceObjective"
    assert premium["spec"] == {"poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                           "name": "llm-inference-pool"}, "priority": 10}
    assert batch["spec"]["poolRef"]["name"] == "shared-pool" and batch["metadata"]["namespace"] == "default"
    (_, ref) = rendered(router={"scheduler": {"pool": "team-pool"}}, objectives=[{"name": "gold"}])
    assert ref["spec"] == {"poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "team-pool"}}


# --- template mode -----------------------------------------------------------------------------------

SCHED_CONFIG = {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig",
                "plugins": [{"type": "pd-profile-handler", "parameters": {"threshold": 512}},
                            {"type": "prefix-cache-scorer"}, {"type": "max-score-picker"}],
                "schedulingProfiles": [{"name": "decode", "plugins": [{"pluginRef": "prefix-cache-scorer", "weight": 2}]},
                                       {"name": "prefill", "plugins": [{"pluginRef": "max-score-picker"}]}]}


def user_pd_template() -> dict:
    """A team's own P/D LLMInferenceService: probes, RDMA, shm, secret env, inline scheduler config."""
    def pod(args: str | None) -> dict:
        env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
               {"name": "NCCL_IB_GID_INDEX", "value": "3"}]
        if args:
            env.insert(0, {"name": "VLLM_ADDITIONAL_ARGS", "value": args})
        return {"serviceAccountName": "llm-runner",
                "containers": [{"name": "main", "env": env,
                                "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/roce_gdr": "1", "memory": "512Gi"},
                                              "requests": {"nvidia.com/gpu": "8", "rdma/roce_gdr": "1", "memory": "256Gi",
                                                           "cpu": "32"}},
                                "startupProbe": {"httpGet": {"path": "/health", "port": 8000, "scheme": "HTTPS"},
                                                 "periodSeconds": 10, "failureThreshold": 480},
                                "livenessProbe": {"httpGet": {"path": "/health", "port": 8000, "scheme": "HTTPS"},
                                                  "periodSeconds": 30, "timeoutSeconds": 30, "failureThreshold": 5},
                                "securityContext": {"capabilities": {"add": ["IPC_LOCK", "SYS_RAWIO"]}}}],
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}

    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": {"name": "team-llm", "namespace": "prod", "labels": {"team": "search"},
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "roce-p2"}},
            "spec": {"model": {"uri": "hf://old/model", "name": "team/model"},
                     "replicas": 2, "parallelism": {"tensor": 8},
                     "router": {"gateway": {}, "route": {}, "scheduler": {"config": {"inline": SCHED_CONFIG}}},
                     "template": pod("--max-num-seqs 64 --kv-transfer-config '{\"kv_connector\":\"NixlConnector\","
                                     "\"kv_role\":\"kv_both\"}'"),
                     "prefill": {"replicas": 4, "parallelism": {"tensor": 8}, "template": pod(None)}}}


def without_shipyard_fields(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["spec"]["model"].pop("uri")
    for key in ("labels", "annotations"):
        doc["metadata"][key] = {k: v for k, v in doc["metadata"][key].items()
                                if not k.startswith(("shipyard.io/", "app.kubernetes.io/"))}
    return doc


def test_one_parser_reads_the_whole_deploy_config():
    """parse_deploy_config (the pre-flight, the deploy step, shipyard deploy and check): the render
    parameters, apply, verify, rollout and attestation, typed, without changing what it was given."""
    from shipyard.params.deploy import parse_deploy_config

    raw = {"preset": "aggregated", "apply": {"wait_timeout_s": 4800, "false_grace_s": 0},
           "verify": {"enabled": False, "min_match_rate": 0.8},
           "rollout": {"strategy": "canary", "route": {"name": "llm-route"}},
           "attestation": {"require": False, "max_age_days": 7}}
    before = json.dumps(raw, sort_keys=True)
    got = parse_deploy_config(raw, name="llm", model_uri=URI)
    assert json.dumps(raw, sort_keys=True) == before
    assert got.config.name == "llm" and got.params == {"preset": "aggregated"}
    assert got.apply["wait_timeout_s"] == 4800.0 and got.apply["false_grace_s"] == 0.0 and got.apply["poll_s"] == 5.0
    assert got.verify == {"enabled": False, "dry_run": False, "settings": {"min_match_rate": 0.8}}
    assert got.rollout == {"strategy": "canary", "steps": [10, 50, 100], "route": {"name": "llm-route", "namespace": None}}
    assert got.attestation == {"require": False, "key": "", "insecure_tls": False, "max_age_days": 7}
    assert render(got.config) == render(parse_config({"preset": "aggregated"}, name="llm", model_uri=URI))
    assert parse_deploy_config(json.dumps(raw), name="llm", model_uri=URI) == got


@pytest.mark.parametrize(
    ("raw", "field", "text"),
    [
        ({"apply": {"poll_s": "abc"}}, "deploy_config.apply.poll_s", "'abc' is not a number of seconds"),
        ({"apply": {"poll_s": True}}, "deploy_config.apply.poll_s", "True is not a number of seconds"),
        ({"apply": {"wait_timeout_s": 0}}, "deploy_config.apply.wait_timeout_s", "not a number of seconds"),
        ({"apply": {"pol_s": 1}}, "deploy_config.apply.pol_s", "not an apply option"),
        ({"apply": [1]}, "deploy_config.apply", "must be an object"),
        ({"verify": {"enabled": "no"}}, "deploy_config.verify.enabled", "not true or false"),
        ({"rollout": {"strategy": "big-bang"}}, "deploy_config.rollout.strategy", "not a strategy"),
        ({"replicaz": 2}, "deploy_config.replicaz", "not a deploy parameter"),
        ("[1]", "deploy_config", "must be a JSON object"),
    ],
)
def test_the_deploy_config_parser_fails_in_one_line(raw, field, text):
    from shipyard.params.deploy import parse_deploy_config

    with pytest.raises(ShipyardError) as info:
        parse_deploy_config(raw, name="llm", model_uri=URI)
    assert info.value.field == field and text in str(info.value) and "\n" not in str(info.value)


def test_template_round_trip_keeps_every_field():
    template = user_pd_template()
    docs = render(parse_config({"template": template, "model_uri": URI, "mlflow_model_version": "7"}))
    assert validate_documents(docs) == []
    (svc,) = docs
    assert svc["spec"]["model"]["uri"] == URI and svc["spec"]["model"]["name"] == "team/model"
    assert svc["metadata"]["labels"]["shipyard.io/mlflow-model-version"] == "7"
    assert svc["metadata"]["annotations"]["shipyard.io/oci-digest"] == DIGEST
    assert without_shipyard_fields(svc) == without_shipyard_fields(template)
    # the same as YAML text (what --template FILE and an s3:// object give)
    (again,) = render(parse_config({"template": yaml.safe_dump(template), "model_uri": URI, "mlflow_model_version": "7"}))
    assert again == svc


def test_template_gets_planner_args_only_where_it_sets_none():
    template = user_pd_template()
    cfg = parse_config({"template": template, "model_uri": URI, "name": "canary", "namespace": "staging",
                        "gpu_memory_gib": 80, "served_model_name": "qwen"})
    (svc,) = render(cfg, LLAMA_CONFIG)
    assert svc["metadata"]["name"] == "canary" and svc["metadata"]["namespace"] == "staging"
    assert svc["spec"]["model"]["name"] == "qwen"
    assert svc["spec"]["template"] == template["spec"]["template"]  # it set its own arguments
    added = vllm_args(svc["spec"]["prefill"]["template"])
    assert "--max-model-len" in added and "--gpu-memory-utilization" in added and "--tensor-parallel-size" not in added
    assert validate_documents([svc]) == []


def test_template_objectives_use_the_template_pool():
    template = user_pd_template()
    _, obj = render(parse_config({"template": template, "model_uri": URI, "objectives": [{"name": "premium", "priority": 5}]}))
    assert obj["spec"]["poolRef"]["name"] == "team-llm-inference-pool" and obj["metadata"]["namespace"] == "prod"
    template["spec"]["router"]["scheduler"] = {"pool": {"ref": {"name": "team-pool"}}}
    _, obj = render(parse_config({"template": template, "model_uri": URI, "objectives": [{"name": "premium"}]}))
    assert obj["spec"]["poolRef"]["name"] == "team-pool"
    del template["spec"]["router"]["scheduler"]
    with pytest.raises(ShipyardError, match="no spec.router.scheduler"):
        render(parse_config({"template": template, "model_uri": URI, "objectives": [{"name": "premium"}]}))


def test_template_takes_tuned_args_only_where_it_sets_none_and_never_over_base_refs():
    template = user_pd_template()
    tuned = {"max-num-batched-tokens": 4096, "enable-chunked-prefill": True}
    (svc,) = render(parse_config({"template": template, "model_uri": URI, "tuned_vllm_args": tuned}))
    assert svc["spec"]["template"] == template["spec"]["template"]
    added = vllm_args(svc["spec"]["prefill"]["template"])
    assert flag(added, "--max-num-batched-tokens") == "4096" and "--enable-chunked-prefill" in added
    template["spec"]["baseRefs"] = [{"name": "team-pd-config"}]  # it may set VLLM_ADDITIONAL_ARGS itself
    (svc,) = render(parse_config({"template": template, "model_uri": URI, "tuned_vllm_args": tuned,
                                  "gpu_memory_gib": 80}), LLAMA_CONFIG)
    assert without_shipyard_fields(svc) == without_shipyard_fields(template)


def test_template_model_name_defaults_to_the_service_name():
    template = user_pd_template()
    del template["spec"]["model"]["name"]
    template["spec"]["model"].pop("uri")
    (svc,) = render(parse_config({"template": template, "model_uri": URI}))
    assert svc["spec"]["model"] == {"name": "team-llm", "uri": URI}


def test_v1alpha1_template_is_converted_like_kserve():
    template = user_pd_template()
    template["apiVersion"] = "serving.kserve.io/v1alpha1"
    template["spec"]["model"]["criticality"] = "Critical"
    template["spec"]["model"]["lora"] = {"adapters": [{"name": "a", "uri": "hf://o/a", "criticality": "Sheddable"},
                                                      {"name": "b", "uri": "hf://o/b"}]}
    template["spec"]["router"]["scheduler"] = {"pool": {"spec": {
        "selector": {"app": "team-llm"}, "targetPortNumber": 8000,
        "extensionRef": {"name": "team-epp", "portNumber": 9002, "failureMode": "FailOpen"}}}}
    (svc,) = render(parse_config({"template": template, "model_uri": URI}))
    assert validate_documents([svc]) == []
    assert svc["apiVersion"] == "serving.kserve.io/v1alpha2" and "criticality" not in svc["spec"]["model"]
    notes = svc["metadata"]["annotations"]
    assert notes["internal.serving.kserve.io/model-criticality"] == "Critical"
    assert json.loads(notes["internal.serving.kserve.io/lora-criticalities"]) == {"0": "Sheddable"}
    assert svc["spec"]["model"]["lora"]["adapters"] == [{"name": "a", "uri": "hf://o/a"}, {"name": "b", "uri": "hf://o/b"}]
    assert svc["spec"]["router"]["scheduler"]["pool"]["spec"] == {
        "selector": {"matchLabels": {"app": "team-llm"}}, "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"name": "team-epp", "failureMode": "FailOpen", "port": {"number": 9002}}}


def test_cli_template_dry_run(tmp_path, capsys):
    template = tmp_path / "team.yaml"
    template.write_text(yaml.safe_dump(user_pd_template()))
    out = tmp_path / "out.yaml"
    assert main(["deploy", "--dry-run", "--template", str(template), "--model-uri", URI, "--out-file", str(out),
                 "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["name"] == "team-llm" and result["namespace"] == "prod"
    (svc,) = yaml.safe_load_all(out.read_text())
    assert without_shipyard_fields(svc) == without_shipyard_fields(user_pd_template())
    assert main(["deploy", "--dry-run", "--template", str(template), "--name", "other", "--model-uri", URI,
                 "--out-file", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["metadata"]["name"] == "other"


def test_template_from_s3(monkeypatch, tmp_path):
    from shipyard.models.s3 import upload_file
    from shipyard.testing.services import MotoS3

    with MotoS3() as s3:
        s3.make_bucket("manifests")
        for key, value in s3.env.items():
            monkeypatch.setenv(key, value)
        path = tmp_path / "team.yaml"
        path.write_text(yaml.safe_dump(user_pd_template()))
        uri = upload_file(path, "s3://manifests/llm/team.yaml")["uri"]
        (svc,) = render(parse_config({"template": uri, "model_uri": URI}))
        assert without_shipyard_fields(svc) == without_shipyard_fields(user_pd_template())
        with pytest.raises(ShipyardError, match="cannot read s3://manifests/llm/none.yaml"):
            parse_config({"template": "s3://manifests/llm/none.yaml", "model_uri": URI})
        # with a name (the pipeline always gives one) the object is read when rendering, in the deploy
        # step; the pre-flight, which has no S3 credentials, checks the URI's form only
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
        cfg = parse_config({"template": uri, "model_uri": URI, "name": "llm"})
        assert cfg.template == uri
        with pytest.raises(ShipyardError, match="cannot read s3://manifests/llm/team.yaml"):
            render(cfg)


def _bad_template(**changes):
    template = user_pd_template()
    template["spec"].update(changes)
    return template


@pytest.mark.parametrize(
    ("params", "field", "text"),
    [
        # bad input for every new deploy_config field
        ({"env": {"HF_TOKEN": {"secretKeyRef": {"name": "s", "key": "k"}}}}, "deploy_config.env.HF_TOKEN", "neither a value"),
        ({"env": {"N": ["a"]}}, "deploy_config.env.N", "not text"),
        ({"env": {"1 bad": "x"}}, "deploy_config.env", "not a valid environment variable name"),
        ({"env": {"VLLM_LOGGING_LEVEL\n": "x"}}, "deploy_config.env", "not a valid environment variable name"),
        ({"secret_env": {"HF_TOKEN": {"secret": "Bad_Name"}}}, "deploy_config.secret_env.HF_TOKEN", "does not name a Secret"),
        ({"secret_env": {"HF_TOKEN": "hf-token\n"}}, "deploy_config.secret_env.HF_TOKEN", "does not name a Secret"),
        ({"secret_env": {"HF_TOKEN": "hf..token"}}, "deploy_config.secret_env.HF_TOKEN", "does not name a Secret"),
        ({"secret_env": {"X": "s"}, "env": {"X": "v"}}, "deploy_config.secret_env.X", "also set in env"),
        ({"secret_env": ["HF_TOKEN"]}, "deploy_config.secret_env", "must be an object"),
        ({"probes": {"startup_seconds": -5}}, "deploy_config.probes.startup_seconds", "positive number"),
        ({"probes": {"startup_seconds": "1h"}}, "deploy_config.probes.startup_seconds", "positive number"),
        ({"probes": {"period_seconds": 0}}, "deploy_config.probes.period_seconds", "from 1 to 2147483647"),
        ({"probes": {"liveness": {"period": 10}}}, "deploy_config.probes.liveness.period", "not a probe timing"),
        ({"probes": {"liveness": {"success_threshold": 2}}}, "deploy_config.probes.liveness.success_threshold", "must be 1"),
        ({"probes": {"startup": 10}}, "deploy_config.probes.startup", "not a deploy parameter"),
        ({"probes": 600}, "deploy_config.probes", "must be an object"),
        ({"service_account": "Bad SA"}, "deploy_config.service_account", "not a ServiceAccount"),
        ({"service_account": "llm-runner\n"}, "deploy_config.service_account", "not a ServiceAccount"),
        # image: "preset" or a plain image reference (the default: the image the benchmark ran)
        ({"image": "oci://quay.io/org/vllm:0.32.0"}, "deploy_config.image", "not a container image reference"),
        ({"image": "quay.io/org/vllm 0.32.0"}, "deploy_config.image", "not a container image reference"),
        ({"image": "Quay.io/Org/VLLM:1"}, "deploy_config.image", "not a container image reference"),
        ({"image": "quay.io/org/vllm@sha256:abc"}, "deploy_config.image", "not a container image reference"),
        ({"image": "presets"}, "deploy_config.image", "not a container image reference"),
        ({"image": ""}, "deploy_config.image", "not a container image reference"),
        ({"image": "quay.io/org/vllm:"}, "deploy_config.image", "not a container image reference"),
        ({"image": "quay.io/org/vllm:0.32.0\n"}, "deploy_config.image", "not a container image reference"),
        ({"image": 5}, "deploy_config.image", "text"),
        ({"image_pull_secrets": "quay"}, "deploy_config.image_pull_secrets", "list of Secret names"),
        ({"image_pull_secrets": ["quay-pull\n"]}, "deploy_config.image_pull_secrets", "list of Secret names"),
        ({"resources": {"requests": {"cpu": "16"}, "limits": {"cpu": "8"}}}, "deploy_config.resources.requests.cpu",
         "above the limit"),
        ({"resources": {"requests": {"memory": "lots"}}}, "deploy_config.resources.requests.memory", "not a resource quantity"),
        ({"resources": {"requests": {"memory": "64Gi\n"}}}, "deploy_config.resources.requests.memory",
         "not a resource quantity"),
        ({"resources": {"requests": {"memory\n": "64Gi"}}}, "deploy_config.resources.requests", "not a resource name"),
        ({"resources": {"limit": {"cpu": "1"}}}, "deploy_config.resources.limit", "not requests or limits"),
        ({"resources": {"limits": {"nvidia.com/gpu": "2"}}}, "deploy_config.resources.limits.nvidia.com/gpu", "use gpus"),
        ({"resources": {"requests": {"cpu": "2"}}, "cpu": "4"}, "deploy_config.resources.cpu", "given twice"),
        ({"extra_resources": {"roce": 1}}, "deploy_config.extra_resources", "not an extended resource"),
        ({"extra_resources": {"rdma/roce_gdr\n": 1}}, "deploy_config.extra_resources", "not an extended resource"),
        ({"extra_resources": {"rdma/roce_gdr": 0.5}}, "deploy_config.extra_resources.rdma/roce_gdr", "whole count"),
        ({"shm_size": "lots"}, "deploy_config.shm_size", "not a resource quantity"),
        ({"shm_size": "8Gi\n"}, "deploy_config.shm_size", "not a resource quantity"),
        ({"kv_cache_offloading": {"cpu": "100Gi\n"}}, "deploy_config.kv_cache_offloading.cpu", "not a resource quantity"),
        ({"shm_size": "10"}, "deploy_config.shm_size", "below 1Mi"),
        ({"prefill": {"vllm_args": {"x": 1}}}, "deploy_config.prefill", "no prefill pool"),
        ({"decode": {"args": {}}}, "deploy_config.decode.args", "not a per-pool option"),
        ({"decode": {"vllm_args": ["--x"]}}, "deploy_config.decode.vllm_args", "must map flag names"),
        ({"prefill_replicas": 1, "prefill": {"vllm_args": {"kv-transfer-config": "{}"}}},
         "deploy_config.prefill.vllm_args", "--kv-transfer-config"),
        ({"router": {"scheduler": {"pool": "p", "configs": {}}}}, "deploy_config.router.scheduler.configs",
         "not a scheduler option"),
        ({"router": {"scheduler": {"config": {"a": 1}, "config_ref": {"name": "c", "key": "k"}}}},
         "deploy_config.router.scheduler.config_ref", "cannot be combined"),
        ({"router": {"scheduler": {"config": "plugins: []"}}}, "deploy_config.router.scheduler.config", "EndpointPickerConfig"),
        ({"router": {"scheduler": {"config_ref": {"name": "c"}}}}, "deploy_config.router.scheduler.config_ref", "its key"),
        ({"router": {"scheduler": {"preset": "fastest"}}}, "deploy_config.router.scheduler.preset", "unknown preset"),
        ({"router": {"scheduler": {"block_size": 16}}}, "deploy_config.router.scheduler.block_size", "only applies"),
        ({"router": {"scheduler": {"preset": "precise-prefix-cache", "block_size": 0}}},
         "deploy_config.router.scheduler.block_size", ">= 1"),
        ({"router": {"scheduler": {"preset": "precise-prefix-cache"}}, "vllm_args": {"block-size": 16}},
         "deploy_config.vllm_args", "differs from the scheduler's block_size"),
        ({"router": {"scheduler": {"preset": "precise-prefix-cache"}}, "vllm_args": {"kv-events-config": "{}"}},
         "deploy_config.vllm_args", "set by router.scheduler.preset"),
        ({"kv_cache_offloading": {"size": "1Gi"}}, "deploy_config.kv_cache_offloading.size", "not an offloading option"),
        ({"kv_cache_offloading": {"eviction_policy": "lru"}}, "deploy_config.kv_cache_offloading.cpu", "is required"),
        ({"kv_cache_offloading": {"cpu": "100Gi", "eviction_policy": "fifo"}},
         "deploy_config.kv_cache_offloading.eviction_policy", "unknown policy"),
        ({"prefill_replicas": 1, "kv_cache_offloading": {"cpu": "1Gi", "secondary": [{"fileSystem": {}}]}},
         "deploy_config.kv_cache_offloading.secondary", "prefill/decode"),
        ({"lora": {"adapters": []}}, "deploy_config.lora.adapters", "at least one adapter"),
        ({"lora": {"adapters": [{"name": "a", "uri": "oci://r/a@sha256:" + "0" * 64}]}}, "deploy_config.lora.adapters[0].uri",
         "kserve#6094"),
        ({"lora": {"adapters": [{"name": "a", "uri": "/tmp/a"}]}}, "deploy_config.lora.adapters[0].uri", "not an adapter URI"),
        ({"lora": {"adapters": [{"name": "sql\n", "uri": "hf://o/a"}]}}, "deploy_config.lora.adapters[0].name",
         "not an adapter name"),
        ({"lora": {"adapters": [{"name": "a", "uri": "hf://o/a"}, {"name": "a", "uri": "hf://o/b"}]}},
         "deploy_config.lora.adapters[1].name", "listed twice"),
        ({"lora": {"adapters": [{"name": "a", "uri": "hf://o/a", "rank": 8}]}}, "deploy_config.lora.adapters[0]",
         "exactly name and uri"),
        ({"lora": {"adapters": [{"name": "a", "uri": "hf://o/a"}], "max_rank": 0}}, "deploy_config.lora.max_rank", ">= 1"),
        ({"lora": {"adapters": [{"name": "a", "uri": "hf://o/a"}, {"name": "b", "uri": "hf://o/b"}], "max_adapters": 1}},
         "deploy_config.lora.max_adapters", "below the 2 adapters"),
        ({"served_model_name": ""}, "deploy_config.served_model_name", "not a model name"),
        ({"objectives": [{"name": "Gold"}]}, "deploy_config.objectives[0].name", "DNS-1123"),
        ({"objectives": [{"name": "gold\n"}]}, "deploy_config.objectives[0].name", "DNS-1123"),
        ({"objectives": [{"name": "gold", "pool": "team-pool\n"}]}, "deploy_config.objectives[0].pool", "InferencePool name"),
        ({"objectives": [{"name": "gold", "priority": "high"}]}, "deploy_config.objectives[0].priority", "integer"),
        ({"objectives": [{"name": "gold", "weight": 1}]}, "deploy_config.objectives[0].weight", "not an objective option"),
        ({"objectives": [{"name": "gold"}], "router": {"scheduler": "none"}}, "deploy_config.objectives", "'none'"),
        ({"objectives": {"gold": 1}}, "deploy_config.objectives", "must be a list"),
        # template mode
        ({"template": user_pd_template(), "replicas": 3}, "deploy_config.replicas", "set by the template"),
        ({"template": user_pd_template(), "preset": "pd-nixl"}, "deploy_config.preset", "cannot be combined"),
        ({"template": _bad_template(replicaz=2)}, "deploy_config.template", "replicaz"),
        ({"template": {**user_pd_template(), "kind": "InferenceService"}}, "deploy_config.template", "not an LLMInferenceService"),
        ({"template": "a: [b"}, "deploy_config.template", "not valid YAML"),
        ({"template": "apiVersion: serving.kserve.io/v1alpha2\nkind: LLMInferenceService\nmetadata: {name: a}\n"
                      "spec: {replicas: 1, replicas: 2}\n"}, "deploy_config.template", "given twice"),
        ({"template": "/path/to/llm.yaml"}, "deploy_config.template", "not an LLMInferenceService"),
        ({"template": 42}, "deploy_config.template", "not an LLMInferenceService"),
        ({"template": "s3://bucket-only"}, "deploy_config.template", "names a bucket"),
        # the apply timeouts, checked by the one deploy_config parser (the pre-flight's and the deploy step's)
        ({"apply": {"wait_timeout_s": "soon"}}, "deploy_config.apply.wait_timeout_s", "not a number of seconds"),
        ({"apply": {"poll_s": 0}}, "deploy_config.apply.poll_s", "not a number of seconds"),
        ({"apply": {"wait": 10}}, "deploy_config.apply.wait", "not an apply option"),
        ({"apply": [10]}, "deploy_config.apply", "must be an object"),
    ],
)
def test_new_fields_bad_input_is_one_line(params, field, text):
    from shipyard.params.deploy import parse_deploy_config

    with pytest.raises(ShipyardError) as info:
        render(parse_deploy_config({"name": "llm", "model_uri": URI, **params}).config)
    err = info.value
    assert err.field == field and text in str(err), str(err)
    assert "\n" not in str(err) and err.fix


@pytest.mark.slow
def test_vllm_parses_the_rendered_arguments(vllm_args: VllmArgs) -> None:
    """vLLM 0.32's own argument parser (the vllm runtime) accepts what the pods get in
    VLLM_ADDITIONAL_ARGS: the P/D + offloading connector chain and the KV-event settings."""
    (svc,) = rendered(prefill_replicas=1, kv_cache_offloading={"cpu": "8Gi"}, served_model_name="qwen",
                      router={"scheduler": {"preset": "precise-prefix-cache"}},
                      prefill={"vllm_args": {"max-num-batched-tokens": 8192}})
    lines = [env_of(pod)["VLLM_ADDITIONAL_ARGS"]["value"] for pod in (svc["spec"]["template"], svc["spec"]["prefill"]["template"])]
    parsed = [{k: v for k, v in vllm_args.parse(line).items() if k != "buckets"} for line in lines]
    assert parsed == [{"block_size": 64, "hash": "sha256_cbor", "events": "kv@$(POD_IP)@qwen", "transfer": "MultiConnector"}] * 2
