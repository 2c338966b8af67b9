"""Progressive rollout (deploy_config.rollout, shipyard/serving/kserve/rollout.py) against the
Kubernetes API double serving every CRD a complete install has (HTTPRoute and InferencePool from the
vendored Gateway API and inference-extension CRDs: the double rejects any field they lack).

The kubernetes client is the real one; each step's check here reads the route as the double stores
it (the real verification per step runs in tests/test_deploy_verify.py against vLLM servers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.serving.kserve.apply import Kube, api_client
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.serving.kserve.rollout import (
    canary_rollout,
    rollout_options,
    weighted_route,
    weights_of,
)
from shipyard.serving.kserve.validate import validate_object
from shipyard.steps.deploy import run_deploy
from shipyard.testing.k8s_double import FULL_INSTALL_GROUPS, K8sDouble, ready_after

OLD = "oci://registry.example/models/tiny@sha256:" + "0" * 64
NEW = "oci://registry.example/models/tiny@sha256:" + "1" * 64
ROUTE_KEY = ("httproutes", "serving", "llm-route")
POOL = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}


def route(pool: str = "llm-inference-pool") -> dict[str, Any]:
    """The user's HTTPRoute: the Gateway's traffic for the model goes to the running service's pool."""
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "llm-route", "namespace": "serving", "labels": {"team": "ml"}},
            "spec": {"parentRefs": [{"name": "inference-gateway"}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                "backendRefs": [{**POOL, "name": pool}]}]}}


def seeded(double: K8sDouble) -> None:
    old = render(parse_config({"name": "llm", "namespace": "serving", "model_uri": OLD, "prefill_replicas": 1}))[0]
    double.put(old, status=ready_after(0, url="http://gw.example/serving/llm")(old, 0))
    double.put(route(), plural="httproutes")


@pytest.fixture
def double():
    with K8sDouble(groups=FULL_INSTALL_GROUPS) as server:
        seeded(server)
        yield server


def changes(double: K8sDouble) -> list[str]:
    """The applied objects, in order: 'PATCH llminferenceservices/llm-canary', 'DELETE ...'."""
    return [f"{method} {path.split('/namespaces/serving/')[1]}" for method, path in double.requests
            if method in ("PATCH", "DELETE")]


def test_rollout_options_and_their_one_line_errors() -> None:
    assert rollout_options(None) == {"strategy": "replace"}
    assert rollout_options({"strategy": "canary", "route": {"name": "r"}})["steps"] == [10, 50, 100]
    for bad, field in [({"strategy": "blue-green"}, "deploy_config.rollout.strategy"),
                       ({"strategy": "canary", "steps": [50, 10, 100], "route": {"name": "r"}}, "deploy_config.rollout.steps"),
                       ({"strategy": "canary", "steps": [10, 50], "route": {"name": "r"}}, "deploy_config.rollout.steps"),
                       ({"strategy": "canary", "steps": [0, 100], "route": {"name": "r"}}, "deploy_config.rollout.steps"),
                       ({"strategy": "canary"}, "deploy_config.rollout.route"),
                       ({"strategy": "replace", "steps": [100]}, "deploy_config.rollout"),
                       ({"strategy": "canary", "route": {"name": "r"}, "speed": 2}, "deploy_config.rollout.speed")]:
        with pytest.raises(ShipyardError) as err:
            rollout_options(bad)
        assert err.value.field == field


def test_every_weighted_route_is_valid_against_the_vendored_crd() -> None:
    for weight in (10, 50, 100):
        body = weighted_route(route(), "llm-inference-pool", "llm-canary-inference-pool", weight)
        assert not validate_object(body), validate_object(body)
        expected = {"llm-canary-inference-pool": weight} | ({"llm-inference-pool": 100 - weight} if weight < 100 else {})
        assert weights_of(body) == expected
    with pytest.raises(ShipyardError, match="no rule whose backendRefs send to InferencePool other"):
        weighted_route(route(), "other", "new", 10)


