"""Calibration data from S3 (moto's server on 127.0.0.1, the real minio client): one object named
by its key, as the parameter reference documents (``s3://bucket/key.jsonl``), or a prefix.

Found by the container rehearsal: an object key was listed as the prefix ``key.jsonl/`` and
failed with "model_uri: no objects under ...".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipyard.compression.calibration import load_calibration_texts
from shipyard.core.errors import ShipyardError
from shipyard.testing.services import MotoS3


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    with MotoS3() as server:
        server.make_bucket("calib")
        yield server


@pytest.fixture()
def s3_env(s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> MotoS3:
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return s3


def _upload(tmp_path: Path, key: str, texts: list[str]) -> str:
    from shipyard.models.s3 import upload_file

    path = tmp_path / Path(key).name
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return upload_file(path, f"s3://calib/{key}")["uri"]


def test_one_object_named_by_its_key(s3_env: MotoS3, tmp_path: Path) -> None:
    uri = _upload(tmp_path, "sets/a.jsonl", ["one", "two", "three"])
    _upload(tmp_path, "sets/b.jsonl", ["other"])  # a sibling is not read
    texts = load_calibration_texts(uri, text_column="text", num_samples=10, seed=0, tokenizer=None)
    assert sorted(texts) == ["one", "three", "two"]


def test_a_prefix_reads_every_data_file(s3_env: MotoS3, tmp_path: Path) -> None:
    _upload(tmp_path, "many/x.jsonl", ["x"])
    _upload(tmp_path, "many/y.jsonl", ["y"])
    texts = load_calibration_texts("s3://calib/many", text_column="text", num_samples=10, seed=0, tokenizer=None)
    assert sorted(texts) == ["x", "y"]


def test_a_missing_object_names_the_calibration_field(s3_env: MotoS3) -> None:
    with pytest.raises(ShipyardError, match="calibration_dataset: cannot read s3://calib/none.jsonl"):
        load_calibration_texts("s3://calib/none.jsonl", text_column="text", num_samples=1, seed=0, tokenizer=None)
