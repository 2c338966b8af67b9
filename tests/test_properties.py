"""Property-based tests: every config parser and the CLI's parameter path, fed arbitrary input.

For any JSON/YAML value or string, a parser returns its typed config or raises one
:class:`~shipyard.core.errors.ShipyardError` line (no newline, capped length), never another
exception, and within a time bound. Hypothesis runs derandomized (a fixed seed: CI sees the same
examples every time) with a bounded number of examples, and without its example database.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shipyard.core.errors import MAX_LINE, ShipyardError

#: every example must finish within this (the parsers are pure Python; 2 s is generous on a busy 2-core CI)
DEADLINE = timedelta(seconds=2)
FAST = settings(derandomize=True, max_examples=60, deadline=DEADLINE, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)


def _one_line_or_value(parse: Callable[[], Any]) -> Any:
    """Call ``parse``: its value, or None when it raised a proper one-line ShipyardError."""
    started = time.monotonic()
    try:
        return parse()
    except ShipyardError as err:
        line = str(err)
        assert "\n" not in line and line.strip(), repr(line)
        assert len(line) <= MAX_LINE, len(line)
        return None
    finally:
        assert time.monotonic() - started < DEADLINE.total_seconds()


def _dicts_with(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Mappings whose keys are mostly the parser's own (so values reach the type checks)."""
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=8), JSON_VALUES, max_size=6)


