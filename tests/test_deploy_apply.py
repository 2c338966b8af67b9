"""Apply / wait / rollback against the HTTP test double of the Kubernetes API (shipyard/testing/k8s_double.py).

The kubernetes client is the real one (DynamicClient discovery, server-side apply), pointed at
a real HTTP server on 127.0.0.1 through a kubeconfig; only the server is a double.
"""

from __future__ import annotations

import json

import pytest

from shipyard.cli.main import main
from shipyard.core.errors import ShipyardError
from shipyard.serving.kserve.apply import LAST_GOOD, DeployFailed, Kube, api_client, deploy
from shipyard.serving.kserve.config import parse_config
from shipyard.serving.kserve.render import render
from shipyard.testing.k8s_double import (
    STARTING_REASON,
    K8sDouble,
    by_model_uri,
    fails_with,
    kserve_conditions,
    kserve_startup,
    ready_after,
)

OLD = "oci://registry.example/models/qwen@sha256:" + "0" * 64
NEW = "oci://registry.example/models/qwen@sha256:" + "1" * 64
KEY = ("llminferenceservices", "serving", "llm")


@pytest.fixture
def double():
    with K8sDouble() as server:
        yield server


@pytest.fixture
def kube(double, tmp_path):
    config = double.kubeconfig(tmp_path / "kubeconfig", namespace="serving")
    client = Kube(api_client(str(config), timeout_s=5), timeout_s=5)
    yield client
    client.close()


def docs(uri: str = NEW, **params):
    return render(parse_config({"name": "llm", "namespace": "serving", "model_uri": uri, "prefill_replicas": 1, **params}))


def run(kube, manifest, log=None, **kw):
    lines = [] if log is None else log
    options = {"wait_timeout_s": 5, "poll_s": 0.01, "false_grace_s": 0, **kw}
    return deploy(manifest, kube, log=lines.append, **options)


def test_first_deploy_waits_for_ready_and_streams_conditions(double, kube):
    double.script("llm", ready_after(3, url="http://gw.example/serving/llm"))
    lines: list[str] = []
    outcome = run(kube, docs(), lines)
    assert outcome.status == "Ready" and outcome.url == "http://gw.example/serving/llm"
    stored = double.get(*KEY)
    assert stored["spec"]["model"]["uri"] == NEW
    assert stored["metadata"]["managedFields"][0]["manager"] == "shipyard"
    assert json.loads(stored["metadata"]["annotations"][LAST_GOOD])["spec"]["model"]["uri"] == NEW
    changes = [line for line in lines if "WorkloadsReady" in line]
    assert "Unknown (Progressing" in changes[0] and changes[-1].endswith("WorkloadsReady=True")
    assert ("PATCH", "/apis/serving.kserve.io/v1alpha2/namespaces/serving/llminferenceservices/llm") in double.requests
    assert ("GET", "/apis") in double.requests  # discovery


def test_failed_update_rolls_back_to_the_last_good_spec(double, kube):
    double.script("llm", by_model_uri({NEW: fails_with("MainWorkloadReady", "CrashLoopBackOff",
                                                       "vllm exited: CUDA out of memory", after=2)},
                                      default=ready_after(1)))
    run(kube, docs(OLD))
    generation = double.get(*KEY)["metadata"]["generation"]
    with pytest.raises(DeployFailed) as info:
        run(kube, docs(NEW))
    err = info.value
    assert err.action == "rolled-back"
    assert "MainWorkloadReady=False CrashLoopBackOff: vllm exited: CUDA out of memory" in str(err)
    assert "rolled back to the previous spec" in str(err) and "\n" not in str(err)
    stored = double.get(*KEY)
    assert stored["spec"]["model"]["uri"] == OLD
    assert stored["metadata"]["generation"] == generation + 2  # the bad spec, then the restored one
    assert json.loads(stored["metadata"]["annotations"][LAST_GOOD])["spec"]["model"]["uri"] == OLD


def test_failed_first_deploy_is_deleted(double, kube):
    double.script("llm", fails_with("WorkloadsReady", "ImagePullBackOff", "no such image"))
    with pytest.raises(DeployFailed) as info:
        run(kube, docs())
    assert info.value.action == "deleted" and "ImagePullBackOff" in str(info.value)
    assert double.get(*KEY) is None


def test_presets_combined_false_fails_at_once(double, kube):
    double.script("llm", fails_with("PresetsCombined", "ConfigNotFound", 'LLMInferenceServiceConfig "nope" not found'))
    with pytest.raises(DeployFailed, match="PresetsCombined=False ConfigNotFound"):
        run(kube, docs(base_refs=["nope"]), false_grace_s=3600, wait_timeout_s=60)
    assert double.get(*KEY) is None


