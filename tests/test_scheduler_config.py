"""Scheduler configs vs KServe v0.20 (issue 32, item 5).

KServe v0.20 runs llm-d-router v0.9.0 as the endpoint picker (its vendored config-llm-scheduler
preset), whose config loader decodes EndpointPickerConfig strictly as ``llm-d.ai/v1alpha1`` or the
deprecated ``inference.networking.x-k8s.io/v1alpha1``: anything else and the scheduler pod does not
start. An inline config replaces KServe's generated one whole, so on a P/D service it must carry a
P/D profile: shipyard renders its routing preset onto KServe's P/D profile, and refuses a user's
config that would drop it.
"""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from shipyard.core.errors import ShipyardError
from shipyard.schemas import SCHEMAS_DIR
from shipyard.serving import cluster_check as cc
from shipyard.serving.kserve.config import EPP_CONFIG_APIS, TARGET_KSERVE, parse_config
from shipyard.serving.kserve.render import render
from shipyard.serving.kserve.validate import validate_documents

URI = "oci://registry.example/models/qwen@sha256:" + "0" * 64
V1ALPHA1 = "llm-d.ai/v1alpha1"
AGGREGATED_CONFIG = {"apiVersion": V1ALPHA1, "kind": "EndpointPickerConfig",
                     "plugins": [{"type": "single-profile-handler"}, {"type": "queue-scorer"}, {"type": "max-score-picker"}],
                     "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": "queue-scorer", "weight": 1},
                                                                            {"pluginRef": "max-score-picker"}]}]}
PD_CONFIG = {"apiVersion": V1ALPHA1, "kind": "EndpointPickerConfig",
             "plugins": [{"type": "prefill-filter"}, {"type": "decode-filter"}, {"type": "max-score-picker"},
                         {"type": "always-disagg-pd-decider"},
                         {"type": "disagg-profile-handler", "parameters": {"deciders": {"prefill": "always-disagg-pd-decider"}}}],
             "schedulingProfiles": [{"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"},
                                                                    {"pluginRef": "max-score-picker"}]},
                                    {"name": "decode", "plugins": [{"pluginRef": "decode-filter"},
                                                                   {"pluginRef": "max-score-picker"}]}]}


def rendered(**params: object) -> dict:
    docs = render(parse_config({"name": "llm", "namespace": "serving", "model_uri": URI, **params}))
    assert validate_documents(docs) == []
    return docs[0]


def inline(svc: dict) -> dict:
    return svc["spec"]["router"]["scheduler"]["config"]["inline"]


def profiles(config: dict) -> dict[str, list[str]]:
    return {p["name"]: [ref["pluginRef"] for ref in p["plugins"]] for p in config["schedulingProfiles"]}


def test_the_table_names_the_endpoint_picker_the_vendored_kserve_ships() -> None:
    """The targeted KServe is the vendored one, and its scheduler preset runs the picker the table
    says decodes llm-d.ai/v1alpha1 (a newer vendored KServe makes this fail until the table says
    what its picker decodes)."""
    sources = (SCHEMAS_DIR / "SOURCES.md").read_text()
    assert f"| kserve/kserve | v{TARGET_KSERVE[0]}.{TARGET_KSERVE[1]}.0 |" in sources
    preset = yaml.safe_load((SCHEMAS_DIR / "kserve" / "llmisvcconfig" / "config-llm-scheduler.yaml").read_text())
    (main,) = [c for c in preset["spec"]["router"]["scheduler"]["template"]["containers"] if c["name"] == "main"]
    assert main["image"] == "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.9.0"
    picker, accepted = EPP_CONFIG_APIS[TARGET_KSERVE]
    assert picker == "llm-d-router v0.9.0" and accepted == (V1ALPHA1, "inference.networking.x-k8s.io/v1alpha1")


@pytest.mark.parametrize("params", [
    {"router": {"scheduler": {"preset": "precise-prefix-cache"}}},
    {"prefill_replicas": 1, "router": {"scheduler": {"preset": "precise-prefix-cache"}}},
    {"router": {"scheduler": {"preset": "latency-predictor"}}},
], ids=["precise-prefix-cache", "precise-prefix-cache P/D", "latency-predictor"])
def test_every_routing_preset_renders_the_api_version_kserve_v020_decodes(params: dict) -> None:
    assert inline(rendered(**params))["apiVersion"] == V1ALPHA1


