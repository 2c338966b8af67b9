"""Model URIs: parsing, local folders, offline hub, the embedded model's setup check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.models.resolve import parse_model_uri, resolve_model
from shipyard.runtimes.runtime import run_in_runtime


@pytest.mark.parametrize(
    ("uri", "scheme", "location", "revision"),
    [
        ("hf://HuggingFaceTB/SmolLM2-135M-Instruct@main", "hf", "HuggingFaceTB/SmolLM2-135M-Instruct", "main"),
        ("s3://models/llama/8b/", "s3", "models/llama/8b", None),
        ("oci://quay.io/org/model@sha256:" + "a" * 64, "oci", "quay.io/org/model@sha256:" + "a" * 64, None),
        ("pvc://models-claim/llama", "pvc", "models-claim/llama", None),
        ("pvc://models.team-a/llama", "pvc", "models.team-a/llama", None),  # a claim name is a DNS-1123 subdomain
        ("embedded://smollm2-135m-instruct", "embedded", "smollm2-135m-instruct", None),
        ("/data/model", "file", "/data/model", None),
    ],
)
def test_parse(uri: str, scheme: str, location: str, revision: str | None) -> None:
    parsed = parse_model_uri(uri)
    assert (parsed.scheme, parsed.location, parsed.revision) == (scheme, location, revision)


@pytest.mark.parametrize("claim", ["Models", "models_claim", "-models", "models.", "a" * 254])
def test_pvc_claim_follows_the_kubernetes_object_name_rule(claim: str) -> None:
    """A claim is checked by the one Kubernetes name rule (:mod:`shipyard.core.k8s_names`)."""
    with pytest.raises(ShipyardError, match=f"^model_uri: '{claim}' is not a PersistentVolumeClaim name"):
        parse_model_uri(f"pvc://{claim}/llama")


@pytest.mark.parametrize(("uri", "problem"), [
    ("hf://org/name\n@main", "'org/name\\n' is not a Hugging Face model id"),
    ("s3://bucket\n/prefix", "'bucket\\n' is not an S3 bucket name"),
])
def test_a_final_newline_is_no_location(uri: str, problem: str) -> None:
    """``\\Z``, not ``$`` (which also matches before a final newline): ``org/name\\n`` is no model id."""
    with pytest.raises(ShipyardError) as err:
        parse_model_uri(uri)
    assert (err.value.field, err.value.problem.split(" (")[0]) == ("model_uri", problem)


def test_unknown_scheme_names_the_field_and_the_choices() -> None:
    with pytest.raises(ShipyardError) as err:
        parse_model_uri("ftp://host/model")
    assert str(err.value).startswith("model_uri: unknown URI scheme 'ftp://'")
    assert "hf://" in str(err.value)


def test_resolve_local_folder_copies_it(tiny_model: Path, tmp_path: Path) -> None:
    info = run_in_runtime("compress", resolve_model, uri=str(tiny_model), out_dir=str(tmp_path / "m"))
    assert info["architecture"] == "LlamaForCausalLM"
    assert info["quantized"] is False
    assert json.loads((tmp_path / "m" / "config.json").read_text())["num_hidden_layers"] == 2


def test_resolve_hub_offline_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ShipyardError) as err:
        run_in_runtime("compress", resolve_model, uri="hf://no-such-org/no-such-model", out_dir=str(tmp_path / "m"))
    assert str(err.value).startswith("model_uri: hf://no-such-org/no-such-model is not in the local Hugging Face cache")
    assert not (tmp_path / "m").exists()


def test_resolve_folder_without_config(tmp_path: Path) -> None:
    (tmp_path / "bare").mkdir()
    with pytest.raises(ShipyardError, match="has no config.json"):
        run_in_runtime("compress", resolve_model, uri=str(tmp_path / "bare"), out_dir=str(tmp_path / "m"))
