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
from conftest import require_tool

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


# --------------------------------------------------------------------------- the gateway's TLS and auth
TOKEN = "Zx8Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8Lz0Xc"  # random-looking, like a real gateway token


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate for 127.0.0.1 made here (``cryptography``), its key, and another CA."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = tmp_path_factory.mktemp("tls")
    now = datetime.datetime.now(datetime.UTC)

    def make(name: str) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        return (cert.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))

    cert, key = make("gateway.test")
    other, _ = make("another-ca.test")
    paths = {"cert": folder / "gateway.pem", "key": folder / "gateway-key.pem", "other": folder / "other-ca.pem",
             "der": folder / "gateway.der", "garbled": folder / "garbled.pem"}
    paths["cert"].write_bytes(cert)
    paths["key"].write_bytes(key)
    paths["other"].write_bytes(other)
    paths["der"].write_bytes(x509.load_pem_x509_certificate(cert).public_bytes(serialization.Encoding.DER))
    paths["garbled"].write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    return paths


class _Gateway(BaseHTTPRequestHandler):
    """An OpenAI-compatible gateway that wants ``Authorization: Bearer TOKEN``; it records what it got."""

    seen: list[dict[str, str]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _authorised(self) -> bool:
        _Gateway.seen.append(dict(self.headers.items()))
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self._send(401, {"error": "unauthorized"})
        return False

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self._authorised():
            self._send(200, {"data": [{"id": "m"}]})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self._authorised():
            self._send(200, {"choices": [{"index": 0, "text": "a", "logprobs": {"tokens": ["a"]}}]})


@pytest.fixture
def gateway(tls_files: dict[str, Path]) -> Iterator[LoopbackServer]:
    _Gateway.seen = []
    with LoopbackServer(_Gateway, tls=(str(tls_files["cert"]), str(tls_files["key"]))) as server:
        yield server


def _verify(url: str, monkeypatch: pytest.MonkeyPatch, token: str | None = TOKEN, **settings: object) -> dict:
    from shipyard.steps.verify import verify_service

    if token is None:
        monkeypatch.delenv("GATEWAY_TOKEN", raising=False)
    else:
        monkeypatch.setenv("GATEWAY_TOKEN", token)
    lines: list[str] = []
    out = verify_service(url, "m", {"golden": golden("a", "a")}, strict_input=True, log=lines.append,
                         config={"checks": ["models", "golden"], "auth_secret_env": "GATEWAY_TOKEN", **settings})
    out["lines"] = lines
    return out


def test_the_golden_outputs_reach_an_https_gateway_with_its_ca_bundle_and_token(
        gateway: LoopbackServer, tls_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the CA bundle the request fails in one line (the certificate is not trusted); with it,
    or with insecure_tls (warned and recorded), the models and golden checks pass with the bearer
    token from the variable; the report names the variable, never the token."""
    with pytest.raises(UnreachableError) as err:  # the system CAs do not know this gateway
        _verify(gateway.url, monkeypatch)
    assert "TLS certificate is not trusted" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UnreachableError, match="not trusted"):  # another CA's bundle does not help
        _verify(gateway.url, monkeypatch, ca_bundle=str(tls_files["other"]))
    out = _verify(gateway.url, monkeypatch, ca_bundle=str(tls_files["cert"]))
    assert out["passed"], out["reason"]
    assert out["golden"]["matched"] == 2
    assert all(h.get("Authorization") == f"Bearer {TOKEN}" for h in _Gateway.seen) and len(_Gateway.seen) == 3
    context = out["report"]["context"]
    assert context["tls"] == f"verified with the CA bundle {tls_files['cert']}"
    assert context["auth"] == "the token from $GATEWAY_TOKEN in the Authorization header (bearer)"
    assert TOKEN not in json.dumps(out)
    insecure = _verify(gateway.url, monkeypatch, insecure_tls=True)
    assert insecure["passed"], insecure["reason"]
    assert insecure["lines"][0].startswith("verify: WARNING: verify.insecure_tls is true")
    assert insecure["report"]["context"]["tls"] == "NOT verified (verify.insecure_tls)"
    assert "NOT verified" in insecure["report"]["context"]["tls warning"]


def test_a_missing_or_wrong_token_fails_in_one_line_without_showing_it(
        gateway: LoopbackServer, tls_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from shipyard.steps.verify import verify_service

    ca = str(tls_files["cert"])
    with pytest.raises(ShipyardError) as err:  # the variable is unset: nothing is sent
        _verify(gateway.url, monkeypatch, token=None, ca_bundle=ca)
    assert err.value.field == "verify.auth_secret_env" and "$GATEWAY_TOKEN is not set" in err.value.problem
    assert _Gateway.seen == []
    wrong = "Wr0ngTokenWr0ngTokenWr0ngTokenWr0ng"
    with pytest.raises(ShipyardError) as err:
        _verify(gateway.url, monkeypatch, token=wrong, ca_bundle=ca)
    line = str(err.value)
    assert "HTTP 401 (not authenticated" in line and "$GATEWAY_TOKEN" in line and "\n" not in line
    assert wrong not in line and TOKEN not in line
    with pytest.raises(ShipyardError, match="HTTP 401"):  # no auth configured at all
        verify_service(gateway.url, "m", {"golden": golden("a")}, strict_input=True, log=lambda _: None,
                       config={"checks": ["models", "golden"], "ca_bundle": ca})
    # the deploy step's verification (not strict): the failed models check says why, in one line
    monkeypatch.setenv("GATEWAY_TOKEN", wrong)
    out = verify_service(gateway.url, "m", {"golden": golden("a")}, log=lambda _: None,
                         config={"checks": ["models", "golden"], "ca_bundle": ca, "auth_secret_env": "GATEWAY_TOKEN"})
    assert not out["passed"] and "HTTP 401" in out["reason"] and wrong not in json.dumps(out)


def test_the_golden_request_itself_sends_the_token_and_checks_the_certificate(
        gateway: LoopbackServer, tls_files: dict[str, Path]) -> None:
    """One real request path (shipyard.core.net.http_request through golden's client), as the
    accuracy slice's and SLO smoke's clients are built from the same settings."""
    from shipyard.evaluation.golden import complete
    from shipyard.gates.verification import gateway_access

    access = gateway_access(parse_verify_config({"ca_bundle": str(tls_files["cert"]),
                                                 "auth_secret_env": "GATEWAY_TOKEN"}),
                            environ={"GATEWAY_TOKEN": TOKEN})
    assert complete(f"{gateway.url}/v1", "m", "p", headers=access.headers, context=access.context)["text"] == "a"
    with pytest.raises(ShipyardError, match="HTTP 401"):
        complete(f"{gateway.url}/v1", "m", "p", context=access.context)


@pytest.mark.parametrize(("settings", "field", "words"), [
    ({"ca_bundle": "/nonexistent/ca.pem"}, "verify.ca_bundle", "does not exist"),
    ({"ca_bundle": "key"}, "verify.ca_bundle", "no -----BEGIN CERTIFICATE----- block"),
    ({"ca_bundle": "der"}, "verify.ca_bundle", "openssl x509 -inform der"),
    ({"ca_bundle": "garbled"}, "verify.ca_bundle", "OpenSSL can read"),
    ({"ca_bundle": "folder"}, "verify.ca_bundle", "is not a file"),
    ({"auth_secret_env": "NOT_SET_ANYWHERE_X"}, "verify.auth_secret_env", "$NOT_SET_ANYWHERE_X is not set"),
    ({"auth_secret_env": "EMPTY_TOKEN_X"}, "verify.auth_secret_env", "$EMPTY_TOKEN_X is empty"),
])
def test_the_ca_file_and_the_token_variable_are_checked_where_requests_are_sent(
        settings: dict, field: str, words: str, tls_files: dict[str, Path]) -> None:
    from shipyard.gates.verification import gateway_access

    named = {"key": tls_files["key"], "der": tls_files["der"], "garbled": tls_files["garbled"],
             "folder": tls_files["cert"].parent}
    if settings.get("ca_bundle") in named:
        settings = {"ca_bundle": str(named[settings["ca_bundle"]])}
    cfg = parse_verify_config(settings)  # the shape is fine: the pre-flight's pod mounts neither
    with pytest.raises(ShipyardError) as err:
        gateway_access(cfg, environ={"EMPTY_TOKEN_X": " "})
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("settings", "field"), [
    ({"insecure_tls": "yes"}, "verify.insecure_tls"),
    ({"insecure_tls": 1}, "verify.insecure_tls"),
    ({"ca_bundle": 3}, "verify.ca_bundle"),
    ({"ca_bundle": "/ca.pem", "insecure_tls": True}, "verify.insecure_tls"),
    ({"auth_secret_env": TOKEN}, "verify.auth_secret_env"),
    ({"auth_secret_env": f"Bearer {TOKEN}"}, "verify.auth_secret_env"),
    ({"auth_secret_env": "hunter2pw"}, "verify.auth_secret_env"),
    ({"auth_secret_env": "GATEWAY_TOKEN", "auth_header": "X Api"}, "verify.auth_header"),
    ({"auth_secret_env": "GATEWAY_TOKEN", "auth_header": "X-Api-Key"}, "verify.auth_header"),
])
def test_bad_gateway_settings_are_one_line_never_showing_a_token(settings: dict, field: str) -> None:
    from shipyard.gates.verification import verify_options

    with pytest.raises(ShipyardError) as err:
        parse_verify_config(settings)
    assert err.value.field == field and TOKEN not in str(err.value) and "hunter2pw" not in str(err.value)
    with pytest.raises(ShipyardError) as err:  # deploy_config.verify: the same line, named so
        verify_options(settings)
    assert err.value.field == f"deploy_config.{field}"


def test_a_custom_header_name_is_for_the_golden_outputs_only() -> None:
    """lm-eval and guidellm can send the token only as Authorization: Bearer without logging it: a
    custom header with their checks is refused at parse time; without them it is sent as it is."""
    from shipyard.gates.verification import gateway_access

    with pytest.raises(ShipyardError, match="lm-eval 0.4.13 .accuracy slice. and guidellm 0.8.1"):
        parse_verify_config({"auth_secret_env": "T", "auth_header": "X-Api-Key"})
    cfg = parse_verify_config({"auth_secret_env": "T", "auth_header": "X-Api-Key", "checks": ["models", "golden"]})
    access = gateway_access(cfg, environ={"T": TOKEN})
    assert dict(access.headers) == {"X-Api-Key": TOKEN} and TOKEN not in repr(access)
    assert access.describe()["auth"] == "the token from $T in the X-Api-Key header"


def test_lm_eval_and_guidellm_are_built_with_the_gateway_settings(tls_files: dict[str, Path]) -> None:
    """The accuracy slice's lm-eval arguments and the SLO smoke's guidellm scenario, from the
    project's own builders: lm-eval 0.4.13 takes ``verify_certificate`` (a CA path for requests, one
    at a time; an SSLContext for aiohttp, concurrently; false), never the token (it logs its
    arguments; OPENAI_API_KEY gives its bearer header); guidellm 0.8.1 takes ``verify`` (its default
    is no check), ``api_key`` and the CA through SSL_CERT_FILE."""
    import ssl

    from shipyard.evaluation.lmeval import local_completions_args
    from shipyard.gates.verification import gateway_access
    from shipyard.steps.verify import RemoteService, smoke_scenario

    ca = str(tls_files["cert"])
    access = gateway_access(parse_verify_config({"ca_bundle": ca, "auth_secret_env": "T"}), environ={"T": TOKEN})
    service = RemoteService("https://gw.example:8443", "m", access)
    assert local_completions_args(service, "/m", 1234, 1)["verify_certificate"] == ca
    concurrent = local_completions_args(service, "/m", 1234, 4)["verify_certificate"]
    assert isinstance(concurrent, ssl.SSLContext) and concurrent.verify_mode == ssl.CERT_REQUIRED
    assert concurrent.get_ca_certs()[0]["subject"] == ((("commonName", "gateway.test"),),)
    insecure = RemoteService("https://gw.example", "m", gateway_access({"insecure_tls": True}))
    assert local_completions_args(insecure, "/m", 1, 4)["verify_certificate"] is False
    plain = local_completions_args(RemoteService("http://gw.example", "m"), "/m", 1, 4)
    assert "verify_certificate" not in plain and TOKEN not in repr(local_completions_args(service, "/m", 1, 4))
    assert access.token() == TOKEN

    level = {"name": "concurrent@2"}
    scenario, env = smoke_scenario(service, "/m", level, 4, 32, 8, 30.0, "/tmp/g.json", access)
    backend = scenario["spec"]["backend"]
    assert backend["verify"] is True and backend["api_key"] == TOKEN and env == {"SSL_CERT_FILE": ca}
    scenario, env = smoke_scenario(insecure, "/m", level, 4, 32, 8, 30.0, "/tmp/g.json",
                                   gateway_access({"insecure_tls": True}))
    assert scenario["spec"]["backend"]["verify"] is False and "api_key" not in scenario["spec"]["backend"] and env == {}


#: run in the vllm runtime's interpreter: lm-eval's local-completions (one request at a time: requests;
#: concurrently: aiohttp) and guidellm's OpenAI backend (httpx), each built by shipyard's builders from
#: the settings, asking the HTTPS gateway; prints what each client got
_REAL_CLIENTS = """
import asyncio, json, logging, os, sys
logging.basicConfig(level=logging.DEBUG)  # every client log line: the token must be in none
from lm_eval.api.instance import Instance
from lm_eval.models.openai_completions import LocalCompletionsAPI
from guidellm.backends.openai.http import OpenAIHTTPBackend
from guidellm.schemas.backends import OpenAIHTTPBackendArgs
from shipyard.evaluation.lmeval import local_completions_args
from shipyard.gates.verification import gateway_access, parse_verify_config
from shipyard.core.env import environ_set
from shipyard.steps.verify import LMEVAL_TOKEN_ENV, RemoteService, smoke_scenario


async def guidellm(scenario):
    backend = OpenAIHTTPBackend(OpenAIHTTPBackendArgs(**scenario["spec"]["backend"]))
    await backend.process_startup()
    try:
        await backend.validate()
        return ",".join(await backend.available_models())
    except Exception as err:
        return f"failed: {type(err).__name__}"
    finally:
        await backend.process_shutdown()


def ask(url, token, settings):
    os.environ["GATEWAY_TOKEN"] = token
    os.environ.pop("SSL_CERT_FILE", None)
    access = gateway_access(parse_verify_config({"auth_secret_env": "GATEWAY_TOKEN", **settings}))
    service = RemoteService(url, "m", access)
    out = {}
    for concurrency in (1, 2):
        args = local_completions_args(service, "unused", 1234, concurrency)
        args.update(tokenizer_backend=None, tokenized_requests=False, max_retries=1, timeout=10)
        request = Instance(request_type="generate_until", doc={}, idx=0,
                           arguments=("hi", {"max_gen_toks": 2, "until": ["\\n"]}))
        try:
            with environ_set({LMEVAL_TOKEN_ENV: access.token()}):
                out[f"lm-eval x{concurrency}"] = LocalCompletionsAPI(**args).generate_until([request])[0]
        except Exception as err:
            out[f"lm-eval x{concurrency}"] = f"failed: {type(err).__name__}"
    scenario, env = smoke_scenario(service, "unused", {"name": "concurrent@1"}, 1, 8, 2, 10.0, "/dev/null", access)
    os.environ.update(env)
    out["guidellm"] = asyncio.run(guidellm(scenario))
    return out


url, cases = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps([ask(url, token, settings) for token, settings in cases]))
"""


def test_lm_eval_and_guidellm_themselves_reach_the_https_gateway(
        gateway: LoopbackServer, tls_files: dict[str, Path]) -> None:
    """The real clients (vllm runtime), built by the project's builders: with the CA bundle (or
    insecure_tls) and the token each one's request passes; without the CA bundle each one fails on
    the certificate, with a wrong token on the 401 (neither goes through unchecked or unauthenticated)."""
    import os
    import subprocess

    from shipyard.runtimes.runtime import venv_python

    try:
        python = venv_python("vllm")
    except ShipyardError:
        require_tool(False, "the vllm runtime venv (.venvs/vllm: shipyard setup builds it)")
    ca, wrong = str(tls_files["cert"]), "Wr0ngTokenWr0ngTokenWr0ngTokenWr0ng"
    cases = [(TOKEN, {"ca_bundle": ca}), (TOKEN, {}), (TOKEN, {"insecure_tls": True}), (wrong, {"ca_bundle": ca})]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), HF_HUB_OFFLINE="1")
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run([str(python), "-c", _REAL_CLIENTS, gateway.url, json.dumps(cases)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert TOKEN not in proc.stdout + proc.stderr
    ok, untrusted, insecure, unauthorised = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ok == insecure == {"lm-eval x1": "a", "lm-eval x2": "a", "guidellm": "m"}, (ok, insecure)
    assert all(v.startswith("failed") for v in untrusted.values()), untrusted
    assert all(v.startswith("failed") for v in unauthorised.values()), unauthorised
    tokens = [h.get("Authorization") for h in _Gateway.seen]
    # each client's request carried the bearer token (lm-eval 1 + 1, guidellm /health and /v1/models, in the
    # two passing cases; 1 + 1 + /health with the wrong one); the untrusted case reached the gateway with none
    assert tokens.count(f"Bearer {TOKEN}") == 8 and tokens.count(f"Bearer {wrong}") == 3 and len(tokens) == 11