def _canary(double: K8sDouble, tmp_path: Path, check: Any) -> dict[str, Any]:
    kube = Kube(api_client(str(double.kubeconfig(tmp_path / "kc", namespace="serving")), timeout_s=5), timeout_s=5)
    docs = render(parse_config({"name": "llm-canary", "namespace": "serving", "model_uri": NEW, "prefill_replicas": 1}))
    double.script("llm-canary", ready_after(1, url="http://gw.example/serving/llm-canary"))
    try:
        return canary_rollout(docs, kube, current="llm", old_pool="llm-inference-pool",
                              new_pool="llm-canary-inference-pool", route_name="llm-route", route_namespace="serving",
                              steps=[10, 50, 100], check=check,
                              deploy_options={"wait_timeout_s": 5, "poll_s": 0.01, "false_grace_s": 0}, log=lambda _: None)
    finally:
        kube.close()


def test_canary_steps_the_route_weights_then_cuts_over_and_deletes_the_old_service(double: K8sDouble,
                                                                                     tmp_path: Path) -> None:
    seen: list[tuple[int, dict[str, int], str]] = []

    def check(url: str, weight: int) -> None:  # what the route says while this step is verified
        seen.append((weight, weights_of(double.get(*ROUTE_KEY)), url))

    out = _canary(double, tmp_path, check)
    assert seen == [(0, {"llm-inference-pool": 1}, "http://gw.example/serving/llm-canary"),
                    (10, {"llm-inference-pool": 90, "llm-canary-inference-pool": 10}, "http://gw.example/serving/llm-canary"),
                    (50, {"llm-inference-pool": 50, "llm-canary-inference-pool": 50}, "http://gw.example/serving/llm-canary"),
                    (100, {"llm-canary-inference-pool": 100}, "http://gw.example/serving/llm-canary")]
    assert [s["weight"] for s in out["steps"]] == [10, 50, 100] and out["replaced"] == "llm"
    assert double.get("llminferenceservices", "serving", "llm") is None  # the old service is gone
    assert double.get("llminferenceservices", "serving", "llm-canary")["spec"]["model"]["uri"] == NEW
    assert double.get(*ROUTE_KEY)["metadata"]["labels"] == {"team": "ml"}  # the user's route keeps its own fields
    assert changes(double) == [
        "PATCH llminferenceservices/llm-canary",  # the new service, next to the old one
        "PATCH llminferenceservices/llm-canary",  # Ready and verified: its spec becomes the last good one
        "PATCH httproutes/llm-route", "PATCH httproutes/llm-route", "PATCH httproutes/llm-route",  # 10, 50, 100
        "DELETE llminferenceservices/llm",  # cut over: the old service goes
    ]


def test_a_failure_at_the_second_step_restores_the_route_and_deletes_the_new_service(double: K8sDouble,
                                                                                      tmp_path: Path) -> None:
    before = double.get(*ROUTE_KEY)["spec"]

    def check(url: str, weight: int) -> None:
        if weight == 50:
            raise ShipyardError("verification", "golden outputs (exact-match rate) (2 of 8 identical)", "see verification.md")

    with pytest.raises(ShipyardError) as err:
        _canary(double, tmp_path, check)
    assert "route serving/llm-route restored" in err.value.problem and "deleted the new service llm-canary" in err.value.problem
    assert double.get(*ROUTE_KEY)["spec"] == before  # the route is as the user left it
    assert double.get("llminferenceservices", "serving", "llm-canary") is None
    assert double.get("llminferenceservices", "serving", "llm")["spec"]["model"]["uri"] == OLD  # never stopped serving
    assert changes(double)[-4:] == ["PATCH httproutes/llm-route", "PATCH httproutes/llm-route",  # 10, 50
                                    "PATCH httproutes/llm-route",  # restored
                                    "DELETE llminferenceservices/llm-canary"]