def _as_text(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


# --------------------------------------------------------------------------- strict JSON / YAML


@FAST
@given(st.text(max_size=200))
def test_json_object_any_text(text: str) -> None:
    from shipyard.core.jsonargs import json_object

    result = _one_line_or_value(lambda: json_object(text, "slo", "{}"))
    assert result is None or isinstance(result, dict)


@FAST
@given(st.text(max_size=200))
def test_load_yaml_any_text(text: str) -> None:
    import yaml

    from shipyard.core.jsonargs import load_yaml

    try:
        _one_line_or_value(lambda: load_yaml(text, "value"))
    except yaml.YAMLError:
        pass  # a syntax error is the caller's to word (every caller maps it to one line)


@FAST
@given(data=st.binary(max_size=300))
def test_params_file_any_bytes(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    from shipyard.core.jsonargs import load_mapping_file

    path = tmp_path_factory.mktemp("p") / "params.yaml"
    path.write_bytes(data)
    result = _one_line_or_value(lambda: load_mapping_file(path, "--params-file"))
    assert result is None or (isinstance(result, dict) and all(isinstance(k, str) for k in result))


# --------------------------------------------------------------------------- the typed configs

EVAL_KEYS = ["tasks", "num_fewshot", "limit", "batch_size", "apply_chat_template", "seed", "gen_kwargs", "task_dir",
             "backend", "bootstrap_iters", "log_samples", "cache"]
BENCH_KEYS = ["profile", "loads", "prompt_tokens", "output_tokens", "max_requests", "max_seconds", "warmup_requests",
              "warmup_seconds", "server_warmup_requests", "sweep_size", "max_concurrency", "request_format",
              "request_timeout", "vllm_args", "cpu_kv_cache_gib", "startup_timeout", "seed", "use_planner_args",
              "data", "port"]
DEPLOY_KEYS = ["preset", "mode", "replicas", "prefill_replicas", "tensor_parallel", "gpus", "gpu_memory_gib",
               "namespace", "router", "scaling", "labels", "annotations", "env", "vllm_args", "node_selector",
               "tolerations", "probes", "resources", "cpu", "memory", "objectives", "lora", "image_pull_secrets",
               "apply", "verify", "rollout", "attestation"]
SLO_KEYS = ["ttft_p99_ms", "itl_p99_ms", "min_output_tokens_per_s", "max_error_rate", "min_goodput", "require"]
ACCURACY_KEYS = ["rule", "max_loss", "max_relative_loss", "alpha", "power", "allow_inconclusive", "multiple_comparisons",
                 "min_recovery", "stderr_k", "metrics", "paired_max_loss", "paired_confidence"]


@FAST
@given(_dicts_with(EVAL_KEYS) | JSON_VALUES)
@example({"limit": math.nan})  # the examples below are inputs that once passed or crashed
@example({"seed": -1})
@example({"limit": 1e308})
@example({"gen_kwargs": {"temperature": math.inf}})
def test_eval_config_any_value(value: Any) -> None:
    from shipyard.evaluation.config import EvalConfig, parse_eval_config

    result = _one_line_or_value(lambda: parse_eval_config(_as_text(value)))
    if result is not None:
        assert isinstance(result, EvalConfig)
        json.dumps(result.to_dict(), allow_nan=False)  # only finite numbers
        assert result.limit is None or result.limit <= 10_000_000
        assert result.seed >= 0 and (result.limit is None or (0 < result.limit and math.isfinite(result.limit)))


@FAST
@given(_dicts_with(BENCH_KEYS) | JSON_VALUES)
@example({"max_seconds": math.inf})
@example({"seed": -4})
@example({"max_requests": 10**30})
def test_benchmark_config_any_value(value: Any) -> None:
    from shipyard.benchmarking.guidellm import parse_benchmark_config

    result = _one_line_or_value(lambda: parse_benchmark_config(_as_text(value)))
    if result is not None:
        assert isinstance(result, dict)
        json.dumps(result, allow_nan=False)  # only finite numbers
        assert (result.get("seed") or 0) >= 0 and (result.get("max_requests") or 0) < 2**63
        assert all(math.isfinite(x) for x in result["loads"])


@FAST
@given(_dicts_with(DEPLOY_KEYS) | JSON_VALUES)
@example({"scaling": [1]})
@example({"namespace": 5})
@example({"labels": {"team": [1]}})
@example({"apply": {"poll_s": "abc"}})
@example({"apply": {"poll_s": True}})
@example({"verify": {"checks": [["models"]]}})
def test_deploy_config_any_value(value: Any) -> None:
    from shipyard.params.deploy import parse_deploy_config

    uri = "oci://quay.io/org/m@sha256:" + "a" * 64
    _one_line_or_value(lambda: parse_deploy_config(_as_text(value), name="llm", model_uri=uri))


@FAST
@given(_dicts_with(SLO_KEYS + ACCURACY_KEYS) | JSON_VALUES | st.text(max_size=30))
def test_gate_configs_any_value(value: Any) -> None:
    from shipyard.gates.config import accuracy_config, selection_config, slo_config

    text = value if isinstance(value, str) else _as_text(value)
    for parse in (slo_config, accuracy_config, selection_config):
        _one_line_or_value(lambda parse=parse: parse(text))


# --------------------------------------------------------------------------- the CLI's parameter path


def _param_names() -> list[str]:
    from shipyard.params.pipeline import params_for

    return [p.name for p in params_for("optimize-and-deploy")]


@FAST
@given(st.sampled_from(_param_names()), st.text(max_size=60) | JSON_VALUES.map(_as_text))
@example("seed", "\uff11\uff12")  # full-width digits
@example("seed", "-1")
@example("seed", "9" * 30)
@example("num_calibration_samples", "99999999999")
@example("namespace", "Bad_NS")
@example("eval_config", '{"limit": NaN}')
@example("benchmark_config", '{"max_seconds": 1e999}')
@example("deploy_config", '{"scaling": [1]}')
@example("model_uri", "hf://org/my model")
@example("model_uri", "s3://bucket")
@example("model_uri", "x" * 300)  # a name too long for the filesystem (ENAMETOOLONG)
@example("recipes", "q" * 300)
@example("eval_config", '{"task_dir": "' + "x" * 300 + '"}')
def test_any_param_text_is_typed_or_one_line(name: str, text: str) -> None:
    """``--param NAME=TEXT`` for every parameter: pre-flight types and checks it or says one line;
    what it accepts is sane (ASCII integers within int64, seeds and counts not negative)."""
    from shipyard.params.checks import check_parameters
    from shipyard.params.specs import split_params

    raw = _one_line_or_value(lambda: split_params([f"{name}={text}", "dry_run=true"]))
    if raw is not None:
        typed = _one_line_or_value(lambda: check_parameters("optimize-and-deploy", raw))
        if typed is not None:
            assert set(typed) >= {name, "dry_run"}
            value = typed[name]
            if isinstance(value, int) and not isinstance(value, bool):
                assert text.strip().isascii() and 0 <= value < 2**63, (name, text, value)


@FAST
@given(st.sampled_from(_param_names()), JSON_VALUES)
def test_any_params_file_value_is_typed_or_one_line(name: str, value: Any) -> None:
    """A params file's YAML value of any type (what ``--params-file`` hands over) for every parameter."""
    from shipyard.params.checks import check_parameters

    _one_line_or_value(lambda: check_parameters("optimize-and-deploy", {name: value, "dry_run": True}))


@FAST
@given(st.lists(st.text(max_size=30), max_size=5))
def test_split_params_any_items(items: list[str]) -> None:
    from shipyard.params.specs import split_params

    result = _one_line_or_value(lambda: split_params(items))
    if result is not None:
        assert len(result) == len(items)


# --------------------------------------------------------------------------- redaction

#: printable ASCII without spaces and quotes (what a URI or a shell word can carry): "/", "@", ":" included
_PASSWORDS = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="'\"<>"),
                     min_size=6, max_size=20).map(lambda s: "Zq9" + s)