def test_false_condition_within_grace_is_waited_out(double, kube):
    def script(obj, n):
        return fails_with("WorkloadsReady", "MinimumReplicasUnavailable", "0/1 ready")(obj, n) if n < 3 \
            else ready_after(0)(obj, n)

    double.script("llm", script)
    assert run(kube, docs(), false_grace_s=30).status == "Ready"


def test_timeout_rolls_back(double, kube):
    double.script("llm", ready_after(10**9))
    with pytest.raises(DeployFailed, match=r"not Ready after 0.3s") as info:
        run(kube, docs(), wait_timeout_s=0.3)
    assert info.value.action == "deleted" and double.get(*KEY) is None


def test_missing_rbac_is_one_line_and_applies_nothing(double, kube):
    double.forbid("PATCH", "llminferenceservices")
    with pytest.raises(ShipyardError) as info:
        run(kube, docs())
    err = info.value
    assert err.field == "kubernetes RBAC" and "403" in err.problem and "manifests/base/rbac" in err.fix
    assert double.get(*KEY) is None and "\n" not in str(err)


def test_api_server_timeout_leaves_nothing_half_applied(double, tmp_path):
    double.script("llm", ready_after(0))
    double.delay("PATCH", 2.0)  # the double commits the object, then answers too late
    client = Kube(api_client(str(double.kubeconfig(tmp_path / "kc")), timeout_s=0.5), timeout_s=0.5)
    try:
        with pytest.raises(DeployFailed, match="timed out after 0.5s") as info:
            run(client, docs())
    finally:
        client.close()
    assert info.value.action == "deleted" and double.get(*KEY) is None


def test_unreachable_api_server(tmp_path):
    with K8sDouble() as gone:
        config = gone.kubeconfig(tmp_path / "kc")
    client = Kube(api_client(str(config), timeout_s=1), timeout_s=1)
    with pytest.raises(ShipyardError, match="unreachable") as info:
        run(client, docs())
    assert "\n" not in str(info.value)


def test_double_rejects_schema_violations_like_an_api_server(double, kube):
    res = kube.resource("serving.kserve.io/v1alpha2", "LLMInferenceService")
    bad = docs()[0]
    bad["spec"]["replicaz"] = 3
    with pytest.raises(ShipyardError, match=r"rejected the object.*replicaz"):
        kube.apply(res, bad)
    assert double.get(*KEY) is None


def test_parallelism_size_is_immutable(double, kube):
    double.script("llm", ready_after(0))
    run(kube, docs(data_parallel=16, data_local=8, prefill_replicas=0))
    before = double.get(*KEY)["metadata"]["generation"]
    with pytest.raises(ShipyardError, match="immutable"):
        run(kube, docs(data_parallel=8, data_local=8, prefill_replicas=0))
    assert double.get(*KEY)["metadata"]["generation"] == before


def test_keda_scaled_objects_follow_readiness(double, kube):
    double.script("llm", ready_after(1))
    run(kube, docs(scaling={"mode": "keda", "max_replicas": 6}))
    assert double.get("scaledobjects", "serving", "llm-decode")["spec"]["maxReplicaCount"] == 6
    assert double.get("scaledobjects", "serving", "llm-prefill")["spec"]["scaleTargetRef"]["name"] == "llm-kserve-prefill"


def test_missing_keda_crd_is_refused_before_applying(double, kube):
    double.served_groups.discard("keda.sh")
    with pytest.raises(ShipyardError, match="does not serve keda.sh/v1alpha1 ScaledObject"):
        run(kube, docs(scaling={"mode": "keda"}))
    assert double.get(*KEY) is None


def test_cli_deploy_against_a_kubeconfig(double, tmp_path, capsys):
    double.script("llm", ready_after(1, url="http://gw.example/serving/llm"))
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"namespace": "serving", "apply": {"poll_s": 0.01, "wait_timeout_s": 10}}))
    out = tmp_path / "applied.yaml"
    code = main(["deploy", "--name", "llm", "--model-uri", NEW, "--prefill-replicas", "1", "--params-file", str(params),
                 "--kubeconfig", str(double.kubeconfig(tmp_path / "kc")), "--out-file", str(out), "-o", "json"])
    assert code == 0
    text = capsys.readouterr().out
    result = json.loads(text)  # -o json: stdout is the result alone (the progress lines went to stderr)
    assert result["status"] == "Ready" and result["url"] == "http://gw.example/serving/llm"
    assert out.is_file() and double.get(*KEY) is not None


