"""``shipyard submit / schedule / runs`` through kfp.Client against a schema-checking KFP double."""


import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kfp import compiler, dsl
from kfp_double import KfpDouble, validate_cron

from shipyard.cli.main import main
from shipyard.core.errors import ShipyardError
from shipyard.run.kfp_client import parse_duration, to_kfp_cron

TOKEN = "s3cret-token"


@dsl.component(base_image="python:3.11-slim")
def say(text: str) -> str:
    return text


@dsl.pipeline(name="tiny-requantize")
def tiny_pipeline(text: str = "hi", repeats: int = 1) -> None:
    say(text=text)


@pytest.fixture()
def double() -> Iterator[KfpDouble]:
    d = KfpDouble(token=TOKEN).start()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pipe") / "tiny.yaml"
    compiler.Compiler().compile(tiny_pipeline, str(path))
    return str(path)


def _cli(*argv: str) -> int:
    return main(list(argv))


def test_submit_uploads_then_versions_and_runs(double: KfpDouble, package: str, capsys: pytest.CaptureFixture) -> None:
    assert _cli("submit", package, "--host", double.url, "--token", TOKEN, "--experiment", "nightly",
                "--param", "text=hello", "--param", "repeats=3") == 0
    out = capsys.readouterr().out
    assert "pipeline tiny-requantize (new version" in out and "/#/runs/details/" in out
    kinds = [k for k, _, _ in double.requests]
    assert kinds == ["upload", "experiment", "run"]
    (pipeline,) = double.pipelines.values()
    run = next(body for k, _, body in double.requests if k == "run")
    assert run["runtime_config"]["parameters"] == {"text": "hello", "repeats": 3}
    assert run["pipeline_version_reference"]["pipeline_id"] == pipeline["pipeline_id"]
    assert double.experiments[run["experiment_id"]]["display_name"] == "nightly"

    # Same content again: the version named after its hash is created once, then reused.
    assert _cli("submit", package, "--host", double.url, "--token", TOKEN, "--experiment", "nightly") == 0
    assert _cli("submit", package, "--host", double.url, "--token", TOKEN, "--experiment", "nightly") == 0
    kinds = [k for k, _, _ in double.requests]
    assert kinds.count("upload") == 1 and kinds.count("upload_version") == 1 and kinds.count("experiment") == 1
    assert kinds.count("run") == 3 and len(double.versions) == 2
    assert not double.rejected


