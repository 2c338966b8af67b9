"""Signed attestations on the modelcar (issue 37): real Ed25519 signatures (cryptography), real gate
records (the candidate gates and select_champion on the report fixtures), the real package step, a
real OCI layout and Debian's docker-registry (distribution 2.x: no referrers API, so the
``sha256-<hex>`` referrers tag is what holds them there).

The model folder is a few small files with the names the package step checks for (config,
safetensors, tokenizer): the attestations bind the image's manifest digest, whatever the weights.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from report_fixtures import BASE_BENCH, CAND_BENCH, SLO, judged, write_json
from test_safety import encodings, injections, write_scan

from shipyard.cli.main import main
from shipyard.core.errors import ShipyardError
from shipyard.gates import evidence
from shipyard.oci import attestation as att
from shipyard.oci.layout import MT_DSSE, MT_EMPTY, MT_MANIFEST, Layout, canonical_json, layout_reference
from shipyard.steps.attest import SUMMARY_JSON, attest_package
from shipyard.steps.deploy import run_deploy
from shipyard.steps.package import package_model
from shipyard.steps.select import select_champion
from shipyard.testing.registry import LocalRegistry

pytestmark = pytest.mark.usefixtures("registry_tools")


def _pem_pair(folder: Path, name: str, key: Any) -> tuple[Path, Path]:
    private = folder / f"{name}.pem"
    public = folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    signer, signer_pub = _pem_pair(folder, "signer", ed25519.Ed25519PrivateKey.generate())
    other, other_pub = _pem_pair(folder, "other", ed25519.Ed25519PrivateKey.generate())
    return {"signer": signer, "signer_pub": signer_pub, "other": other, "other_pub": other_pub}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model") / "w8a8"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (folder / "model.safetensors").write_bytes(hashlib.sha256(b"weights").digest() * 64)
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "shipyard-compress.json").write_text(json.dumps({
        "base_model": "/models/base", "recipe": "w8a8-int8", "calibration_dataset": "shipyard default",
        "num_calibration_samples": 16, "max_seq_length": 512, "seed": 0}))
    return folder


@pytest.fixture(scope="module")
def selection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """select_champion's folder over the real candidate gates of one passing candidate."""
    tmp = tmp_path_factory.mktemp("gates")
    out = judged(tmp)
    assert out["passed"], out["reason"]
    select_champion([str(tmp / "w8a8-int8-gates")], "size", str(tmp / "selection"), str(tmp / "r.md"), str(tmp / "r.html"))
    return tmp / "selection"


