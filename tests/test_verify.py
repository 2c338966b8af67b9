"""Deployment verification (shipyard/steps/verify.py, shipyard/gates/verification.py, shipyard/evaluation/golden.py, ``shipyard verify``).

Fast tests: the golden comparison, the settings, the recorded candidate, the metrics scrape and the
one-line errors (an unreachable URL, a timeout). The tests with real vLLM servers and the Kubernetes
API double are in tests/test_deploy_verify.py (slow).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from shipyard.cli.main import main
from shipyard.core.errors import ShipyardError, UnreachableError
from shipyard.evaluation.golden import (
    SCHEMA,
    check_golden,
    compare_golden,
    first_divergence,
    golden_prompts,
    load_golden,
)
from shipyard.gates.verification import api_root, load_recorded, parse_verify_config, selected_level
from shipyard.steps.verify import _pd_checks, scrape, served_models
from shipyard.testing.loopback import LoopbackServer


def golden(*texts: str, tokens: bool = True) -> dict:
    answers = [{"prompt": f"p{i}", "text": t, "tokens": list(t) if tokens else None} for i, t in enumerate(texts)]
    return {"schema": SCHEMA, "served_model_name": "m", "max_tokens": 16, "answers": answers}


def test_golden_prompts_come_from_the_eval_suite() -> None:
    prompts = golden_prompts(8)
    assert len(prompts) == 8 and all(p.startswith("Question: What is the capital of ") for p in prompts)
    assert all(p.endswith("\nAnswer: The capital is") for p in prompts)
    assert len(set(prompts)) == 8


def test_compare_golden_counts_matches_and_finds_the_first_divergence() -> None:
    want = golden(" Paris", " Berlin is", " Rome")
    got = [{"text": " Paris", "tokens": list(" Paris")}, {"text": " Berlin was", "tokens": list(" Berlin was")},
           {"text": "", "tokens": []}]
    result = compare_golden(want, got)
    assert result["matched"] == 1 and result["total"] == 3 and result["match_rate"] == pytest.approx(1 / 3)
    first, second = result["mismatches"]
    assert first["index"] == 1 and first["divergence"] == {"char_offset": 8, "token_offset": 8,
                                                           "expected": " Berlin is", "got": " Berlin was"}
    assert second["divergence"]["char_offset"] == 0 and second["divergence"]["got"] == ""


def test_first_divergence_without_tokens_gives_the_char_offset_only() -> None:
    d = first_divergence({"text": "abc", "tokens": None}, {"text": "abd", "tokens": ["a"]})
    assert d["char_offset"] == 2 and d["token_offset"] is None


def test_an_empty_golden_set_is_one_line_naming_golden(tmp_path: Path) -> None:
    (tmp_path / "golden.json").write_text(json.dumps({"schema": SCHEMA, "answers": []}))
    with pytest.raises(ShipyardError, match="empty golden set") as err:
        load_golden(tmp_path)
    assert err.value.field == "golden"
    with pytest.raises(ShipyardError, match="not a shipyard golden-output record"):
        check_golden({"answers": [{"prompt": "p", "text": "t"}]})
    with pytest.raises(ShipyardError) as err:
        load_recorded({"recipe": "w4a16", "golden": None})
    assert err.value.field == "golden"


def test_the_recorded_candidate_is_a_candidate_record_or_the_benchmark_folder(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "golden.json").write_text(json.dumps(golden("a")))
    assert load_recorded(str(tmp_path / "bench"))["golden"]["answers"][0]["text"] == "a"
    record = {"schema": "shipyard.candidate/v1", "recipe": "w4a16", "golden": golden("b")}
    (tmp_path / "cand").mkdir()
    (tmp_path / "cand" / "candidate.json").write_text(json.dumps(record))
    assert load_recorded(str(tmp_path / "cand"))["recipe"] == "w4a16"
    with pytest.raises(ShipyardError, match="does not exist"):
        load_recorded(str(tmp_path / "missing"))


@pytest.mark.parametrize(("settings", "field"), [
    ({"min_match_rate": 1.5}, "min_match_rate"),
    ({"min_match_rate": -0.1}, "min_match_rate"),
    ({"min_match_rate": "high"}, "min_match_rate"),
    ({"min_match_rate": True}, "min_match_rate"),
    ({"slo_tolerance": 0.5}, "verify.slo_tolerance"),
    ({"timeout_s": 0}, "verify.timeout_s"),
    ({"run_timeout_s": 0}, "verify.run_timeout_s"),
    ({"run_timeout_s": 1e400}, "verify.run_timeout_s"),
    ({"run_timeout_s": "30m"}, "verify.run_timeout_s"),
    ({"checks": ["golden"]}, "verify.checks"),
    ({"checks": ["models", "golden", "vibes"]}, "verify.checks"),
    ({"slo_requests": 0}, "verify.slo_requests"),
    ({"accuracy_tasks": "shipyard_capitals_gen"}, "verify.accuracy_tasks"),
    ({"metrics_urls": {"router": "http://x/metrics"}}, "verify.metrics_urls"),
    ({"colour": "blue"}, "verify.colour"),
])
def test_bad_settings_are_one_line_naming_the_field(settings: dict, field: str) -> None:
    with pytest.raises(ShipyardError) as err:
        parse_verify_config(settings)
    assert err.value.field == field and "\n" not in str(err.value)


def test_settings_defaults_and_the_api_root() -> None:
    cfg = parse_verify_config(None)
    assert cfg["min_match_rate"] == 0.75 and cfg["checks"] == ["models", "golden", "accuracy", "slo", "pd"]
    assert parse_verify_config({"min_match_rate": 1})["min_match_rate"] == 1.0
    assert api_root("http://gw.example/ns/llm") == "http://gw.example/ns/llm/v1"
    assert api_root("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"
    with pytest.raises(ShipyardError) as err:
        api_root("gw.example:8000")
    assert err.value.field == "url"


def test_the_selected_level_is_the_highest_load_meeting_the_slo() -> None:
    record = {"levels": [{"name": "concurrent@1", "requests_per_s": 0.7}, {"name": "concurrent@4", "requests_per_s": 1.9}],
              "slo": {"metrics": {"highest_load_meeting_slo_rps": 1.9}}}
    assert selected_level(record)["name"] == "concurrent@4"
    assert selected_level({"levels": record["levels"], "slo": {"metrics": {"highest_load_meeting_slo_rps": 0.0}}}) is None


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung service)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def test_unreachable_and_timeout_are_one_line_naming_the_url(silent_port: int) -> None:
    with pytest.raises(UnreachableError) as err:
        served_models("http://127.0.0.1:9", timeout=2)
    assert err.value.field == "url" and "unreachable" in err.value.problem
    with pytest.raises(UnreachableError, match="did not answer within 0.5 s") as err:
        served_models(f"http://127.0.0.1:{silent_port}", timeout=0.5)
    assert err.value.field == "url"


class _Metrics(BaseHTTPRequestHandler):
    pages: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.pages.pop(0).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)


def _page(prompt: float, gen: float, xfer: float, failed: float) -> str:
    return ("# HELP vllm:prompt_tokens_total x\n# TYPE vllm:prompt_tokens_total counter\n"
            f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}\n'
            f'vllm:request_success_total{{finished_reason="length",model_name="m"}} {prompt / 10}\n'
            f'vllm:generation_tokens_total{{model_name="m"}} {gen}\n'
            f'vllm:nixl_xfer_time_seconds_count{{model_name="m"}} {xfer}\n'
            f'vllm:nixl_num_failed_transfers_total{{model_name="m"}} {failed}\n')


def test_pd_checks_read_vllm_counters_and_unreachable_pools_are_not_checked() -> None:
    with LoopbackServer(_Metrics) as server:
        url = f"{server.url}/metrics"
        _Metrics.pages = [_page(10, 0, 0, 0), _page(0, 5, 2, 0), _page(90, 0, 0, 0), _page(0, 50, 9, 1)]
        before = {"prefill": scrape(url, 5), "decode": scrape(url, 5)}
        after = {"prefill": scrape(url, 5), "decode": scrape(url, 5)}
    checks = {c.name: c for c in _pd_checks(before, after)}
    assert checks["P/D prefill vllm:prompt_tokens_total"].passed and checks["P/D prefill vllm:prompt_tokens_total"].measured == 80
    assert checks["P/D decode vllm:generation_tokens_total"].passed
    assert checks["P/D KV transfer vllm:nixl_xfer_time_seconds_count"].passed
    assert not checks["P/D KV transfer vllm:nixl_num_failed_transfers_total"].passed  # one transfer failed
    unreachable = _pd_checks({"decode": scrape("http://127.0.0.1:9/metrics", 1)}, {"decode": None})
    assert [c.compared for c in unreachable] == [False] and "not checked" in unreachable[0].note
    assert not _pd_checks({}, {})[0].compared  # no pool URL: "not checked", never "passed"


def test_cli_bad_input_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "golden.json").write_text(json.dumps(golden("a")))
    base = ["verify", "--served-model-name", "m", "--candidate", str(tmp_path / "golden.json")]
    assert main([*base, "--url", "http://127.0.0.1:9"]) == 3
    assert "url: http://127.0.0.1:9/v1/models is unreachable" in capsys.readouterr().err
    assert main([*base, "--url", "http://127.0.0.1:9", "--min-match-rate", "2"]) == 2
    assert "min_match_rate: 2" in capsys.readouterr().err


def test_without_the_vllm_runtime_the_accuracy_slice_and_slo_smoke_are_not_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no vllm runtime exists (``shipyard verify`` from a bare environment; the deploy step itself runs
    in the vllm runtime) the two checks that need lm-eval and guidellm say "not checked" (never "passed",
    and no rollback of a good service for it)."""
    from shipyard.steps.verify import _accuracy_checks, _slo_checks

    monkeypatch.setenv("SHIPYARD_VENVS", str(tmp_path))  # no runtime venvs here
    monkeypatch.delenv("SHIPYARD_RUNTIME", raising=False)
    record = {"accuracy": {"rows": [{"task": "shipyard_capitals_gen", "metric": "exact_match,contains",
                                     "candidate": 0.5, "candidate_stderr": 0.1}]},
              "slo": {"thresholds": {"ttft_p99_ms": 1000, "itl_p99_ms": 100}, "metrics": {"highest_load_meeting_slo_rps": 1}},
              "levels": [{"name": "concurrent@1", "requests_per_s": 1.0}]}
    cfg = parse_verify_config(None)
    for checks in (_accuracy_checks("http://x", "m", record, str(tmp_path), cfg),
                   _slo_checks("http://x", "m", record, str(tmp_path), cfg)):
        assert [c.compared for c in checks] == [False]
        assert "not checked: the vllm runtime (lm-eval, guidellm) is not installed" in checks[0].note