@FAST
@given(st.sampled_from(["https", "http", "s3", "hf", "oci"]), st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
       _PASSWORDS, st.sampled_from(["quay.io", "127.0.0.1:9", "bucket/model", "host/p@th"]))
def test_redact_hides_any_password_in_a_uri(scheme: str, user: str, password: str, host: str) -> None:
    """``/``, ``@`` and ``:`` inside the password included; the redaction is idempotent."""
    from shipyard.core.redact import redact

    uri = f"{scheme}://{user}:{password}@{host}"
    shown = redact(f"cannot reach {uri} (fix: ...)")
    assert password not in shown, shown
    assert redact(shown) == shown


#: every character RFC 3986 allows in a userinfo as itself (unreserved and sub-delims; ":" only in the password)
_USERINFO_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;="
_PCT = st.sampled_from(["%40", "%3A", "%2F", "%25", "%27", "%20", "%e2%82%ac"])
#: a user name or password: the legal characters and percent-escapes; a fixed prefix makes it findable
_LEGAL = st.lists(st.sampled_from(list(_USERINFO_CHARS)) | _PCT, min_size=1, max_size=16).map("".join)
_URL_SCHEMES = ["http", "https", "s3", "oci", "hf", "postgresql", "mysql+pymysql", "git+https"]
_URL_HOSTS = ["quay.io", "127.0.0.1:9", "mlflow.kubeflow.svc:5000/#/experiments/1", "bucket/model", "[::1]:8080/v1",
              "quay.io/org/m@sha256:" + "a" * 64, "localhost:5000/org/m:v1", "host/p@th?token=x#frag"]
#: where a URL is printed: a sentence, quotes, a Python repr, JSON, a key=value log field, punctuation
_CONTEXTS = ["cannot reach {} (fix: ...)", "'{}'", "{{'url': '{}', 'n': 1}}", '{{"url": "{}"}}', "url={}, retrying",
             "see ({}).", "{}", "GET {}\nnext line @ 2"]


@FAST
@given(st.sampled_from(_URL_SCHEMES), _LEGAL.map(lambda s: "Tk7" + s), st.none() | _LEGAL.map(lambda s: "Zq9" + s)
       | st.lists(st.sampled_from(list(_USERINFO_CHARS + ":")) | _PCT, max_size=12).map(lambda p: "Zq9" + "".join(p)),
       st.sampled_from(_URL_HOSTS), st.sampled_from(_CONTEXTS))
@example("http", "Tk7ghp_abc", None, "quay.io", "{}")  # the token as the user name, no password
@example("https", "Tk7u", "Zq9it's", "quay.io", "'{}'")  # a quote in the password, inside quotes
@example("s3", "Tk7KEY", "Zq9a:b%40c;d=e", "bucket/model", "url={}, retrying")
def test_redact_hides_every_userinfo_form(scheme: str, user: str, password: str | None, host: str,
                                          context: str) -> None:
    """In every scheme and wherever the URL is printed, neither the user name (often the token
    itself: ``https://TOKEN@host``) nor the password shows; every legal userinfo character counts;
    the host stays; idempotent."""
    from shipyard.core.redact import has_credentials, redact

    userinfo = user if password is None else f"{user}:{password}"
    text = context.format(f"{scheme}://{userinfo}@{host}")
    shown = redact(text)
    assert user not in shown and (password is None or password not in shown), shown
    assert f"***@{host.split('/')[0].split('?')[0]}" in shown, shown
    assert redact(shown) == shown
    assert has_credentials(text) and not has_credentials(shown)


@FAST
@given(_LEGAL.map(lambda s: "Tk7" + s), _LEGAL.map(lambda s: "Zq9" + s),
       st.sampled_from(["registry={}", "--registry {}", "({})", "'{}'"]))