@pytest.fixture(scope="module")
def evidence_selection(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """select_champion's folder over the real candidate gates with the default accuracy rule (paired
    non-inferiority on per-question logs: 400 questions, the candidate loses 2 the base got right) and
    the safety gate on (garak's report records: promptinject 2 -> 6 hits and encoding 0 -> 0 in 100
    attempts each); the candidate's eval summary names lm-eval's and the task's versions."""
    from shipyard.steps.judge import judge_candidate

    tmp = tmp_path_factory.mktemp("paired")
    base_rows = [1.0] * 300 + [0.0] * 100
    cand_rows = [0.0] * 2 + [1.0] * 298 + [0.0] * 100
    evals = {}
    for who, rows in (("base", base_rows), ("cand", cand_rows)):
        folder = tmp / f"{who}-eval"
        (folder / "samples").mkdir(parents=True)
        (folder / "samples" / "t.jsonl").write_text("".join(
            json.dumps({"doc_id": i, "filter": "none", "acc": v, "prompt_hash": f"p{i}"}) + "\n"
            for i, v in enumerate(rows)))
        evals[who] = write_json(folder, "summary.json", {
            "format": "shipyard.eval/v1", "config": {"tasks": ["t"], "limit": None, "apply_chat_template": True},
            "config_hash": "c0ffee" * 4, "backend": "hf", "lm_eval_version": "0.4.13",
            "task_versions": {"t": "2.0"}, "model_identity": {"sha256": "ab" * 32}, "chat_template_sha256": "t1",
            "scores": {"t": {"acc,none": {"value": sum(rows) / len(rows), "stderr": 0.02, "higher_is_better": True}}}})
    base_bench = Path(write_json(tmp / "base-bench", "results.json", BASE_BENCH))
    cand_bench = Path(write_json(tmp / "cand-bench", "results.json", CAND_BENCH))
    write_scan(base_bench, injections(2, 100) + encodings(0, 100))
    write_scan(cand_bench, injections(6, 100) + encodings(0, 100))
    out = judge_candidate(recipe="w8a8-int8", base_eval=evals["base"], candidate_eval=evals["cand"],
                          base_bench=str(base_bench), candidate_bench=str(cand_bench), thresholds="", slo=SLO,
                          out_dir=str(tmp / "w8a8-int8-gates"), model_uri="/models/w8a8-int8",
                          safety=json.dumps({"probes": ["promptinject.HijackHateHumans", "encoding.InjectBase64"],
                                             "tolerance": 0.15}))
    assert out["passed"], out["reason"]
    select_champion([str(tmp / "w8a8-int8-gates")], "size", str(tmp / "selection"), str(tmp / "r.md"), str(tmp / "r.html"))
    return tmp


@pytest.fixture(scope="module")
def failed_candidate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A candidate.json folder whose SLO gate failed (TTFT p99 above 100 ms): its own champion record."""
    tmp = tmp_path_factory.mktemp("failed")
    strict = json.dumps({**json.loads(SLO), "ttft_p99_ms": 100})
    out = judged(tmp, slo=strict)
    assert not out["passed"]
    return tmp / "w8a8-int8-gates"


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as reg:
        yield reg


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_REGISTRY_RETRIES", "2")
    monkeypatch.setenv("SHIPYARD_REGISTRY_BACKOFF", "0.05")
    monkeypatch.setenv("SHIPYARD_REGISTRY_AUTH_FILE", "/nonexistent/auth.json")
    for name in ("SHIPYARD_ATTESTATION_KEY", "SHIPYARD_ATTESTATION_KEY_FILE", "SHIPYARD_ATTESTATION_PUBLIC_KEY",
                 "SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE", "SHIPYARD_CONTRACT"):
        monkeypatch.delenv(name, raising=False)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["verify-model", *argv])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


# ------------------------------------------------------------------------------ signatures


def test_pae_is_the_dsse_spec_encoding() -> None:
    assert att.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


@pytest.mark.parametrize("make", [ed25519.Ed25519PrivateKey.generate, lambda: ec.generate_private_key(ec.SECP256R1())],
                         ids=["ed25519", "ecdsa-p256"])
def test_sign_and_verify_round_trip(make: Any) -> None:
    key, stranger = make(), make()
    digest = "sha256:" + "ab" * 32
    stmt = att.statement("quay.io/org/m", digest, evidence.SLO, {"passed": True})
    env = att.sign_statement(stmt, key)
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert env["signatures"][0]["keyid"] == hashlib.sha256(att.public_der(key.public_key())).hexdigest()
    parsed, payload = att.parse_envelope(att.envelope_bytes(env), "envelope")
    assert att.parse_statement(payload, "envelope") == stmt and att.subject_digests(stmt) == [digest]
    assert att.signed_by(parsed, payload, key.public_key())
    assert not att.signed_by(parsed, payload, stranger.public_key())
    # one changed byte in the statement: the signature no longer holds
    forged = payload.replace(b'"passed":true', b'"passed":fals')
    assert forged != payload and not att.signed_by(parsed, forged, key.public_key())
    # the signature is over the PAE, not the bare payload
    bare = base64.b64encode(key.sign(payload) if isinstance(key, ed25519.Ed25519PrivateKey) else b"x").decode()
    assert not att.signed_by({**parsed, "signatures": [{"keyid": "", "sig": bare}]}, payload, key.public_key())


@pytest.mark.parametrize("data, problem", [
    (b"not json", "not JSON"),
    (b'{"payload": "e30="}', "no payload or signatures"),
    (json.dumps({"payloadType": "text/plain", "payload": "e30=", "signatures": []}).encode(), "payloadType"),
    (json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": "%%%", "signatures": []}).encode(), "base64"),
])
def test_malformed_envelopes_are_one_line(data: bytes, problem: str) -> None:
    with pytest.raises(ShipyardError, match=problem) as err:
        att.parse_envelope(data, "envelope sha256:x")
    assert "\n" not in str(err.value)


def test_keys_from_files_and_environment(keys: dict[str, Path], tmp_path: Path) -> None:
    private = att.signing_key(str(keys["signer"]))
    assert att.keyid(att.read_key_file(keys["signer_pub"], "k", private=False)) == att.keyid(private.public_key())
    assert att.keyid(att.signing_key(env={"SHIPYARD_ATTESTATION_KEY": keys["signer"].read_text()}).public_key()) == \
        att.keyid(private.public_key())
    assert att.trust_key(env={"SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE": str(keys["other_pub"])}) is not None
    assert att.trust_key(env={}) is None
    with pytest.raises(ShipyardError, match="SHIPYARD_ATTESTATION_KEY: is not set"):
        att.signing_key(env={})
    contract = json.dumps({"step": "package-champion",
                           "env": {"SHIPYARD_ATTESTATION_KEY": "shipyard-attestation/signing-key.pem"}})
    with pytest.raises(ShipyardError, match="secret shipyard-attestation: key signing-key.pem"):
        att.signing_key(env={"SHIPYARD_CONTRACT": contract})
    (tmp_path / "junk.pem").write_text("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ShipyardError, match="is not a PEM public key"):
        att.read_key_file(tmp_path / "junk.pem", "--key", private=False)
    with pytest.raises(ShipyardError, match="is not a file"):
        att.read_key_file(tmp_path / "missing.pem", "--key", private=False)


# --------------------------------------------------------------------------- predicates


def test_predicates_come_from_the_gate_records(selection: Path, model: Path) -> None:
    digest = "sha256:" + "cd" * 32
    stmts = evidence.evidence_statements("reg/repo", digest, str(selection), model_dir=str(model),
                                         base_model_uri="hf://org/base@0123abc", kfp_run_id="run-1", mlflow_run_id="ml-9")
    assert [s["predicateType"] for s in stmts] == list(evidence.EVIDENCE_TYPES)
    prov, acc, slo, safety = (s["predicate"] for s in stmts)
    deps = {d["name"]: d for d in prov["buildDefinition"]["resolvedDependencies"]}
    assert deps["base-model"]["annotations"] == {"revision": "0123abc"}
    assert deps["recipe"]["digest"]["sha256"] == hashlib.sha256(b"w8a8-int8").hexdigest()
    assert deps["calibration-set"]["uri"] == "shipyard default"
    assert prov["runDetails"]["metadata"]["invocationId"] == "run-1"
    assert {"name": "mlflow-run", "uri": "mlflow:runs/ml-9"} in prov["runDetails"]["byproducts"]
    assert "calibration-set digest" in prov["missing"] and "base model digest" in prov["missing"]
    rows = {(m["task"], m["metric"]): m for m in acc["metrics"]}
    assert rows[("shipyard_capitals_mc", "acc,none")]["candidate"] == 0.80 and acc["passed"] is True
    assert acc["rule"] == "recovery"
    assert slo["slo"]["ttft_p99_ms"] == 500 and slo["knee"]["level"] == "concurrent@2"
    assert slo["knee"]["ttft_p99_ms"] == 110.5 and slo["knee"]["goodput"] is not None
    # a synthetic benchmark: no capacity in the user's units, and why (tests/test_capacity.py: a replayed one)
    assert slo["capacity"] is None and slo["capacity_reason"].startswith("the benchmark's load was synthetic")
    assert safety["enabled"] is False and safety["families"] == []


# ------------------------------------------------------------------------------- layout


def _package(model: Path, out: Path, **kw: Any) -> dict[str, Any]:
    return package_model(str(model), str(out), **kw)


def _tamper(layout_dir: Path, digest: str, envelopes: list[dict[str, Any]]) -> None:
    """Store ``envelopes`` as referrers of the image ``digest`` in a layout (whatever their statements say)."""
    layout = Layout(layout_dir)
    subject = layout.resolve(digest)
    index = layout.index()
    for env in envelopes:
        data = att.envelope_bytes(env) if isinstance(env, dict) else env
        layout.put_bytes(MT_EMPTY, b"{}")
        layout.put_bytes(MT_DSSE, data)
        manifest = att.referrer_manifest(data, subject, evidence.VSA)
        index["manifests"].append(att._index_descriptor(manifest))
        layout.put_bytes(MT_MANIFEST, manifest)
    (layout.root / "index.json").write_bytes(canonical_json(index))


def _stored_envelopes(layout_dir: Path, digest: str) -> list[dict[str, Any]]:
    return [json.loads(s.envelope) for s in att.layout_attestations(layout_dir, digest)]


def test_layout_attested_passes_and_both_twins_are_refused(model: Path, selection: Path, keys: dict[str, Path],
                                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    car = _package(model, tmp_path / "champion")
    out = attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]),
                         model_dir=str(model), kfp_run_id="run-1")
    assert out["decision"] == "PASSED" and out["vsa_digest"].startswith("sha256:") and len(out["statements"]) == 5
    assert json.loads((tmp_path / "champion" / SUMMARY_JSON).read_text())["vsa_digest"] == out["vsa_digest"]
    assert out["vsa_digest"] in (tmp_path / "champion" / "shipyard-attestations.md").read_text()
    summary = (tmp_path / "champion" / "shipyard-package.md").read_text()
    assert summary.startswith("# Packaged model") and summary.count("## Attestations") == 1
    assert f"**Verification summary (VSA) envelope digest:** `{out['vsa_digest']}`" in summary
    pkg = json.loads((tmp_path / "champion" / "shipyard-package.json").read_text())
    assert pkg["attestation"]["vsa_digest"] == out["vsa_digest"] and len(pkg["attestation"]["referrers"]) == 5
    uri = car["uri"]
    assert Layout(tmp_path / "champion").resolve()["digest"] == car["digest"]  # "the" image is still the modelcar
    code, lines, _ = _cli(capsys, uri, "--key", str(keys["signer_pub"]))
    assert code == 0 and lines[-1].startswith(f"PASSED: {uri}"), lines
    assert [ln.split(":")[0].split(maxsplit=1)[1] for ln in lines[:-1]] == [
        "attestations found", "envelopes readable", "signatures", "subjects", "predicate types",
        "summary covers the evidence", "model files signed", "gate decision"]

    # the unattested twin: the same weights built again, so the same digest, in a layout without attestations
    twin = _package(model, tmp_path / "twin")
    assert twin["digest"] == car["digest"]
    code, lines, _ = _cli(capsys, twin["uri"], "--key", str(keys["signer_pub"]))
    assert code == 1 and lines[-1] == f"FAILED: {twin['uri']}: carries no attestations", lines

    # the tampered one: another image (other annotations) carrying the champion's signed envelopes
    other = _package(model, tmp_path / "tampered", annotations={"recipe": "w4a16"})
    assert other["digest"] != car["digest"]
    _tamper(tmp_path / "tampered", other["digest"], _stored_envelopes(tmp_path / "champion", car["digest"]))
    code, lines, _ = _cli(capsys, other["uri"], "--key", str(keys["signer_pub"]))
    assert code == 1 and any(ln.startswith("  FAIL subjects: ") and car["digest"][:19] in ln for ln in lines), lines
    assert lines[-1] == (f"FAILED: {other['uri']}: subjects: 5 statements are about {car['digest'][:19]}, not "
                         f"{other['digest'][:19]} (provenance/v1, accuracy/v1, slo/v1, safety/v1, verification_summary/v1)")

    # the deploy refusal: the same three, through the deploy step (dry run: no cluster)
    cfg = {"attestation": {"key": str(keys["signer_pub"])}}
    done = run_deploy(deploy_config=cfg, manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm", model_uri=uri,
                      summary_path=str(tmp_path / "deploy.md"))
    assert done["attestation"]["checked"] and done["attestation"]["vsa"]["result"] == "PASSED"
    assert f"| attestations | verified: summary `{out['vsa_digest']}` PASSED" in (tmp_path / "deploy.md").read_text()
    for bad, said in ((twin["uri"], "carries no attestations"), (other["uri"], "subjects: ")):
        with pytest.raises(ShipyardError) as err:
            run_deploy(deploy_config=cfg, manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm", model_uri=bad)
        line = str(err.value)
        assert line.startswith("attestation: ") and said in line and "refused" in line and "\n" not in line
        assert 'deploy_config {"attestation": {"require": false}}' in line
    # the explicit override deploys the twin and says so
    capsys.readouterr()
    done = run_deploy(deploy_config={"attestation": {"require": False}}, manifest_path=str(tmp_path / "m.yaml"),
                      dry_run=True, name="llm", model_uri=twin["uri"])
    assert done["attestation"] == {"checked": False, "overridden": True,
                                   "why": "overridden: deploy_config.attestation.require is false"}
    assert "attestation check overridden (deploy_config.attestation.require=false)" in capsys.readouterr().err


def test_wrong_key_another_digest_and_malformed_envelope_fail(model: Path, selection: Path, keys: dict[str, Path],
                                                               tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    car = _package(model, tmp_path / "car")
    attest_package(str(tmp_path / "car"), str(selection), key_file=str(keys["signer"]))
    # a key that does not match
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(keys["other_pub"]))
    assert code == 1 and lines[-1].startswith(f"FAILED: {car['uri']}: signatures: not signed by key"), lines
    # a predicate for another digest, signed with the right key, stored as this image's referrer
    signer = att.signing_key(str(keys["signer"]))
    foreign = att.statement("x", "sha256:" + "ee" * 32, evidence.SAFETY, {"passed": True})
    _tamper(tmp_path / "car", car["digest"], [att.sign_statement(foreign, signer)])
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(keys["signer_pub"]))
    assert code == 1 and f"subjects: 1 statement is about sha256:eeeeeeeeeeee, not {car['digest'][:19]} " \
        "(safety/v1)" in lines[-1], lines
    # a malformed envelope
    clean = _package(model, tmp_path / "clean")
    attest_package(str(tmp_path / "clean"), str(selection), key_file=str(keys["signer"]))
    _tamper(tmp_path / "clean", clean["digest"], [b'{"payloadType": "application/vnd.in-toto+json"}'])
    code, lines, _ = _cli(capsys, clean["uri"], "--key", str(keys["signer_pub"]))
    assert code == 1 and "envelopes readable: " in lines[-1] and "is not a DSSE envelope" in lines[-1], lines
    # an envelope whose bytes were changed after signing (the layer digest no longer matches)
    victim = next(s for s in att.layout_attestations(tmp_path / "clean", clean["digest"]) if s.envelope_digest)
    Layout(tmp_path / "clean").blob(victim.envelope_digest).write_bytes(b"{}")
    out = evidence.verify_evidence(clean["uri"], att.signing_key(str(keys["signer"])).public_key())
    assert not out["passed"] and "does not match its digest" in out["reason"]


def test_failed_gates_are_attested_as_failed_and_refused(model: Path, failed_candidate: Path, keys: dict[str, Path],
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    car = _package(model, tmp_path / "car")
    out = attest_package(str(tmp_path / "car"), str(failed_candidate), key_file=str(keys["signer"]))
    assert out["decision"] == "FAILED"
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(keys["signer_pub"]), "--max-age", "1")
    assert code == 1 and "  FAIL gate decision: verificationResult FAILED (SLO gate" in "\n".join(lines), lines
    assert any(ln.startswith("  pass summary age: ") for ln in lines)
    with pytest.raises(ShipyardError, match="gate decision: verificationResult FAILED"):
        run_deploy(deploy_config={"attestation": {"key": str(keys["signer_pub"])}}, manifest_path=str(tmp_path / "m.yaml"),
                   dry_run=True, name="llm", model_uri=car["uri"])


# ------------------------------------------------------------------------------ registry


def test_registry_fallback_tag_holds_the_referrers(model: Path, selection: Path, keys: dict[str, Path], tmp_path: Path,
                                                   registry: LocalRegistry, capsys: pytest.CaptureFixture[str]) -> None:
    from shipyard.oci.client import RegistryClient

    car = _package(model, tmp_path / "champion", registry=registry.address, repository="team/champion")
    out = attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]))
    tag = "sha256-" + car["digest"].removeprefix("sha256:")
    assert out["referrers_api"] is False and out["fallback_tag"] == tag  # distribution 2.x: no referrers API
    client = RegistryClient(registry.address, "team/champion")
    assert client.request("GET", f"referrers/{car['digest']}", what="referrers", ok=(200, 404)).status_code == 404
    index = json.loads(client.get_manifest(tag)[0])
    assert sorted(m["digest"] for m in index["manifests"]) == sorted(s["referrer"] for s in out["statements"])
    assert {m["annotations"][att.PREDICATE_ANNOTATION] for m in index["manifests"]} == set(evidence.REQUIRED_TYPES)
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(keys["signer_pub"]))
    assert code == 0 and f"via the referrers tag {tag}" in lines[0] and lines[-1].startswith("PASSED: "), lines
    # attesting again adds nothing twice to the tag's index
    attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]))
    again = json.loads(client.get_manifest(tag)[0])["manifests"]
    assert len({m["digest"] for m in again}) == len(again)

    # the unattested twin: the same weights pushed to another repository (same digest, no referrers there)
    twin = _package(model, tmp_path / "twin", registry=registry.address, repository="team/twin")
    assert twin["digest"] == car["digest"]
    code, lines, _ = _cli(capsys, twin["uri"], "--key", str(keys["signer_pub"]))
    assert code == 1 and lines[0] == (f"  FAIL attestations found: 0 in registry {registry.address}/team/twin via "
                                      f"no referrers API and no referrers tag {tag}"), lines
    # the tampered one: another image with the champion's envelopes pushed as its referrers
    other = _package(model, tmp_path / "tampered", registry=registry.address, repository="team/tampered",
                     annotations={"recipe": "w4a16"})
    copied = _stored_envelopes(tmp_path / "champion", car["digest"])  # 5, and the second run's new summary
    _tamper(tmp_path / "tampered", other["digest"], copied)
    pushed = att.push_attestations(tmp_path / "tampered", other["digest"], registry.address, "team/tampered")
    assert len(pushed["referrers"]) == len(copied) >= 5
    code, lines, _ = _cli(capsys, other["uri"], "--key", str(keys["signer_pub"]))
    assert code == 1 and lines[-1].startswith(f"FAILED: {other['uri']}: subjects: "), lines
    cfg = {"attestation": {"key": str(keys["signer_pub"])}}
    run_deploy(deploy_config=cfg, manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm", model_uri=car["uri"])
    for bad in (twin["uri"], other["uri"]):
        with pytest.raises(ShipyardError, match=r"^attestation: oci://127\.0\.0\.1:\d+/team/\w+@sha256:\w+ refused: "):
            run_deploy(deploy_config=cfg, manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm", model_uri=bad)


def _cosign_reads(client: Any, image_digest: str, public_key: Any) -> list[str]:
    """What ``cosign verify-attestation --key`` (and policy-controller's key authority, tlog ignored)
    does with an image's attestations, done here by hand: the tag ``sha256-<hex>.att``, one image
    manifest, each layer a DSSE envelope carrying cosign's signature annotation; the signature over
    DSSE's PAE checked with the key; the statement's subject the image's digest. Returns the
    predicate types that verify."""
    data, media_type = client.get_manifest("sha256-" + image_digest.removeprefix("sha256:") + ".att")
    manifest = json.loads(data)
    assert media_type == manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config = json.loads(client.request("GET", f"blobs/{manifest['config']['digest']}", what="config").content)
    assert config["rootfs"] == {"type": "layers", "diff_ids": [la["digest"] for la in manifest["layers"]]}
    verified = []
    for layer in manifest["layers"]:
        assert layer["mediaType"] == "application/vnd.dsse.envelope.v1+json"
        assert layer["annotations"]["dev.cosignproject.cosign/signature"] == ""
        blob = client.request("GET", f"blobs/{layer['digest']}", what="envelope").content
        assert "sha256:" + hashlib.sha256(blob).hexdigest() == layer["digest"]
        env = json.loads(blob)
        payload = base64.b64decode(env["payload"])
        pae = b"DSSEv1 %d %s %d %s" % (len(env["payloadType"]), env["payloadType"].encode(), len(payload), payload)
        try:
            public_key.verify(base64.b64decode(env["signatures"][0]["sig"]), pae)
        except Exception:  # noqa: BLE001 - cryptography's InvalidSignature: this layer does not verify
            continue
        stmt = json.loads(payload)
        if image_digest.removeprefix("sha256:") in [s["digest"]["sha256"] for s in stmt["subject"]]:
            assert layer["annotations"]["predicateType"] == stmt["predicateType"]
            verified.append(stmt["predicateType"])
    return verified


def test_cosigns_attestation_tag_holds_the_same_envelopes(model: Path, selection: Path, keys: dict[str, Path],
                                                          tmp_path: Path, registry: LocalRegistry) -> None:
    """sigstore policy-controller (ClusterImagePolicy with a key authority) and ``cosign
    verify-attestation`` read cosign's own layout, not OCI 1.1 referrers: the package step writes both."""
    from shipyard.oci.client import RegistryClient

    car = _package(model, tmp_path / "champion", registry=registry.address, repository="team/cosign")
    out = attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]))
    assert out["cosign_tag"] == "sha256-" + car["digest"].removeprefix("sha256:") + ".att"
    client = RegistryClient(registry.address, "team/cosign")
    signer = serialization.load_pem_public_key(keys["signer_pub"].read_bytes())
    assert sorted(_cosign_reads(client, car["digest"], signer)) == sorted(evidence.REQUIRED_TYPES)
    other = serialization.load_pem_public_key(keys["other_pub"].read_bytes())
    assert _cosign_reads(client, car["digest"], other) == []  # another key verifies nothing
    # attesting again keeps the layers there and adds the new summary once
    attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]))
    layers = json.loads(client.get_manifest(out["cosign_tag"])[0])["layers"]
    assert len({la["digest"] for la in layers}) == len(layers) >= 5


