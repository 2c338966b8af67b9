"""The library's one-of-each helpers (shipyard.core): environment variables, retries, ports."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shipyard.core.env import env_bool, env_float, env_int, env_str, hub_offline
from shipyard.core.errors import ShipyardError
from shipyard.core.net import call_within, free_port, http_ok, process_alive, transfer_deadline, wait_ready
from shipyard.core.retry import Retry
from shipyard.core.yamldocs import documents, dump_documents
from shipyard.oci.client import RegistryClient
from shipyard.tracking.tracker import Tracker


@pytest.mark.parametrize(("raw", "want"), [("1", True), ("TRUE", True), ("yes", True), ("on", True),
                                           ("0", False), ("false", False), ("No", False), ("off", False)])
def test_env_bool_reads_the_usual_spellings(monkeypatch: pytest.MonkeyPatch, raw: str, want: bool) -> None:
    monkeypatch.setenv("SHIPYARD_DEBUG", raw)
    assert env_bool("SHIPYARD_DEBUG") is want


@pytest.mark.parametrize("raw, offline", [("1", True), ("TRUE", True), ("on", True), ("yes", True), ("", False),
                                          ("0", False), ("false", False), ("off", False), ("no", False)])
def test_hub_offline_reads_hf_hub_offline_as_huggingface_hub_does(raw: str, offline: bool) -> None:
    """``HF_HUB_OFFLINE=false`` is online for huggingface_hub (``constants._is_true``: 1/ON/YES/TRUE);
    the plan and the pin used to disagree on it."""
    assert hub_offline({"HF_HUB_OFFLINE": raw}) is offline


def test_env_unset_or_empty_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_EMPTY", "  ")
    monkeypatch.delenv("X_UNSET", raising=False)
    assert env_bool("X_UNSET", True) is True and env_bool("X_EMPTY") is False
    assert env_int("X_EMPTY", 5) == 5 and env_float("X_UNSET", 2.5) == 2.5
    assert env_str("X_UNSET", "d") == "d"
    assert env_int("N", 1, environ={"N": " 7 "}) == 7 and env_float("F", 1.0, environ={"F": "0.25"}) == 0.25


@pytest.mark.parametrize(("reader", "raw", "problem"), [
    (lambda: env_bool("SHIPYARD_TEST_VAR"), "maybe", "'maybe' is not a boolean"),
    (lambda: env_int("SHIPYARD_TEST_VAR", 5), "five", "'five' is not a whole number"),
    (lambda: env_int("SHIPYARD_TEST_VAR", 5), "2.5", "'2.5' is not a whole number"),
    (lambda: env_int("SHIPYARD_TEST_VAR", 5, minimum=1), "0", "0 is below 1"),
    (lambda: env_float("SHIPYARD_TEST_VAR", 1.0), "fast", "'fast' is not a finite number"),
    (lambda: env_float("SHIPYARD_TEST_VAR", 1.0), "nan", "'nan' is not a finite number"),
    (lambda: env_float("SHIPYARD_TEST_VAR", 1.0, minimum=0.0), "-1", "-1 is below 0"),
])
def test_env_bad_value_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch, reader, raw: str,
                                                       problem: str) -> None:
    monkeypatch.setenv("SHIPYARD_TEST_VAR", raw)
    with pytest.raises(ShipyardError) as info:
        reader()
    assert info.value.field == "SHIPYARD_TEST_VAR"
    assert info.value.problem == problem
    assert "\n" not in str(info.value) and info.value.fix


def test_retry_waits_double_and_are_capped() -> None:
    policy = Retry(6, 4.0, cap_s=20.0)
    assert [policy.delay(a) for a in range(1, 6)] == [4.0, 8.0, 16.0, 20.0, 20.0]
    assert Retry(0, -1.0).attempts == 1 and Retry(0, -1.0).backoff_s == 0.0
    assert not policy.is_last(5) and policy.is_last(6)


def test_retry_tries_sleeps_only_between_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("shipyard.core.retry.time.sleep", slept.append)
    assert list(Retry(4, 0.5).tries()) == [1, 2, 3, 4]
    assert slept == [0.5, 1.0, 2.0]
    slept.clear()
    for attempt in Retry(4, 0.5).tries():
        if attempt == 2:
            break
    assert slept == [0.5]


def test_retry_from_env_reads_the_clients_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_REGISTRY_RETRIES", "3")
    monkeypatch.setenv("SHIPYARD_REGISTRY_BACKOFF", "0.1")
    assert Retry.from_env("SHIPYARD_REGISTRY_RETRIES", "SHIPYARD_REGISTRY_BACKOFF", attempts=5, backoff_s=1) == Retry(3, 0.1)
    monkeypatch.setenv("SHIPYARD_REGISTRY_RETRIES", "three")
    with pytest.raises(ShipyardError, match="SHIPYARD_REGISTRY_RETRIES: 'three' is not a whole number"):
        Retry.from_env("SHIPYARD_REGISTRY_RETRIES", "SHIPYARD_REGISTRY_BACKOFF", attempts=5, backoff_s=1)


@pytest.mark.parametrize(("variable", "make"), [
    ("SHIPYARD_REGISTRY_RETRIES", lambda tmp: RegistryClient("127.0.0.1:1", "team/x")),
    ("SHIPYARD_MLFLOW_ATTEMPTS", lambda tmp: Tracker(str(tmp / "mlruns"))),
])
def test_both_clients_refuse_a_bad_retry_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, make) -> None:
    monkeypatch.setenv(variable, "lots")
    with pytest.raises(ShipyardError, match=f"^{variable}: 'lots' is not a whole number"):
        make(tmp_path)
    monkeypatch.setenv(variable, "2")
    assert make(tmp_path).retry.attempts == 2


def test_free_port_and_wait_ready_against_a_real_server(tmp_path: Path) -> None:
    import subprocess
    import sys

    port = free_port()
    log = tmp_path / "http.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        assert not http_ok(f"http://127.0.0.1:{free_port()}/")  # nobody listens there
        wait_ready("http.server", lambda: http_ok(f"http://127.0.0.1:{port}/"), timeout_s=30,
                   alive=process_alive("http.server", proc, log))
        assert http_ok(f"http://127.0.0.1:{port}/missing", statuses=(404,))
    finally:
        proc.terminate()
        proc.wait()
    with pytest.raises(ShipyardError, match=r"^http.server: exited with status"):
        wait_ready("http.server", lambda: False, timeout_s=30, alive=process_alive("http.server", proc, log))


def test_wait_ready_times_out_with_one_line() -> None:
    with pytest.raises(ShipyardError, match=r"^thing: not ready within 0 s \(fix: check the service\)$"):
        wait_ready("thing", lambda: False, timeout_s=0.3, interval_s=0.05)
    with pytest.raises(ShipyardError, match="^custom: gone"):
        wait_ready("thing", lambda: False, timeout_s=0.1, interval_s=0.05,
                   timeout_error=lambda: ShipyardError("custom", "gone"))


def test_one_step_record_reader(tmp_path: Path) -> None:
    from shipyard.core.records import read_optional_record, read_record

    folder = tmp_path / "results"
    folder.mkdir()

    def read(path: Path) -> dict:
        return read_record(path, "summary.json", field="base_results", what="evaluation summary", fix="rerun it",
                           check=lambda d: None if "scores" in d else "has no scores")

    with pytest.raises(ShipyardError, match=r"^base_results: no evaluation summary at .*results/summary.json \(fix"):
        read(folder)
    (folder / "summary.json").write_text("{oops")
    with pytest.raises(ShipyardError, match=r"^base_results: cannot read .*summary.json: JSONDecodeError"):
        read(folder)
    (folder / "summary.json").write_text("[1]")
    with pytest.raises(ShipyardError, match=r"summary.json is not a JSON object"):
        read(folder)
    (folder / "summary.json").write_text('{"other": 1}')
    with pytest.raises(ShipyardError, match=r"summary.json has no scores"):
        read(folder)
    (folder / "summary.json").write_text('{"scores": {}}')
    assert read(folder) == read(folder / "summary.json") == {"scores": {}}
    assert read_optional_record(folder, "tuning.json") is None
    assert read_optional_record(folder, "summary.json", check=lambda d: "no") is None


@pytest.mark.parametrize(("value", "kind", "bounds", "problem"), [
    (float("nan"), float, {"minimum": 0, "exclusive": True}, "must be a finite number > 0, got nan"),
    (0, float, {"minimum": 0, "exclusive": True}, "must be a finite number > 0, got 0"),
    (True, int, {"minimum": 1}, "must be a whole number, got True"),
    (1.5, int, {"minimum": 1}, "must be a whole number, got 1.5"),
    ("2", float, {}, "must be a finite number, got '2'"),
    (0, int, {"minimum": 1}, "must be a whole number >= 1, got 0"),
    (3.0, float, {"minimum": 0, "maximum": 1}, "must be a finite number in [0, 1], got 3.0"),
])
def test_one_number_check(value: object, kind: type, bounds: dict, problem: str) -> None:
    from shipyard.core.numbers import check_number

    with pytest.raises(ShipyardError) as info:
        check_number(value, "field", kind, fix="fix it", **bounds)
    assert (info.value.field, info.value.problem) == ("field", problem)
    assert check_number(None, "field", optional=True) is None and check_number(2, "f", int, minimum=1) == 2


@pytest.mark.parametrize(("raw", "problem"), [
    ("[--max", "is not valid JSON"), ('{"a": 1}', "is not a JSON list of text"), ("[1]", "is not a JSON list of text")])
def test_eval_vllm_args_variable_is_one_line_before_vllm_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                raw: str, problem: str) -> None:
    from shipyard.evaluation import lmeval
    from shipyard.evaluation.config import parse_eval_config

    monkeypatch.setenv("SHIPYARD_EVAL_VLLM_ARGS", raw)
    with pytest.raises(ShipyardError) as info:
        lmeval._run_openai(parse_eval_config(""), tmp_path / "no-model", None, tmp_path)
    assert info.value.field == "SHIPYARD_EVAL_VLLM_ARGS" and info.value.problem.startswith(problem)


# --------------------------------------------------------------------------- credentials: one check, one redaction
SECRET = "hunter2pw"
TOKEN_LIKE = "Zx8Qw3Er5Ty7Ui9Op1As2Df4Gh6Jk8Lz0Xc"


@pytest.mark.parametrize("value", [f"http://{SECRET}@host", f"https://bob:{SECRET}@host:8443/x",
                                   f"s3://KEY:it's{SECRET}@bucket/m", f"oci://{SECRET}@quay.io/o/m@sha256:{'a' * 64}",
                                   f"hf://{SECRET}@org/model", f"postgresql://mlflow:{SECRET}%40x@db/mlflow",
                                   f"bob:{SECRET}@quay.io/busybox", f"https://b.s3.amazonaws.com/k?X-Amz-Signature={SECRET}"])
def test_refuse_credentials_names_the_field_never_the_value(value: str) -> None:
    from shipyard.core.errors import refuse_credentials

    with pytest.raises(ShipyardError) as err:
        refuse_credentials(value, "some_field", "use the Secret")
    line = str(err.value)
    assert line.startswith("some_field: ") and "carries credentials (not shown)" in line and "use the Secret" in line
    assert SECRET not in line and "\n" not in line


@pytest.mark.parametrize("value", ["", "http://127.0.0.1:9", f"oci://quay.io:5000/o/m@sha256:{'a' * 64}",
                                   "hf://org/model@main", "s3://bucket/calib.jsonl", "HuggingFaceH4/ultrachat:train"])
def test_refuse_credentials_lets_plain_uris_through(value: str) -> None:
    from shipyard.core.errors import refuse_credentials

    refuse_credentials(value, "some_field")


def test_shown_hides_a_token_given_for_a_name() -> None:
    from shipyard.core.errors import shown

    assert shown("My_Secret") == "'My_Secret'"
    for token in (TOKEN_LIKE, "hf_" + "AbCdEfGhIjKlMnOpQrStUvWx", "ghp_" + "a1" * 18):
        assert token not in shown(token) and "not shown" in shown(token)
    assert shown("3f2a9c0e1b7d4a6f8e2c5b9a0d1e3f4a5b6c7d8e") != "(a value that looks like a credential, not shown)"


def test_reports_and_mlflow_params_and_tags_are_redacted() -> None:
    """The output paths besides errors and logs: every report text and every MLflow param and tag."""
    from shipyard.core.report import Doc, GateReport
    from shipyard.tracking.tracker import to_params, to_tags

    url = f"http://{SECRET}@mlflow.example/#/runs/1"
    doc = (Doc(f"report {url}").h(1, url).p(url, "Run:").warn(url).note(url).items([url])
           .table(["a", "b"], [[url, {"k": url}]]).config({"tracking_uri": url, "token": SECRET, "n": {"password": "x"}}))
    for text in (doc.to_markdown(), doc.to_html()):
        assert SECRET not in text and "***@mlflow.example" in text, text
    gate = GateReport("g", False, f"cannot reach {url}", context={"auth": SECRET})
    assert SECRET not in gate.to_markdown() + gate.to_html()
    params = to_params({"tracking_uri": url, "nested": {"token": SECRET}, "n": 3})
    tags = to_tags({"source": f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@b/m", "password": SECRET})
    assert SECRET not in str(params) + str(tags) and params["n"] == "3", (params, tags)


def test_a_user_text_file_is_a_regular_file_of_bounded_size_or_standard_input(tmp_path: Path, monkeypatch) -> None:
    """Issue 34: a pipe is refused before it is opened (no writer: it would wait forever), a file over
    the bound before it is read, and ``-`` reads standard input."""
    import io
    import os
    import sys

    from shipyard.core.jsonargs import MAX_TEXT_BYTES, load_mapping_file, read_text

    fifo = tmp_path / "params.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ShipyardError, match="is not a regular file"):
        read_text(fifo, "--params-file")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_TEXT_BYTES + 1))
    with pytest.raises(ShipyardError, match="more than the 8 MiB"):
        load_mapping_file(big, "--params-file")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"seed: 3\n")))
    assert load_mapping_file("-", "--params-file") == {"seed": 3}
    with pytest.raises(ShipyardError, match="is a folder"):
        load_mapping_file(tmp_path, "--params-file")


#: two documents as ``kfp compile`` and ``kubectl`` write them, with the empty ones a ``---`` leaves
MULTI_DOC = """\
# a comment before the first document
---
pipelineInfo: {name: shipyard-compress}
root:
  dag:
    tasks:
      zeta: {cachingOptions: {}, taskInfo: {name: zeta}}
      alpha: {taskInfo: {name: "caf\u00e9 \u2713"}}
  inputDefinitions: {parameters: {slo_ttft_ms: {defaultValue: 1.5e3}, created: {defaultValue: '2024-01-01'}}}
