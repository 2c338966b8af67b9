"""Rendering LLMInferenceService manifests: aggregated, P/D, TP, DP, planner, links, scaling, bad input.

Every rendered object is validated against the upstream KServe v1alpha2 CRD schema (unknown
fields rejected) plus the CEL/webhook rules re-implemented in validate.py.
"""

import json
import shlex
from pathlib import Path

import pytest
import yaml

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
        ({"replicaz": 2}, "deploy_config.replicaz", "not a deploy parameter"),
        ({"vllm_args": {"tensor_parallel_size": 2}}, "deploy_config.vllm_args", "--tensor-parallel-size"),
        ({"gpus": 4}, "deploy_config.gpus", "uses 1"),
        ({"scaling": {"mode": "wva", "min_replicas": 5, "max_replicas": 2}}, "deploy_config.scaling", "valid range"),
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
    from kfp.dsl import Model, Output

    from shipyard.components.deploy.component import deploy

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def candidate(config_json: str, model: Output[Model]):
        import os

        os.makedirs(model.path, exist_ok=True)
        with open(os.path.join(model.path, "config.json"), "w") as fh:
            fh.write(config_json)

    @dsl.pipeline(name="deploy-dry-run")
    def pipeline(model_uri: str):
        made = candidate(config_json=json.dumps(LLAMA_CONFIG))
        deploy(model_uri=model_uri, name="llm", namespace="serving", dry_run=True, model=made.outputs["model"],
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