def test_bad_input_is_one_line(keys: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (["oci://quay.io/org/m:v1", "--key", str(keys["signer_pub"])], "uri: oci://quay.io/org/m:v1 uses the mutable tag"),
        ([f"oci://quay.io/org/m@sha256:{'a' * 64}", "--key", str(tmp_path / "nope.pub")], "--key: "),
        ([f"oci://quay.io/org/m@sha256:{'a' * 64}"], "--key: is required"),
        ([f"oci://{tmp_path}@sha256:{'a' * 64}", "--key", str(keys["signer_pub"])], "is not an OCI image layout"),
    ]
    for argv, said in cases:
        code, lines, err = _cli(capsys, *argv)
        assert code == 2 and lines == [] and err.count("\n") == 1 and said in err, (argv, err)


def test_deploy_config_attestation_options() -> None:
    from shipyard.params.deploy import parse_deploy_config

    need = {"name": "llm", "model_uri": f"oci://quay.io/org/m@sha256:{'a' * 64}"}
    assert parse_deploy_config(need).attestation == evidence.ATTESTATION_DEFAULTS
    got = parse_deploy_config({**need, "attestation": {"require": False, "max_age_days": 30}}).attestation
    assert got["require"] is False and got["max_age_days"] == 30
    for raw, field in (({"attestation": {"require": "no"}}, "deploy_config.attestation.require"),
                       ({"attestation": {"keys": "x"}}, "deploy_config.attestation.keys"),
                       ({"attestation": {"max_age_days": 0}}, "deploy_config.attestation.max_age_days"),
                       ({"attestation": []}, "deploy_config.attestation")):
        with pytest.raises(ShipyardError) as err:
            parse_deploy_config({**need, **raw})
        assert err.value.field == field