def test_redact_hides_a_scheme_less_userinfo(user: str, password: str, context: str) -> None:
    """``registry=user:password@quay.io``: a registry reference has no scheme."""
    from shipyard.core.redact import redact

    shown = redact(context.format(f"{user}:{password}@quay.io/org/m"))
    assert password not in shown and "***@quay.io/org/m" in shown, shown


@FAST
@given(st.sampled_from(["http://", "https://", ""]), _LEGAL.map(lambda s: "Tk7" + s),
       st.none() | _LEGAL.map(lambda s: "Zq9" + s), st.sampled_from(["minio:9000", "127.0.0.1:9", "s3.example.com"]),
       st.sampled_from(["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "SHIPYARD_S3_ENDPOINT"]))
@example("", "Tk7AKIAKEY", None, "minio:9000", "AWS_ENDPOINT_URL_S3")  # a bare host:port is https: a token as the user
def test_an_s3_endpoint_with_any_userinfo_is_refused_without_showing_it(
        scheme: str, user: str, password: str | None, host: str, name: str) -> None:
    """The S3 endpoint (``AWS_ENDPOINT_URL_S3`` and its alternatives; the Secret shipyard-s3's), with
    or without a scheme, with every legal userinfo form: one line naming the variable, neither the
    user name nor the password shown; ``shipyard check``'s Secret line applies the same rule."""
    from shipyard.core.errors import ShipyardError
    from shipyard.models.s3 import endpoint_setting
    from shipyard.serving.cluster_check import credentials_in_uri_keys

    value = f"{scheme}{user if password is None else f'{user}:{password}'}@{host}"
    with pytest.raises(ShipyardError) as err:
        endpoint_setting({name: value})
    line = str(err.value)
    assert line.startswith(f"{name}: http") and "carries credentials (not shown)" in line and "\n" not in line, line
    assert user not in line and (password is None or password not in line), line
    found = credentials_in_uri_keys({"AWS_ENDPOINT_URL_S3": value})
    assert found is not None and user not in found[0] and (password is None or password not in found[0]), found


@pytest.mark.parametrize("text", [f"oci://quay.io/org/m@sha256:{'a' * 64}", f"oci://localhost:5000/o/m@sha256:{'b' * 64}",
                                  "quay.io:5000/org/m@sha256:" + "c" * 64, "hf://org/model@main", "http://[::1]:8080/x@y",
                                  "mail bob@example.com", "file:///tmp/mlruns", "http://127.0.0.1:9/v1/models",
                                  "hf_transfer and HF_TOKEN and secret_env"])
def test_redact_leaves_what_is_not_a_credential(text: str) -> None:
    from shipyard.core.redact import redact

    assert redact(text) == text


def test_redact_is_linear_on_long_words_and_big_text() -> None:
    """Words of 32,000 characters built to make a backtracking search rescan them from every
    position, and 10 MB strings: all of them together within a generous deadline (the quadratic
    redaction took about 10 s for each word alone). Nothing is timed; a hang is an alarm."""
    import signal

    from shipyard.core.redact import redact

    n = 32_000
    words = ["a" * n, "http://" + "a" * n + "@h", "x:" + "a" * n, "http://u:" + "'" * n, "token=" + "a" * n,
             "--secret" * (n // 8), "a" * n + ":" + "b" * 100, "a:b@" * (n // 4), "x://@" * (n // 5), "@" * n,
             "password='" * (n // 10), "-AKIAAAAAAAAAAAAAAAAA" * (n // 20), "Bearer " * (n // 7)]
    big = ["a" * 10_000_000, ("lorem ipsum dolor sit amet, consectetur " * 250_000)[:10_000_000],
           "x" * 5_000_000 + " http://TOKEN@host " + "y" * 5_000_000]

    def hang(signum: int, frame: object) -> None:
        raise TimeoutError("redaction did not finish within 60 s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    try:
        for text in words + big:
            shown = redact(text)
            assert len(shown) <= len(text) + 8
        assert "TOKEN" not in redact(big[-1])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_properties_file_is_bounded() -> None:
    """The settings this file runs under: a fixed seed and a bounded number of examples (CI time)."""
    assert FAST.derandomize and FAST.max_examples <= 100 and FAST.database is None
    assert Path(__file__).name == "test_properties.py"