def test_run_deploy_canary_alternates_names_and_needs_the_route(double: K8sDouble, tmp_path: Path) -> None:
    config = {"prefill_replicas": 1, "apply": {"wait_timeout_s": 5, "poll_s": 0.01, "false_grace_s": 0},
              "rollout": {"strategy": "canary", "steps": [25, 100], "route": {"name": "llm-route"}}}
    double.script("llm-canary", ready_after(1, url="http://gw.example/serving/llm-canary"))
    kubeconfig = str(double.kubeconfig(tmp_path / "kc", namespace="serving"))
    result = run_deploy(deploy_config=config, manifest_path=str(tmp_path / "m.yaml"), dry_run=False,
                        kubeconfig=kubeconfig, name="llm", namespace="serving", model_uri=NEW)
    assert result["name"] == "llm-canary" and result["status"] == "Ready"
    assert [s["weights"] for s in result["rollout"]["steps"]] == [
        {"llm-inference-pool": 75, "llm-canary-inference-pool": 25}, {"llm-canary-inference-pool": 100}]
    assert "name: llm-canary" in (tmp_path / "m.yaml").read_text()  # the manifest is what was applied
    # the next rollout goes back to the plain name and removes llm-canary
    double.script("llm", ready_after(1, url="http://gw.example/serving/llm"))
    result = run_deploy(deploy_config=config, manifest_path=str(tmp_path / "m.yaml"), dry_run=False,
                        kubeconfig=kubeconfig, name="llm", namespace="serving", model_uri=OLD)
    assert result["name"] == "llm" and double.get("llminferenceservices", "serving", "llm-canary") is None
    assert weights_of(double.get(*ROUTE_KEY)) == {"llm-inference-pool": 100}
    del double.objects[ROUTE_KEY]
    with pytest.raises(ShipyardError) as err:
        run_deploy(deploy_config=config, manifest_path=str(tmp_path / "m.yaml"), dry_run=False,
                   kubeconfig=kubeconfig, name="llm", namespace="serving", model_uri=NEW)
    assert err.value.field == "deploy_config.rollout.route" and "does not exist" in err.value.problem
    assert double.get("llminferenceservices", "serving", "llm-canary") is None  # nothing was applied
    assert json.loads(json.dumps(result["rollout"]["steps"]))  # JSON-able for the step's output


def test_an_interrupt_during_a_canary_step_restores_the_route_and_the_previous_version(double: K8sDouble,
                                                                                       tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM (sigterm_as_interrupt turns it into KeyboardInterrupt) while step 50 is verified."""
    before = double.get(*ROUTE_KEY)["spec"]

    def check(url: str, weight: int) -> None:
        if weight == 50:
            raise KeyboardInterrupt

    with pytest.raises(ShipyardError) as err:
        _canary(double, tmp_path, check)
    assert "during the canary at 50%" in err.value.problem and "route serving/llm-route restored" in err.value.problem
    assert double.get(*ROUTE_KEY)["spec"] == before
    assert double.get("llminferenceservices", "serving", "llm-canary") is None
    assert double.get("llminferenceservices", "serving", "llm")["spec"]["model"]["uri"] == OLD


@pytest.mark.parametrize(("verify", "field", "words"), [
    ({"auth_secret_env": "SHIPYARD_TEST_UNSET_GATEWAY_TOKEN"}, "deploy_config.verify.auth_secret_env",
     "$SHIPYARD_TEST_UNSET_GATEWAY_TOKEN is not set"),
    ({"ca_bundle": "/nonexistent/gateway-ca.pem"}, "deploy_config.verify.ca_bundle", "does not exist"),
])
def test_the_gateways_ca_bundle_and_token_are_checked_before_anything_is_applied(
        double: K8sDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verify: dict, field: str,
        words: str) -> None:
    """The verification would fail only after the service is up (and roll it back): the CA file the
    deploy step was not given, or the token's variable its Secret did not set, is one line first."""
    monkeypatch.delenv("SHIPYARD_TEST_UNSET_GATEWAY_TOKEN", raising=False)
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"schema": "shipyard.golden/v1", "served_model_name": "llm", "max_tokens": 4,
                                  "answers": [{"prompt": "p", "text": "t", "tokens": ["t"]}]}))
    kubeconfig = str(double.kubeconfig(tmp_path / "kc", namespace="serving"))
    with pytest.raises(ShipyardError) as err:
        run_deploy(deploy_config={"prefill_replicas": 1, "verify": verify}, manifest_path=str(tmp_path / "m.yaml"),
                   dry_run=False, kubeconfig=kubeconfig, name="llm", namespace="serving", model_uri=NEW,
                   candidate=str(golden))
    assert err.value.field == field and words in err.value.problem
    assert changes(double) == [] and not (tmp_path / "m.yaml").exists()  # nothing rendered, nothing applied