def test_deploy_without_a_key_in_a_cluster_names_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHIPYARD_CONTRACT", json.dumps({
        "step": "deploy", "env": {"SHIPYARD_ATTESTATION_PUBLIC_KEY": "shipyard-attestation-trust/public-key.pem"}}))
    with pytest.raises(ShipyardError, match="secret shipyard-attestation-trust: key public-key.pem"):
        evidence.require_attested(f"oci://quay.io/org/m@sha256:{'a' * 64}", dict(evidence.ATTESTATION_DEFAULTS))


def test_copy_of_layout_keeps_referrers(model: Path, selection: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    """The layout is self-contained: copied elsewhere (a KFP artifact download) it still verifies."""
    car = _package(model, tmp_path / "car")
    attest_package(str(tmp_path / "car"), str(selection), key_file=str(keys["signer"]))
    shutil.copytree(tmp_path / "car", tmp_path / "moved")
    moved = layout_reference(tmp_path / "moved", car["digest"])
    out = evidence.verify_evidence(moved, att.signing_key(str(keys["signer"])).public_key())
    assert out["passed"], out["reason"]
    assert copy.deepcopy(out["vsa"])["result"] == "PASSED"


def test_ecdsa_keys_and_json_output(model: Path, selection: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    private, public = _pem_pair(tmp_path, "p256", ec.generate_private_key(ec.SECP256R1()))
    car = _package(model, tmp_path / "car")
    attest_package(str(tmp_path / "car"), str(selection), key_file=str(private))
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(public), "-o", "json")
    doc = json.loads("\n".join(lines))
    assert code == 0 and doc["passed"] and doc["digest"] == car["digest"] and len(doc["attestations"]) == 5
    assert all(a["signed"] and a["subject_ok"] for a in doc["attestations"]) and doc["vsa"]["result"] == "PASSED"
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    with pytest.raises(ShipyardError, match="is an encrypted private key"):
        att.signing_key(str(encrypted))


def test_generated_keys_and_mlflow_tags(model: Path, selection: Path, tmp_path: Path) -> None:
    private, public = att.generate_key_pair(tmp_path / "keys")
    assert oct(private.stat().st_mode & 0o777) == "0o600"
    assert att.generate_key_pair(tmp_path / "keys") == (private, public) and private.read_text().startswith(
        "-----BEGIN PRIVATE KEY-----")
    car = _package(model, tmp_path / "car")
    out = attest_package(str(tmp_path / "car"), str(selection), key_file=str(private))
    from shipyard.steps.attest import attestation_tags

    tags = attestation_tags(str(tmp_path / "car"))
    assert tags["attestation.vsa_digest"] == out["vsa_digest"] and tags["attestation.decision"] == "PASSED"
    assert tags["attestation.uri"] == car["uri"]
    assert {k for k in tags if k.count(".") == 2} == {"attestation.provenance.v1", "attestation.accuracy.v1",
                                                      "attestation.slo.v1", "attestation.safety.v1",
                                                      "attestation.verification_summary.v1"}
    assert evidence.verify_evidence(car["uri"], att.read_key_file(public, "k", private=False))["passed"]
    with pytest.raises(ShipyardError, match="is missing or not an attestation summary"):
        attestation_tags(str(tmp_path))


def test_local_runs_get_a_key_pair_unless_one_is_configured(tmp_path: Path) -> None:
    env = att.local_keys_env(tmp_path / "keys", env={})
    assert set(env) == {"SHIPYARD_ATTESTATION_KEY_FILE", "SHIPYARD_ATTESTATION_PUBLIC_KEY_FILE"}
    private = att.signing_key(env=env)
    assert att.keyid(att.trust_key(env=env)) == att.keyid(private.public_key())
    assert att.local_keys_env(tmp_path / "keys", env={}) == env  # kept across runs
    assert att.local_keys_env(tmp_path / "other", env={"SHIPYARD_ATTESTATION_KEY": "pem"}) == {}
    assert not (tmp_path / "other").exists()


# ------------------------------------------------------------------ the model files' signature (model-signing)


@pytest.fixture(scope="module")
def ec_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """ECDSA P-256 pairs: the keys model-signing 1.1 signs model files with."""
    folder = tmp_path_factory.mktemp("ec-keys")
    signer, signer_pub = _pem_pair(folder, "signer", ec.generate_private_key(ec.SECP256R1()))
    other, other_pub = _pem_pair(folder, "other", ec.generate_private_key(ec.SECP256R1()))
    return {"signer": signer, "signer_pub": signer_pub, "other": other, "other_pub": other_pub}


def _extract(layout_dir: Path, digest: str, into: Path) -> Path:
    """The modelcar's model layer unpacked as a node would (its ``/models`` folder)."""
    import tarfile

    layout = Layout(layout_dir)
    manifest = json.loads(layout.blob(digest).read_bytes())
    with tarfile.open(layout.blob(manifest["layers"][-1]["digest"]), "r:*") as tar:
        tar.extractall(into, filter="data")
    return into / "models"


def test_an_ecdsa_key_signs_the_model_files_and_verify_model_checks_an_extracted_copy(
        model: Path, selection: Path, ec_keys: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import model_signing

    from shipyard.oci.model_signature import MODEL_SIGNATURE_TYPE

    car = _package(model, tmp_path / "champion")
    out = attest_package(str(tmp_path / "champion"), str(selection), key_file=str(ec_keys["signer"]),
                         model_dir=str(model))
    sig = out["model_signature"]
    assert sig["signed"] and sig["files"] == 4 and sig["note"] == "4 files signed with model-signing (model.sig)"
    assert [r["predicate_type"] for r in out["statements"]].count(MODEL_SIGNATURE_TYPE) == 1
    assert len(out["statements"]) == 6 and out["decision"] == "PASSED"
    assert f"envelope `{sig['envelope_digest']}`" in (tmp_path / "champion" / "shipyard-attestations.md").read_text()
    # the bundle in the package folder is model-signing's own: its verifier takes it as it is
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=ec_keys["signer_pub"]).verify(
        model, tmp_path / "champion" / "model.sig")

    code, lines, _ = _cli(capsys, car["uri"], "--key", str(ec_keys["signer_pub"]))
    assert code == 0, lines
    assert [ln for ln in lines if "model files signed" in ln][0].startswith(
        "  pass model files signed: 4 files signed with model-signing (sha256:"), lines
    files = _extract(tmp_path / "champion", car["digest"], tmp_path / "node")
    assert sorted(p.name for p in files.iterdir()) == sorted(p.name for p in model.iterdir())
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(ec_keys["signer_pub"]), "--files", str(files))
    assert code == 0 and lines[-2] == f"  pass model files: {files}: the 4 signed files match, none missing or extra", lines

    (files / "tokenizer.json").write_text('{"version": "2.0"}')  # one file changed after extraction
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(ec_keys["signer_pub"]), "--files", str(files))
    assert code == 1 and lines[-1] == (f"FAILED: {car['uri']}: model files: {files}: tokenizer.json differs from the "
                                       "signed sha256"), lines
    (files / "tokenizer.json").write_text('{"version": "1.0"}')
    (files / "extra.safetensors").write_bytes(b"x")
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(ec_keys["signer_pub"]), "--files", str(files))
    assert code == 1 and lines[-1].endswith("files that were not signed: extra.safetensors"), lines
    (files / "extra.safetensors").unlink()
    (files / "config.json").unlink()
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(ec_keys["signer_pub"]), "--files", str(files))
    assert code == 1 and "signed files missing: config.json" in lines[-1], lines