---
---
# only a comment
---
platforms: {kubernetes: {deploymentSpec: {executors: {exec-a: {nodeSelector: {labels: {gpu: 'true'}}}}}}}
...
"""


def test_yaml_documents_reads_as_safe_load_all_without_the_empty_ones() -> None:
    docs = documents(MULTI_DOC)
    assert docs == [d for d in yaml.safe_load_all(MULTI_DOC) if d] and len(docs) == 2
    assert docs[0]["root"]["inputDefinitions"]["parameters"]["created"]["defaultValue"] == "2024-01-01"
    assert docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-a"]["nodeSelector"] == {
        "labels": {"gpu": "true"}}
    assert documents("") == [] and documents("---\n---\n") == []


def test_yaml_dump_documents_round_trips_keeping_key_order() -> None:
    docs = documents(MULTI_DOC)
    text = dump_documents(docs)
    assert documents(text) == docs and text.count("\n---") == 1  # two documents, one separator
    assert list(documents(text)[0]["root"]["dag"]["tasks"]) == ["zeta", "alpha"]  # not sorted
    assert "'2024-01-01'" in text and "'true'" in text  # strings that look like a date or a bool stay strings


def test_yaml_documents_refuses_python_tags() -> None:
    """Safe loading: a compiled pipeline or a manifest cannot construct Python objects."""
    with pytest.raises(yaml.YAMLError):
        documents("a: !!python/object/apply:os.system ['true']\n")


def test_call_within_hands_back_the_value_or_the_error_and_ends_at_the_deadline() -> None:
    """``call_within``: the call's value or its own exception as they are; past the deadline the
    caller gets ``on_timeout()`` at once, and the sockets the call made (or makes) are shut."""
    import socket
    import threading
    import time

    assert call_within(5, lambda a, b=0: a + b, 2, b=3, on_timeout=lambda: AssertionError("late")) == 5
    with pytest.raises(KeyError):
        call_within(5, {}.__getitem__, "missing", on_timeout=lambda: AssertionError("late"))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    ended = threading.Event()

    def silent_read() -> bytes:  # a server that accepts and never answers: no per-read timeout
        try:
            with socket.create_connection(server.getsockname()) as sock:
                return sock.recv(1)
        finally:
            ended.set()

    started = time.monotonic()
    with pytest.raises(TimeoutError, match="late"):
        call_within(0.5, silent_read, on_timeout=lambda: TimeoutError("late"))
    assert time.monotonic() - started < 2 and ended.wait(2)  # its socket shut: the blocked read ended too
    server.close()
    assert transfer_deadline(10, 256 * 1024 * 20) == 30 and transfer_deadline(10, None) == 10


def test_call_within_ends_the_threads_its_call_started_at_the_deadline() -> None:
    """A library that downloads in a pool of its own (``datasets``, s3transfer): the pool's worker,
    blocked on a server that sends a byte every 0.1 s, is in the call's scope: its socket is shut
    at the deadline, so the call ends then and the worker is gone soon after, not left reading
    (holding the process's exit: a pool's workers are joined at exit). A thread started outside
    any call is not touched."""
    import contextlib
    import socket
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    stop = threading.Event()
    server = socket.create_server(("127.0.0.1", 0))

    def drip() -> None:  # accept, then one byte every 0.1 s until the test ends
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            serving.append(threading.Thread(target=send, args=(conn,), daemon=True))
            serving[-1].start()

    def send(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while not stop.is_set():
                conn.sendall(b" ")
                stop.wait(0.1)

    serving = [threading.Thread(target=drip, daemon=True)]
    serving[0].start()

    def read_all() -> int:
        with socket.create_connection(server.getsockname()) as sock:
            got = 0
            while sock.recv(1):
                got += 1
            return got

    def in_a_pool() -> int:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="drip-pool") as pool:
            return pool.submit(read_all).result()

    before = set(threading.enumerate())

    def pool_threads() -> list[threading.Thread]:  # the call's thread and its pool's, not the server's
        return [t for t in threading.enumerate() if t not in before and t not in serving]

    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="late"):
            call_within(0.5, in_a_pool, on_timeout=lambda: TimeoutError("late"))
        assert time.monotonic() - started < 2
        while pool_threads() and time.monotonic() - started < 5:
            time.sleep(0.05)
        assert not pool_threads(), f"still alive 5 s into a 0.5 s deadline: {pool_threads()}"
        # a pool started outside any call reads on as before (its thread was never in a scope)
        with ThreadPoolExecutor(max_workers=1) as pool:
            outside = pool.submit(read_all)
            assert call_within(5, lambda: 7, on_timeout=lambda: TimeoutError("late")) == 7
            time.sleep(0.5)
            assert not outside.done()
            stop.set()
            assert outside.result(timeout=5) > 0
    finally:
        stop.set()
        server.close()


def test_a_pool_kept_past_its_call_is_free_after_one_in_time_and_refuses_sockets_after_one_past_its_deadline() -> None:
    """A pool whose worker a call started and that outlives the call (a library's module-level
    pool): after a call that ended in time the worker opens sockets as if started outside; after
    one past its deadline it refuses them at once (DeadlinePassed), never waits on a new one."""
    import socket
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from shipyard.core.net import DeadlinePassed

    def connect() -> None:
        with socket.socket():
            pass

    in_time = ThreadPoolExecutor(max_workers=1)
    call_within(5, lambda: in_time.submit(connect).result(), on_timeout=lambda: TimeoutError("late"))
    in_time.submit(connect).result(timeout=5)  # the same worker, after the call: not refused
    in_time.shutdown()
    late = ThreadPoolExecutor(max_workers=1)
    release = threading.Event()
    with pytest.raises(TimeoutError, match="late"):
        call_within(0.2, lambda: late.submit(release.wait, 5).result(), on_timeout=lambda: TimeoutError("late"))
    release.set()
    with pytest.raises(DeadlinePassed):
        late.submit(connect).result(timeout=5)
    late.shutdown()