@pytest.mark.parametrize("lora", [False, True])
def test_precise_prefix_cache_on_pd_is_merged_onto_kserves_pd_profile(lora: bool) -> None:
    """KServe's P/D profile (disaggregation handlers, prefill and decode profiles with their filters)
    with the precise producer feeding the prefix-cache scorer in both; every pluginRef resolves;
    both pools publish the KV events the producer reads."""
    extra = {"lora": {"adapters": [{"name": "sql", "uri": "hf://org/sql-lora"}]}} if lora else {}
    svc = rendered(prefill_replicas=1, router={"scheduler": {"preset": "precise-prefix-cache", "block_size": 32}}, **extra)
    config = inline(svc)
    types = [p["type"] for p in config["plugins"]]
    assert len(types) == len(set(types))
    assert {"disagg-headers-handler", "disagg-profile-handler", "always-disagg-pd-decider", "prefill-filter",
            "decode-filter", "token-producer", "precise-prefix-cache-producer"} <= set(types)
    assert "single-profile-handler" not in types
    handler = next(p for p in config["plugins"] if p["type"] == "disagg-profile-handler")
    assert handler["parameters"]["deciders"] == {"prefill": "always-disagg-pd-decider"}
    scorer = next(p for p in config["plugins"] if p["type"] == "prefix-cache-scorer")
    assert scorer["parameters"] == {"prefixMatchInfoProducerName": "precise-prefix-cache-producer"}
    producer = next(p for p in config["plugins"] if p["type"] == "precise-prefix-cache-producer")
    assert producer["parameters"]["tokenProcessorConfig"]["blockSize"] == 32
    by_profile = profiles(config)
    assert set(by_profile) == {"prefill", "decode"}
    assert by_profile["prefill"][0] == "prefill-filter" and by_profile["decode"][0] == "decode-filter"
    for refs in by_profile.values():
        assert "prefix-cache-scorer" in refs and set(refs) <= set(types)
        assert ("lora-affinity-scorer" in refs) == lora
    for pool in (svc["spec"]["template"], svc["spec"]["prefill"]["template"]):
        (main,) = [c for c in pool["containers"] if c["name"] == "main"]
        args = shlex.split(next(e["value"] for e in main["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS"))
        assert json.loads(args[args.index("--kv-events-config") + 1])["publisher"] == "zmq"
        assert args[args.index("--block-size") + 1] == "32"


def test_a_pd_config_with_its_own_pd_profile_is_kept_as_given() -> None:
    svc = rendered(prefill_replicas=1, router={"scheduler": {"config": PD_CONFIG}})
    assert inline(svc) == PD_CONFIG
    legacy = {**PD_CONFIG, "apiVersion": "inference.networking.x-k8s.io/v1alpha1"}  # deprecated, still decoded
    assert inline(rendered(router={"scheduler": {"config": legacy}}, prefill_replicas=1)) == legacy


def pd_template(scheduler_config: dict) -> dict:
    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService", "metadata": {"name": "llm"},
            "spec": {"model": {"uri": "hf://org/m"}, "prefill": {"replicas": 1},
                     "router": {"gateway": {}, "route": {}, "scheduler": {"config": scheduler_config}}}}


@pytest.mark.parametrize(("params", "field", "says"), [
    ({"router": {"scheduler": {"config": {**AGGREGATED_CONFIG, "apiVersion": "llm-d.ai/v1"}}}},
     "deploy_config.router.scheduler.config.apiVersion", "not decoded by KServe v0.20's endpoint picker"),
    ({"router": {"scheduler": {"config": {"plugins": []}}}}, "deploy_config.router.scheduler.config",
     "kind: EndpointPickerConfig"),
    ({"prefill_replicas": 1, "router": {"scheduler": {"config": AGGREGATED_CONFIG}}},
     "deploy_config.router.scheduler.config", "P/D routing would be silently lost"),
    ({"prefill_replicas": 1, "router": {"scheduler": {"config_ref": {"name": "epp", "key": "config.yaml"}}}},
     "deploy_config.router.scheduler.config_ref", "cannot check"),
    ({"prefill_replicas": 1, "router": {"scheduler": {"preset": "latency-predictor"}}},
     "deploy_config.router.scheduler.preset", "no prefill/decode profile"),
    ({"template": pd_template({"inline": AGGREGATED_CONFIG})},
     "deploy_config.template.spec.router.scheduler.config.inline", "P/D routing would be silently lost"),
    ({"template": pd_template({"inline": {**PD_CONFIG, "apiVersion": "llm-d.ai/v1"}})},
     "deploy_config.template.spec.router.scheduler.config.inline.apiVersion", "not decoded"),
    ({"template": pd_template({"ref": {"name": "epp", "key": "config.yaml"}})},
     "deploy_config.template.spec.router.scheduler.config.ref", "cannot check"),
], ids=["api-version", "not-epp-config", "pd-config-without-pd-profile", "pd-config-ref", "pd-latency-predictor",
        "pd-template-config", "template-api-version", "pd-template-ref"])
def test_a_config_that_would_not_start_or_would_drop_pd_is_one_line(params: dict, field: str, says: str) -> None:
    with pytest.raises(ShipyardError) as info:
        parse_config({"name": "llm", "model_uri": URI, **params})
    err = info.value
    assert err.field == field and says in err.problem, str(err)
    assert "\n" not in str(err) and err.fix


def test_check_names_a_kserve_whose_picker_cannot_decode_the_config() -> None:
    """KServe v0.18/v0.19 ship llm-d-inference-scheduler v0.7.1 (GIE's loader: the GIE group only);
    shipyard check says so for a deploy config that renders llm-d.ai/v1alpha1, and passes v0.20."""
    precise = parse_config({"name": "llm", "model_uri": URI, "router": {"scheduler": {"preset": "precise-prefix-cache"}}})
    old = cc.kserve_version_check("kserve/kserve-controller:v0.19.1", precise)
    assert old.status == "fail" and "decodes only inference.networking.x-k8s.io/v1alpha1" in old.detail, old.line()
    assert "\n" not in old.line() and "(fix: " in old.line()
    assert cc.kserve_version_check("kserve/kserve-controller:v0.20.0", precise).status == "pass"
    managed = parse_config({"name": "llm", "model_uri": URI})
    assert cc.kserve_version_check("kserve/kserve-controller:v0.19.1", managed).status == "warn"  # KServe's own config