def test_an_ed25519_key_attests_without_signing_the_files(model: Path, selection: Path, keys: dict[str, Path],
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    car = _package(model, tmp_path / "champion")
    out = attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]), model_dir=str(model))
    assert out["model_signature"] == {"signed": False, "note": "not signed: the attestation key is Ed25519: "
                                      "model-signing 1.1 signs model files with ECDSA keys (P-256, P-384) only"}
    assert not (tmp_path / "champion" / "model.sig").exists() and len(out["statements"]) == 5
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(keys["signer_pub"]), "--files", str(model))
    assert code == 1 and lines[-1] == (f"FAILED: {car['uri']}: model files: no model files signature bound to this "
                                       "image to check them against (the key is not ECDSA)"), lines


def test_a_files_signature_the_summary_does_not_name_is_refused(model: Path, selection: Path, ec_keys: dict[str, Path],
                                                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another model's file list, signed with the same key and attached to this image afterwards."""
    from shipyard.oci.model_signature import sign_model_files

    car = _package(model, tmp_path / "champion")
    attest_package(str(tmp_path / "champion"), str(selection), key_file=str(ec_keys["signer"]), model_dir=str(model))
    other = tmp_path / "other-model"
    shutil.copytree(model, other)
    (other / "model.safetensors").write_bytes(b"other weights")
    key = att.read_key_file(ec_keys["signer"], "key", private=True)
    stray = sign_model_files(other, key, tmp_path / "other.sig")["envelope"]
    att.attach_to_layout(tmp_path / "champion", car["digest"], [stray])
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(ec_keys["signer_pub"]), "--files", str(other))
    assert code == 1 and any(ln.startswith("  FAIL model files signed: ") and "not named by the verification summary"
                             in ln for ln in lines), lines


