"""``shipyard alias show/set/rollback`` against a real ``mlflow server`` on 127.0.0.1."""

from __future__ import annotations

import json
import uuid

import pytest
from mlflow_server import shared_server

from shipyard.cli.main import main
from shipyard.tracking import pipeline_runs as track
from shipyard.tracking.model_registry import checked_by_deploy


@pytest.fixture(scope="module")
def url() -> str:
    return shared_server().url


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_alias_show_set_rollback(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"tiny-alias-{uuid.uuid4().hex[:6]}"
    for n in (1, 2, 3):
        assert track.register_model(url, name, f"s3://models/tiny/v{n}", "", "")["version"] == str(n)
    code, out, _ = _run(capsys, "alias", "show", name, "--tracking-uri", url, "-o", "json")
    assert code == 0 and json.loads(out) == {"candidate": "3"}
    unchecked = checked_by_deploy({"checked": False, "overridden": True, "why": "overridden: test"})
    track.promote_alias(url, name, "1", unchecked)
    track.promote_alias(url, name, "2", unchecked)
    code, out, _ = _run(capsys, "alias", "show", name, "--tracking-uri", url)
    assert code == 0 and out.splitlines() == ["candidate   version 3", "previous    version 1", "production  version 2"]

    code, out, _ = _run(capsys, "alias", "set", name, "staging", "3", "--tracking-uri", url, "-o", "json")
    assert code == 0 and json.loads(out) == {"candidate": "3", "previous": "1", "production": "2", "staging": "3"}

    code, out, _ = _run(capsys, "alias", "rollback", name, "--reason", "latency SLO missed", "--tracking-uri", url,
                        "-o", "yaml", "--no-attestation-check")
    assert code == 0 and "production: '1'" in out
    assert track.get_aliases(url, name)["production"] == "1"
    from mlflow import MlflowClient

    assert MlflowClient(url).get_model_version(name, "2").tags["shipyard.rollback_reason"] == "latency SLO missed"

    code, _, err = _run(capsys, "alias", "rollback", name, "--tracking-uri", url, "--no-attestation-check")
    assert code == 2 and err.count("\n") == 1 and "no earlier production version" in err
    code, _, err = _run(capsys, "alias", "set", name, "production", "9", "--tracking-uri", url, "--no-attestation-check")
    assert code == 2 and err.count("\n") == 1 and "version 9 is not in the registry" in err
    assert track.get_aliases(url, name)["production"] == "1"  # nothing moved


def test_alias_show_of_an_unknown_model_is_an_error(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"never-registered-{uuid.uuid4().hex[:6]}"
    code, out, err = _run(capsys, "alias", "show", name, "--tracking-uri", url)
    assert code == 2 and out == "" and err.count("\n") == 1 and f"holds no registered model '{name}'" in err


def test_alias_show_never_creates_a_store(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Without --tracking-uri or MLFLOW_TRACKING_URI, a read names the missing store and writes nothing."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("KFP_MLFLOW_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "alias", "show", "tiny-llama")
    assert code == 2 and out == "" and err.count("\n") == 1 and "there is no MLflow store at file://" in err
    assert list(tmp_path.iterdir()) == []