def test_cli_deploy_applies_without_out_file_like_kubectl_apply(double, tmp_path, capsys, monkeypatch):
    """No --dry-run, no --out-file: applied to the kubeconfig's cluster (-n names the namespace), the
    result is one line; under -o json stdout is one JSON document (the progress lines on stderr); no
    manifest file is left anywhere it was run."""
    double.script("llm", ready_after(1, url="http://gw.example/team-a/llm"))
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"apply": {"poll_s": 0.01, "wait_timeout_s": 10}}))
    monkeypatch.setenv("KUBECONFIG", str(double.kubeconfig(tmp_path / "kc")))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = ["deploy", "--name", "llm", "--model-uri", NEW, "--prefill-replicas", "1", "--params-file", str(params),
            "-n", "team-a"]
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "Ready: LLMInferenceService team-a/llm (pd) http://gw.example/team-a/llm", out
    assert double.get("llminferenceservices", "team-a", "llm")["spec"]["model"]["uri"] == NEW
    assert main([*argv, "-o", "json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # the whole of stdout
    assert result["status"] == "Ready" and result["namespace"] == "team-a" and result["manifest"] == ""
    assert "Ready" in captured.err  # the wait's progress
    assert list(work.iterdir()) == []


def test_cli_server_side_dry_run_asks_the_api_server_and_stores_nothing(double, tmp_path, capsys, monkeypatch):
    """``--dry-run=server`` (kubectl's spelling): each object is server-side applied with dryRun=All;
    stdout is the server's answer (with the fields it sets); nothing is stored; a refusal (RBAC) is
    one line; a bare --dry-run stays client-side (no cluster asked)."""
    import yaml

    monkeypatch.setenv("KUBECONFIG", str(double.kubeconfig(tmp_path / "kc")))
    argv = ["deploy", "--name", "llm", "--model-uri", NEW, "--prefill-replicas", "1", "-n", "serving"]
    assert main([*argv, "--dry-run=server"]) == 0
    (answer,) = list(yaml.safe_load_all(capsys.readouterr().out))
    assert answer["kind"] == "LLMInferenceService" and answer["metadata"]["generation"] == 1
    assert answer["metadata"]["uid"] and answer["metadata"]["managedFields"][0]["manager"] == "shipyard"
    assert double.get(*KEY) is None  # nothing stored
    dry = [(m, p) for m, p in double.requests if m == "PATCH"]
    assert dry == [("PATCH", "/apis/serving.kserve.io/v1alpha2/namespaces/serving/llminferenceservices/llm")]
    assert main([*argv, "--dry-run=server", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["namespace"] == "serving"
    before = len(double.requests)
    assert main([*argv, "--dry-run"]) == 0  # client: the manifest, no request
    assert yaml.safe_load(capsys.readouterr().out)["metadata"]["name"] == "llm" and len(double.requests) == before
    double.forbidden.add(("PATCH", "llminferenceservices"))
    assert main([*argv, "--dry-run=server"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shipyard: error: kubernetes RBAC: forbidden to dry-run apply LLMInferenceService serving/llm")
    assert "\n" not in err


def test_every_option_and_inference_objectives_apply(double, kube):
    """The API double (the vendored CRDs, unknown fields refused) takes the service with every typed
    option, and the InferenceObjectives once the service is Ready."""
    double.script("llm", ready_after(1))
    manifest = docs(
        probes={"startup_seconds": 4800, "liveness": {"period_seconds": 30}}, service_account="llm-runner",
        image_pull_secrets=["quay-pull"], resources={"requests": {"cpu": "8"}, "limits": {"cpu": "16"}},
        extra_resources={"rdma/roce_gdr": 1}, shm_size="32Gi", secret_env={"HF_TOKEN": "hf-token"},
        env={"TOKEN": {"valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}},
        prefill={"vllm_args": {"max-num-batched-tokens": 8192}}, decode={"vllm_args": {"max-num-seqs": 256}},
        router={"scheduler": {"preset": "precise-prefix-cache"}}, kv_cache_offloading={"cpu": "64Gi"},
        lora={"adapters": [{"name": "sql", "uri": "hf://org/sql-lora"}], "max_rank": 16}, served_model_name="qwen",
        objectives=[{"name": "premium", "priority": 10}, {"name": "batch", "priority": -1}])
    assert [d["kind"] for d in manifest] == ["LLMInferenceService", "InferenceObjective", "InferenceObjective"]
    assert run(kube, manifest).status == "Ready"
    stored = double.get(*KEY)
    assert stored["spec"]["model"]["lora"]["adapters"] == [{"name": "sql", "uri": "hf://org/sql-lora"}]
    assert stored["spec"]["router"]["scheduler"]["config"]["inline"]["kind"] == "EndpointPickerConfig"
    premium = double.get("inferenceobjectives", "serving", "premium")
    assert premium["spec"] == {"poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                           "name": "llm-inference-pool"}, "priority": 10}
    assert double.get("inferenceobjectives", "serving", "batch")["spec"]["priority"] == -1


def test_template_mode_applies_and_rolls_back(double, kube):
    template = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService",
                "metadata": {"name": "llm", "namespace": "serving"},
                "spec": {"model": {"uri": "hf://old/model", "criticality": "Critical"}, "replicas": 2,
                         "router": {"gateway": {}, "route": {}, "scheduler": {}},
                         "template": {"containers": [{"name": "main", "startupProbe": {"failureThreshold": 480}}]}}}
    double.script("llm", by_model_uri({NEW: fails_with("WorkloadsReady", "ImagePullBackOff", "denied")},
                                      default=ready_after(0)))
    run(kube, render(parse_config({"template": template, "model_uri": OLD})))
    stored = double.get(*KEY)
    assert stored["apiVersion"] == "serving.kserve.io/v1alpha2"
    assert stored["metadata"]["annotations"]["internal.serving.kserve.io/model-criticality"] == "Critical"
    with pytest.raises(DeployFailed, match="ImagePullBackOff"):
        run(kube, render(parse_config({"template": template, "model_uri": NEW})))
    assert double.get(*KEY)["spec"]["model"]["uri"] == OLD


def test_an_api_server_that_accepts_no_connection_is_named_so_not_as_a_read_timeout(tmp_path):
    """A full accept queue drops the SYNs (as a blackholed address does): each connect attempt ends after
    the connect timeout, and the line says so instead of "timed out after <read timeout>"."""
    import socket
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))  # fills the backlog: later SYNs go unanswered
    config = tmp_path / "kc"
    config.write_text(f"apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                      "current-context: x\n")
    client = Kube(api_client(str(config), timeout_s=1), timeout_s=1)
    started = time.monotonic()
    try:
        with pytest.raises(ShipyardError) as info:
            run(client, docs())
    finally:
        client.close()
        filler.close()
        server.close()
    assert "did not accept a connection within 1s (3 attempts)" in str(info.value), str(info.value)
    assert "\n" not in str(info.value) and time.monotonic() - started < 15


def test_the_api_timeout_outlasts_the_api_servers_own_request_timeout():
    """kube-apiserver answers within --request-timeout (60 s by default, admission webhooks included):
    a client that gives up first sees a slow but committed apply as failed, and rolls it back."""
    from shipyard.params.deploy import parse_deploy_config
    from shipyard.serving.kserve.config import apply_options

    assert parse_deploy_config({}, name="llm", model_uri=OLD).apply["api_timeout_s"] > 60
    assert apply_options(None)["api_timeout_s"] > 60
    assert Kube.__init__.__kwdefaults__["timeout_s"] > 60 and api_client.__kwdefaults__["timeout_s"] > 60


# --- KServe v0.20's real condition sequence (issue 32, item 2 and the advisory-condition minor) ----------------

def test_a_start_up_longer_than_the_grace_is_waited_for(double, kube):
    """KServe v0.20 reports a new Deployment as MainWorkloadReady=False / MinimumReplicasUnavailable
    (rolled up into WorkloadsReady and Ready) for the whole start-up: that is progress, not failure."""
    double.script("llm", kserve_startup(0.8, url="http://gw.example/serving/llm"))
    lines: list[str] = []
    outcome = run(kube, docs(), lines, false_grace_s=0.1, wait_timeout_s=10)
    assert outcome.status == "Ready" and outcome.url == "http://gw.example/serving/llm"
    main = [line for line in lines if "MainWorkloadReady" in line]
    assert "MainWorkloadReady=False (Progressing)" in main[0]
    assert any(f"MainWorkloadReady=False ({STARTING_REASON}" in line and "(still starting)" in line for line in main)
    assert main[-1].endswith("MainWorkloadReady=True")


def test_a_canary_start_up_longer_than_the_grace_is_waited_for(double, tmp_path):
    """The canary's new service goes through the same wait (rollout.py calls deploy)."""
    from shipyard.serving.kserve.rollout import canary_rollout
    from shipyard.testing.k8s_double import FULL_INSTALL_GROUPS

    with K8sDouble(groups=FULL_INSTALL_GROUPS) as full:
        full.put(docs(OLD)[0], status={"conditions": kserve_conditions("ready")})
        full.put({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                  "metadata": {"name": "llm-route", "namespace": "serving"},
                  "spec": {"rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                                       "name": "llm-inference-pool"}]}]}}, plural="httproutes")
        full.script("llm-canary", kserve_startup(0.8, url="http://gw.example/serving/llm-canary"))
        client = Kube(api_client(str(full.kubeconfig(tmp_path / "kc", namespace="serving")), timeout_s=5), timeout_s=5)
        new = render(parse_config({"name": "llm-canary", "namespace": "serving", "model_uri": NEW, "prefill_replicas": 1}))
        try:
            out = canary_rollout(new, client, current="llm", old_pool="llm-inference-pool",
                                 new_pool="llm-canary-inference-pool", route_name="llm-route", route_namespace="serving",
                                 steps=[50, 100], check=None, log=lambda _: None,
                                 deploy_options={"wait_timeout_s": 10, "poll_s": 0.01, "false_grace_s": 0.1})
        finally:
            client.close()
        assert out["status"] == "Ready" and full.get(*KEY) is None  # cut over, the old service deleted


def test_advisory_false_conditions_never_fail_the_deploy(double, kube):
    """OciImageVolumeCompatible is outside KServe's Ready rollup (controller.go: advisory)."""
    def script(obj, n):  # Ready not yet reported for a few reads; only the advisory condition is False
        conds = kserve_conditions("ready", advisory=True)
        if n < 3:
            conds = [c if c["type"] != "Ready" else {**c, "status": "Unknown"} for c in conds]
        return {"url": "http://gw.example/serving/llm", "conditions": conds}

    double.script("llm", script)
    lines: list[str] = []
    assert run(kube, docs(), lines, false_grace_s=0).status == "Ready"
    assert any("OciImageVolumeCompatible=False (ImageVolumeAlpha" in line and "advisory" in line for line in lines)


def test_a_failed_reason_fails_at_once_without_the_grace(double, kube):
    double.script("llm", kserve_startup(0.1, then=("ProgressDeadlineExceeded",
                                                   'ReplicaSet "llm-kserve-abc" has timed out progressing.')))
    with pytest.raises(DeployFailed, match="MainWorkloadReady=False ProgressDeadlineExceeded") as info:
        run(kube, docs(), false_grace_s=3600, wait_timeout_s=30)
    assert info.value.action == "deleted" and double.get(*KEY) is None


def test_still_starting_at_the_timeout_says_so(double, kube):
    double.script("llm", kserve_startup(3600))
    with pytest.raises(DeployFailed, match=r"still starting after 2s .*MinimumReplicasUnavailable") as info:
        run(kube, docs(), false_grace_s=0, wait_timeout_s=2)
    assert "probes.startup_seconds" in info.value.fix and double.get(*KEY) is None


def test_the_wait_is_derived_from_the_startup_probe(double, kube):
    """One figure: the probe the sizing renders (or probes.startup_seconds) plus the pull allowance;
    KServe's preset probe (60 x 10 s) when the manifest has none; apply.wait_timeout_s overrides."""
    from shipyard.serving.kserve.apply import startup_seconds_of
    from shipyard.serving.kserve.config import apply_options
    from shipyard.serving.sizing import (
        KSERVE_DEFAULT_STARTUP_S,
        PULL_ALLOWANCE_S,
        derive_sizing,
        ready_wait_seconds,
    )

    probed = docs(probes={"startup_seconds": 900})
    assert startup_seconds_of(probed[0]) == 900
    assert startup_seconds_of(docs()[0]) is None
    assert ready_wait_seconds(900) == 900 + PULL_ALLOWANCE_S
    assert ready_wait_seconds(None) == KSERVE_DEFAULT_STARTUP_S + PULL_ALLOWANCE_S
    sized = derive_sizing({"startup": {"ready_seconds": 400.0}})["startup_probe"]
    assert sized["ready_wait_seconds"] == ready_wait_seconds(sized["startup_seconds"]) == 800 + PULL_ALLOWANCE_S
    assert apply_options({})["wait_timeout_s"] is None and apply_options({"wait_timeout_s": 30})["wait_timeout_s"] == 30
    double.script("llm", kserve_startup(0.0))
    lines: list[str] = []
    deploy(probed, kube, poll_s=0.01, false_grace_s=0, log=lines.append)
    assert any(f"waiting up to {900 + PULL_ALLOWANCE_S:g}s for Ready (startup probe 900s" in line for line in lines)