def test_new_local_key_pairs_are_ecdsa_p256(tmp_path: Path) -> None:
    private, public = att.generate_key_pair(tmp_path)
    key = att.read_key_file(private, "key", private=True)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert att.keyid(att.read_key_file(public, "key", private=False)) == att.keyid(key.public_key())


# ------------------------------------------------------------ the evidence a paired rule and a safety scan leave


def _attested_predicates(model: Path, evidence_selection: Path, keys: dict[str, Path], folder: Path) -> dict[str, Any]:
    """The champion of ``evidence_selection`` packaged, attested with the signer's key and verified with
    its public key: the predicates of the signed statements read back from the layout, by type."""
    car = _package(model, folder)
    attest_package(str(folder), str(evidence_selection / "selection"), key_file=str(keys["signer"]),
                   candidate_eval=str(evidence_selection / "cand-eval"), model_dir=str(model))
    out, predicates = evidence.verified_evidence(car["uri"], att.read_key_file(keys["signer_pub"], "k", private=False))
    assert out["passed"], out["reason"]
    signed = {a["predicate_type"] for a in out["attestations"] if a["signed"] and a["subject_ok"]}
    assert signed >= set(evidence.REQUIRED_TYPES)
    return predicates


def test_accuracy_evidence_carries_the_paired_loss_interval_n_margin_and_versions(
        model: Path, evidence_selection: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    record = json.loads((evidence_selection / "w8a8-int8-gates" / "candidate.json").read_text())["accuracy"]
    acc = _attested_predicates(model, evidence_selection, keys, tmp_path / "car")[evidence.ACCURACY]
    assert (acc["rule"], acc["alpha"], acc["multiple_comparisons"], acc["passed"]) == (
        "non-inferiority", 0.05, "holm", True)
    [row] = [m for m in acc["metrics"] if m["gated"]]
    paired = record["rows"][0]["paired"]
    assert (row["task"], row["metric"], row["decision"], row["rule"]) == ("t", "acc,none", "non-inferior",
                                                                          record["rows"][0]["rule"])
    assert row["loss"] == pytest.approx(0.005) and row["n"] == 400 and row["margin"] == 0.02
    assert row["loss_interval"] == [paired["loss_low"], paired["loss_high"]]
    assert 0 <= row["loss_interval"][0] < 0.005 < row["loss_interval"][1] < 0.02
    assert row["confidence"] == pytest.approx(0.9)
    assert acc["harness"] == {"name": "lm-eval", "version": "0.4.13", "task_versions": {"t": "2.0"},
                              "config_hash": "c0ffee" * 4}


def test_safety_evidence_carries_each_familys_delta_and_interval(
        model: Path, evidence_selection: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    from shipyard.gates.safety import newcombe

    record = json.loads((evidence_selection / "w8a8-int8-gates" / "candidate.json").read_text())["safety"]
    safety = _attested_predicates(model, evidence_selection, keys, tmp_path / "car")[evidence.SAFETY]
    assert safety["enabled"] is True and safety["passed"] is True and safety["verdict"] == record["verdict"]
    fams = {f["family"]: f for f in safety["families"]}
    assert sorted(fams) == ["encoding", "promptinject"]
    pi, enc = fams["promptinject"], fams["encoding"]
    assert (pi["asr"], pi["base_asr"], pi["attempts"], pi["base_attempts"]) == (0.06, 0.02, 100, 100)
    assert pi["diff"] == pytest.approx(0.04) and pi["tolerance"] == 0.15 and pi["decision"] == "pass"
    assert pi["diff_interval"] == [round(v, 4) for v in newcombe(6, 100, 2, 100)]
    assert pi["diff_interval"][0] < 0.04 < pi["diff_interval"][1] < 0.15
    assert enc["diff"] == 0 and enc["diff_interval"][0] < 0 < enc["diff_interval"][1]
    for name, fam in fams.items():
        assert fam["diff_interval"] == record["families"][name]["diff_ci"]


def test_an_expired_summary_is_refused_by_verify_model_and_the_deploy(model: Path, selection: Path, keys: dict[str, Path],
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A verification summary signed 45 days ago (a real signature over a statement whose
    ``timeVerified`` is that old): ``--max-age 30`` and ``attestation.max_age_days: 30`` refuse it in
    one line; a limit it is within passes."""
    import datetime as dt

    car = _package(model, tmp_path / "car")
    signer = att.signing_key(str(keys["signer"]))
    statements = evidence.evidence_statements("car", car["digest"], str(selection), model_dir=str(model))
    envelopes = [att.sign_statement(s, signer) for s in statements]
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=45)).strftime("%Y-%m-%dT%H:%M:%SZ")
    predicate = evidence.vsa_predicate(evidence.PASSED, "passed", car["uri"],
                                       [(att.predicate_type_of(e), att.envelope_digest(e)) for e in envelopes])
    vsa = att.statement("car", car["digest"], evidence.VSA, {**predicate, "timeVerified": old})
    att.attach_to_layout(tmp_path / "car", car["digest"], [*envelopes, att.sign_statement(vsa, signer)])

    code, lines, _ = _cli(capsys, car["uri"], "--key", str(keys["signer_pub"]), "--max-age", "60")
    assert code == 0 and any(ln.startswith(f"  pass summary age: verified {old}, 45.0 days ago") for ln in lines), lines
    code, lines, _ = _cli(capsys, car["uri"], "--key", str(keys["signer_pub"]), "--max-age", "30")
    assert code == 1 and lines[-1] == (f"FAILED: {car['uri']}: summary age: verified {old}, 45.0 days ago "
                                       "(at most 30)"), lines
    assert [ln for ln in lines if ln.startswith("  FAIL ")] == [f"  FAIL summary age: verified {old}, 45.0 days ago "
                                                                "(at most 30)"]

    cfg = {"attestation": {"key": str(keys["signer_pub"]), "max_age_days": 30}}
    with pytest.raises(ShipyardError) as err:
        run_deploy(deploy_config=cfg, manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm",
                   model_uri=car["uri"])
    assert str(err.value) == (f"attestation: {car['uri'].split('@')[0]}@{car['digest'][:19]} refused: summary age: "
                              f"verified {old}, 45.0 days ago (at most 30) (fix: {evidence.REFUSE_FIX})")
    cfg["attestation"]["max_age_days"] = 60
    done = run_deploy(deploy_config=cfg, manifest_path=str(tmp_path / "m.yaml"), dry_run=True, name="llm",
                      model_uri=car["uri"])
    assert done["attestation"]["checked"] and done["attestation"]["vsa"]["time_verified"] == old


# ------------------------------------------------------------------ production only for attested versions (item 4)


@pytest.fixture(scope="module")
def mlflow_url() -> str:
    """The session's real ``mlflow server`` (:class:`shipyard.testing.services.MlflowServer`), shared by this module."""
    from mlflow_server import shared_server

    return shared_server().url


def _alias(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["alias", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _versions(url: str, name: str, sources: list[str], tags: dict[str, str]) -> None:
    from shipyard.tracking import pipeline_runs as track

    for n, source in enumerate(sources, start=1):
        assert track.register_model(url, name, source, "", json.dumps(tags if n == 1 else {}))["version"] == str(n)


def _production(url: str, name: str) -> str | None:
    from shipyard.tracking import pipeline_runs as track

    return track.get_aliases(url, name).get("production")


def test_production_moves_only_to_a_version_whose_summary_verifies(
        model: Path, selection: Path, failed_candidate: Path, keys: dict[str, Path], tmp_path: Path,
        mlflow_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``shipyard alias set MODEL production VERSION`` checks the version's model (its MLflow source: the
    package step's uri) as the deploy step does: the attested champion moves, the unattested twin, a
    FAILED summary and another key are refused in one line (nothing moves); ``--no-attestation-check``
    moves it, logged on stderr and on the version."""
    from mlflow import MlflowClient

    from shipyard.steps.attest import attestation_tags

    car = _package(model, tmp_path / "champion")
    attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]))
    twin = _package(model, tmp_path / "twin")
    failed = _package(model, tmp_path / "failed", annotations={"recipe": "w4a16"})
    attest_package(str(tmp_path / "failed"), str(failed_candidate), key_file=str(keys["signer"]))
    name = f"attested-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]}"
    _versions(mlflow_url, name, [car["uri"], twin["uri"], failed["uri"]], attestation_tags(str(tmp_path / "champion")))
    common = ("--tracking-uri", mlflow_url)
    key = ("--key", str(keys["signer_pub"]))
    capsys.readouterr()  # MLflow's own log lines while the versions were created

    for version, said in (("2", f"{twin['uri'].split('@')[0]}@{twin['digest'][:19]} refused: carries no attestations"),
                          ("3", "refused: gate decision: verificationResult FAILED (SLO gate")):
        code, out, err = _alias(capsys, "set", name, "production", version, *common, *key)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert err.startswith("shipyard: error: production: ") and said in err, err
        assert "--no-attestation-check to move it anyway (logged)" in err
    code, _, err = _alias(capsys, "set", name, "production", "1", *common, "--key", str(keys["other_pub"]))
    assert code == 2 and err.count("\n") == 1 and "refused: signatures: not signed by key" in err, err
    for alias in ("production", "Production"):  # no key: refused before MLflow is asked
        code, _, err = _alias(capsys, "set", name, alias, "1", "--tracking-uri", "http://127.0.0.1:9")
        assert code == 2 and err.count("\n") == 1 and "--key: is required to check the attestations" in err, err
    assert _production(mlflow_url, name) is None  # nothing moved

    code, out, err = _alias(capsys, "set", name, "production", "1", *common, *key, "-o", "json")
    assert code == 0 and json.loads(out)["production"] == "1", err
    assert "production: attestations verified: 5 signed by key" in err
    client = MlflowClient(mlflow_url)
    note = client.get_model_version(name, "1").tags["shipyard.production_attestation"]
    vsa = client.get_model_version(name, "1").tags["attestation.vsa_digest"]
    assert note.startswith(f"verified: summary {vsa} PASSED of {car['uri']}, key "), note

    code, out, err = _alias(capsys, "set", name, "production", "2", *common, "--no-attestation-check", "-o", "json")
    assert code == 0 and json.loads(out)["production"] == "2" and _production(mlflow_url, name) == "2"
    assert (f"production: WARNING: attestation check overridden (--no-attestation-check): {twin['uri'].split('@')[0]} "
            f"({name} version 2) becomes production without a verified summary") in err
    assert client.get_model_version(name, "2").tags["shipyard.production_attestation"] == \
        "not checked: overridden: --no-attestation-check"


def test_the_deploy_step_moves_production_only_to_the_image_it_verified(
        model: Path, selection: Path, keys: dict[str, Path], tmp_path: Path, mlflow_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """After a deploy, ``production`` moves through the deploy's own check (promote_production's
    ``attestation_json``: what run_deploy verified): only to the version whose model is the image
    verified, or by the deploy's logged override; a deploy that checked nothing moves nothing. A
    rollback checks the version it moves back to."""
    from shipyard.tracking.promotion import promote_production

    car = _package(model, tmp_path / "champion")
    attest_package(str(tmp_path / "champion"), str(selection), key_file=str(keys["signer"]))
    twin = _package(model, tmp_path / "twin")
    name = f"deployed-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]}"
    _versions(mlflow_url, name, [car["uri"], twin["uri"]], {})
    deploy = {"manifest_path": str(tmp_path / "m.yaml"), "dry_run": True, "name": "llm"}
    verified = run_deploy(deploy_config={"attestation": {"key": str(keys["signer_pub"])}}, model_uri=car["uri"],
                          **deploy)["attestation"]
    unkeyed = run_deploy(deploy_config={}, model_uri=car["uri"], **deploy)["attestation"]
    overridden = run_deploy(deploy_config={"attestation": {"require": False}}, model_uri=twin["uri"], **deploy)["attestation"]
    assert verified["checked"] and not unkeyed["checked"] and overridden["overridden"]
    capsys.readouterr()

    from shipyard.tracking import pipeline_runs as track

    track.start_tracking(mlflow_url, "attested", "optimize-and-deploy", f"run-{name}", "", "")

    def promote(version: str, record: dict[str, Any]) -> dict[str, Any]:
        return promote_production(mlflow_url, "attested", f"run-{name}", name, version, "w8a8-int8",
                                  attestation_json=json.dumps(record))

    with pytest.raises(ShipyardError) as err:  # the same weights at another place, without its attestations
        promote("2", verified)
    assert str(err.value).startswith(f"production: {name} version 2 was not moved: its model {twin['uri']} is not the "
                                     f"image whose attestations were verified ({car['uri']})")
    with pytest.raises(ShipyardError, match=r"version 1 was not moved: its attestations were not checked \(no public "
                                            r"key configured"):
        promote("1", unkeyed)
    assert _production(mlflow_url, name) is None

    assert promote("2", overridden)["aliases"]["production"] == "2"  # the deploy's logged override
    assert promote("1", verified)["aliases"] == {"candidate": "2", "production": "1", "previous": "2"}
    # rolling back to the twin checks it: refused with the key, moved with the explicit override
    code, _, err = _alias(capsys, "rollback", name, "--tracking-uri", mlflow_url, "--key", str(keys["signer_pub"]))
    assert code == 2 and err.count("\n") == 1 and "production: " in err and "refused: carries no attestations" in err
    assert _production(mlflow_url, name) == "1"
    code, out, err = _alias(capsys, "rollback", name, "--tracking-uri", mlflow_url, "--no-attestation-check")
    assert code == 0 and _production(mlflow_url, name) == "2" and "attestation check overridden" in err

    # a promotion kept while MLflow was down (`shipyard track replay`) carries the deploy's check with it
    from shipyard.tracking.pending import apply

    kept = {"kind": "promote", "tracking_uri": mlflow_url, "resolved_uri": mlflow_url, "experiment": "attested",
            "kfp_run_id": f"run-{name}", "model_name": name, "version": "1", "recipe": "w8a8-int8", "headline": {},
            "dry_run": False}
    with pytest.raises(ShipyardError, match=r"version 1 was not moved: its attestations were not checked \(no record"):
        apply(kept, tmp_path)
    assert apply({**kept, "attestation": verified}, tmp_path).startswith(f"{name} version 1 is production")
    assert _production(mlflow_url, name) == "1"