def test_submit_prints_yaml_and_takes_the_profile_namespace_as_n(double: KfpDouble, package: str,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """``-o yaml`` besides json (the same record), and ``-n NS`` (kubectl's spelling) is the
    profile namespace the experiment is created in."""
    import yaml

    assert _cli("submit", package, "--host", double.url, "--token", TOKEN, "-n", "team-a", "-o", "yaml") == 0
    record = yaml.safe_load(capsys.readouterr().out)
    assert record["run_id"] in double.runs and record["pipeline"] == "tiny-requantize"
    (experiment,) = [body for kind, _, body in double.requests if kind == "experiment"]
    assert experiment["namespace"] == "team-a"
    assert _cli("submit", package, "--host", double.url, "--token", TOKEN, "-o", "json") == 0
    assert set(json.loads(capsys.readouterr().out)) == set(record)
    assert not double.rejected


def test_schedule_cron_is_converted_echoed_and_valid(double: KfpDouble, package: str,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert _cli("schedule", package, "--host", double.url, "--token", TOKEN, "--cron", "30 2 * * 1-5",
                "--max-concurrency", "2", "--no-catchup", "--param", "text=nightly") == 0
    out = capsys.readouterr().out
    assert "cron (KFP, seconds first): 0 30 2 * * 1-5" in out
    assert not double.rejected
    ((kind, _, body),) = [r for r in double.requests if r[0] == "recurring_run"]
    assert body["trigger"] == {"cron_schedule": {"cron": "0 30 2 * * 1-5"}}
    assert body["mode"] == "ENABLE" and body["no_catchup"] is True
    assert int(body["max_concurrency"]) == 2
    assert body["runtime_config"]["parameters"] == {"text": "nightly"}
    assert set(body["pipeline_version_reference"]) == {"pipeline_id", "pipeline_version_id"}


def test_schedule_every_makes_a_periodic_run(double: KfpDouble, package: str) -> None:
    assert _cli("schedule", package, "--host", double.url, "--token", TOKEN, "--every", "1d12h") == 0
    (body,) = [b for k, _, b in double.requests if k == "recurring_run"]
    assert int(body["trigger"]["periodic_schedule"]["interval_second"]) == 129600
    assert "no_catchup" not in body or body["no_catchup"] in (None, False)


@pytest.mark.parametrize(("expr", "problem"), [
    ("61 * * * *", "minute field '61'"),
    ("* * *", "has 3 fields"),
    ("0 3 * * 7", "day-of-week 7"),
    ("0 ? * * *", "'?' is only allowed"),
    ("*/0 * * * *", "step '0'"),
    ("@fortnightly", "not a cron descriptor"),
])
def test_invalid_cron_is_one_line_before_any_request(double: KfpDouble, package: str, expr: str, problem: str,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert _cli("schedule", package, "--host", double.url, "--token", TOKEN, "--cron", expr) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shipyard: error: --cron") and problem in err and "\n" not in err
    assert double.requests == []


def test_cron_conversion_agrees_with_the_double() -> None:
    for five, six in [("0 3 * * *", "0 0 3 * * *"), ("*/15 9-17 * JAN-MAR MON,FRI", "0 */15 9-17 * JAN-MAR MON,FRI"),
                      ("0 0 12 ? * 2-6", "0 0 12 ? * 2-6"), ("@daily", "0 0 0 * * *")]:
        assert to_kfp_cron(five) == six
        validate_cron(six)  # what the double (robfig rules) accepts
    assert parse_duration("90") == 90 and parse_duration("1h30m") == 5400
    with pytest.raises(ShipyardError, match="--every"):
        parse_duration("soon")


def test_refused_token_is_one_line(double: KfpDouble, package: str, capsys: pytest.CaptureFixture) -> None:
    assert _cli("submit", package, "--host", double.url, "--token", "wrong") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shipyard: error: --host") and "refused the credentials (401" in err and "\n" not in err
    assert _cli("runs", "--host", double.url) == 2  # no token at all
    assert "refused the credentials" in capsys.readouterr().err
    assert double.requests == []


def test_token_and_cookie_from_env_and_runs_listing(double: KfpDouble, package: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("KF_PIPELINES_ENDPOINT", double.url)
    monkeypatch.setenv("KF_PIPELINES_TOKEN", TOKEN)
    assert _cli("submit", package, "--run-name", "first") == 0
    assert _cli("runs") == 0
    out = capsys.readouterr().out
    assert "PENDING" in out and "first" in out
    monkeypatch.delenv("KF_PIPELINES_TOKEN")
    double.token, double.cookie = None, "authservice_session=abc"
    assert _cli("runs", "--cookie", "authservice_session=abc") == 0


def test_bad_pipeline_and_params_are_one_line(double: KfpDouble, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("hello: world\n")
    assert _cli("submit", str(bad), "--host", double.url, "--token", TOKEN) == 2
    assert "not a compiled KFP pipeline" in capsys.readouterr().err
    assert _cli("submit", "no-such-pipeline", "--host", double.url, "--token", TOKEN) == 2
    assert "neither a pipeline name nor a file" in capsys.readouterr().err
    assert _cli("submit", str(bad), "--host", double.url, "--param", "novalue") == 2
    assert "--param" in capsys.readouterr().err
    assert _cli("runs", "--host", "ftp://x") == 2
    assert "not an http(s) URL" in capsys.readouterr().err


def test_double_rejects_what_kfp_would(double: KfpDouble, package: str) -> None:
    """The double is strict: an unknown field or a five-field cron is refused (so the tests can fail)."""
    import urllib.request

    def post(body: dict) -> int:
        req = urllib.request.Request(f"{double.url}/apis/v2beta1/recurringruns", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code

    base = {"display_name": "x", "mode": "ENABLE", "pipeline_spec": {"a": 1}, "max_concurrency": "1"}
    assert post({**base, "trigger": {"cron_schedule": {"cron": "0 3 * * *"}}}) == 400
    assert post({**base, "trigger": {"cron_schedule": {"cron": "0 0 3 * * *"}}, "bogus": 1}) == 400
    assert post({**base, "trigger": {"periodic_schedule": {"interval_second": "x"}}}) == 400
    assert post({**base, "trigger": {"cron_schedule": {"cron": "0 0 3 * * *"}}, "status": "ENABLED"}) == 400
    assert post({**base, "trigger": {"cron_schedule": {"cron": "0 0 3 * * *"}}}) == 200


MY_CLUSTER = """\
gpu:
  accelerator_type: nvidia.com/gpu
  accelerator_count: 1
  node_selector: {shipyard.example/pool: my-h100-pool}
"""


def test_submit_by_name_compiles_with_the_users_settings_and_waits(
        double: KfpDouble, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """``submit NAME --cluster-config F --image-registry R`` compiles through `shipyard compile`'s
    path: the uploaded IR has the user's node selector and registry, never the defaults;
    --params-file and --param merge; -o json prints one document; --wait exits by the run's state."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-cluster.yaml").write_text(MY_CLUSTER)
    (tmp_path / "params.yaml").write_text("registry: quay.io\nrepository: your-org/models\nseed: 7\n")
    double.run_states = ["RUNNING", "RUNNING", "FAILED"]
    code = _cli("submit", "optimize-and-deploy", "--host", double.url, "--token", TOKEN, "--cluster-config",
                "my-cluster.yaml", "--image-registry", "quay.io/your-org", "--params-file", "params.yaml",
                "--param", "seed=8", "-o", "json", "--wait", "--poll-s", "0.05")
    out = capsys.readouterr()
    assert code == 1, out.err  # the run FAILED
    record = json.loads(out.out)
    assert record["state"] == "FAILED" and record["run_id"] in double.runs and record["url"].endswith(record["run_id"])
    assert "RUNNING" in out.err and "FAILED" in out.err  # the state stream (stderr with -o json)
    (ir,) = double.uploaded
    assert "my-h100-pool" in ir and "quay.io/your-org/shipyard-" in ir and "ghcr.io/shipyard-llm" not in ir
    params = double.runs[record["run_id"]]["runtime_config"]["parameters"]
    assert params["registry"] == "quay.io" and params["repository"] == "your-org/models" and params["seed"] == 8

    double.run_states = ["SUCCEEDED"]
    assert _cli("submit", "optimize-and-deploy", "--host", double.url, "--token", TOKEN, "--cluster-config",
                "my-cluster.yaml", "--image-registry", "quay.io/your-org", "--params-file", "params.yaml",
                "--wait", "--poll-s", "0.05") == 0
    assert "SUCCEEDED" in capsys.readouterr().out
    # a compiled file keeps its own settings: flags that would change them are refused, before any request
    compiled = tmp_path / "c.yaml"
    compiled.write_text(double.uploaded[0])
    before = len(double.requests)
    assert _cli("submit", str(compiled), "--host", double.url, "--token", TOKEN, "--cluster-config", "x.yaml") == 2
    assert "already compiled" in capsys.readouterr().err and len(double.requests) == before
