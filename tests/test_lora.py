"""LoRA adapters (issue 21 item 4): the ``lora_adapters`` parameter, fetching and pinning an adapter,
per-adapter evaluation with lm-eval's hf backend (``peft=``) on a real peft adapter built on the tiny
model, and the per-adapter accuracy gate inside the candidate's record."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.evaluation.lora import RECORD as LORA_RECORD
from shipyard.gates.adapter_gates import run_adapter_gates
from shipyard.models.adapters import adapter_identity, fetch_adapters, load_adapters, parse_adapters
from shipyard.params.checks import check_parameters
from shipyard.runtimes.runtime import run_in_runtime
from shipyard.testing.tinylora import build_lora_fixtures, evaluate_adapters_each

DIGEST = "sha256:" + "b" * 64
RECOVERY = json.dumps({"rule": "recovery"})  # the accuracy gate's recovery rule (not the default)


def test_mapping_and_list_give_the_same_adapters(tmp_path: Path) -> None:
    _fake_adapter(tmp_path / "local")
    mapping = parse_adapters('{"sql": "hf://acme/sql-lora@main", "support": "s3://adapters/support", '
                             f'"local": "{tmp_path / "local"}", "claim": "pvc://loras/support"}}')
    as_list = parse_adapters(json.dumps([{"name": a.name, "uri": a.uri} for a in mapping]))
    assert mapping == as_list
    assert [(a.name, a.uri) for a in mapping] == [("sql", "hf://acme/sql-lora@main"), ("support", "s3://adapters/support"),
                                                  ("local", str(tmp_path / "local")), ("claim", "pvc://loras/support")]
    assert parse_adapters("") == parse_adapters("{}") == parse_adapters("[]") == []


@pytest.mark.parametrize(("raw", "message"), [
    (f'{{"a": "oci://quay.io/org/a@{DIGEST}"}}', "lora_adapters.a: KServe does not load LoRA adapters from oci:// yet "
     "(kserve#6094)"),
    ('{"a b": "hf://org/x"}', "lora_adapters.a b: 'a b' is not an adapter name"),
    # a final newline is no name (\Z, not $, which also matches before a final newline)
    ('[{"name": "sql\\n", "uri": "hf://o/x"}]', "lora_adapters[0]: 'sql\\n' is not an adapter name"),
    # the mapping form's field names the adapter: a newline in the name is quoted there too
    ('{"my\\nadapter": "hf://o/x"}', "lora_adapters.my\\nadapter: 'my\\nadapter' is not an adapter name"),
    ('[{"name": "a", "uri": "hf://o/x"}, {"name": "a", "uri": "hf://o/y"}]', "lora_adapters[1]: adapter 'a' is given twice"),
    ('{"a": "s3://AKIAIOSFODNN7EXAMPLE:hunter2pw@bucket/a"}', "lora_adapters.a: s3://... carries credentials"),
    ('{"a": 3}', "lora_adapters.a: the URI must be a string"),
    ('"hf://org/x"', "lora_adapters: must be a JSON mapping"),
])
def test_bad_adapters_are_one_line_without_secrets(raw: str, message: str) -> None:
    with pytest.raises(ShipyardError) as err:
        parse_adapters(raw)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in err.value.field and "\n" not in err.value.problem
    assert "hunter2pw" not in str(err.value) and "AKIA" not in str(err.value)


def test_preflight_checks_lora_adapters() -> None:
    typed = check_parameters("optimize-and-deploy", {"lora_adapters": '{"sql": "hf://acme/sql-lora"}', "dry_run": True})
    assert typed["lora_adapters"] == '{"sql": "hf://acme/sql-lora"}'
    with pytest.raises(ShipyardError, match="kserve#6094"):
        check_parameters("optimize-and-deploy", {"lora_adapters": f'{{"sql": "oci://q.io/a@{DIGEST}"}}', "dry_run": True})


def _fake_adapter(folder: Path, rank: int = 4) -> Path:
    """An adapter folder's shape (config + weights file) for the fetch and digest tests: no model reads it."""
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA",
                                                            "target_modules": ["v_proj", "q_proj"]}))
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    return folder


def test_fetch_pins_each_adapter_by_content(tmp_path: Path) -> None:
    a = _fake_adapter(tmp_path / "src-a")
    b = _fake_adapter(tmp_path / "src-b", rank=16)
    records = fetch_adapters(json.dumps({"a": str(a), "b": str(b)}), str(tmp_path / "fetched"))
    assert [r["name"] for r in records] == ["a", "b"] and [r["rank"] for r in records] == [4, 16]
    assert records[0]["digest"] == adapter_identity(a)["digest"] and records[0]["digest"].startswith("sha256:")
    assert records[0]["target_modules"] == ["q_proj", "v_proj"]
    assert load_adapters(tmp_path / "fetched") == records
    (b / "adapter_model.safetensors").write_bytes(b"\1" * 64)
    assert adapter_identity(b)["digest"] != records[1]["digest"]


def test_fetching_a_model_folder_as_an_adapter_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(ShipyardError, match=r"^lora_adapters.x: .* has no adapter_config.json"):
        fetch_adapters(json.dumps({"x": str(model)}), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_adapter_neither_side_evaluated_fails_closed(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "adapters.json").write_text(json.dumps({"adapters": [{"name": "sql", "uri": "hf://acme/sql",
                                                                  "digest": DIGEST}]}))
    gates = run_adapter_gates(str(base), "", "")
    assert gates == {"sql": {"passed": False, "worst_recovery": None, "digest": DIGEST, "uri": "hf://acme/sql",
                             "reason": "failed closed: the base and candidate were not evaluated with adapter 'sql'"}}
    assert run_adapter_gates("", "", "") == {}


def test_adapters_are_evaluated_on_hf_only_and_parity_compares_their_digests(tmp_path: Path) -> None:
    from shipyard.evaluation.lmeval import evaluate_model
    from shipyard.gates.parity import differences

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    adapter = _fake_adapter(tmp_path / "sql")
    with pytest.raises(ShipyardError, match="^eval_backend: LoRA adapter 'sql' asked for on the openai backend"):
        evaluate_model(str(model), '{"tasks": ["shipyard_capitals_mc"]}', str(tmp_path / "out"), backend="openai",
                       adapter_dir=str(adapter), adapter_name="sql")
    assert not (tmp_path / "out").exists()
    same = {"adapter": {"digest": DIGEST}}
    assert differences(same, dict(same)) == []
    assert differences(same, {}) == [f"LoRA adapter (digest): {DIGEST[:19]} vs None"]
    assert differences({}, {}) == []


# --- real: a peft adapter on the tiny model, lm-eval hf with peft=, the gate per adapter ----------------------

EVAL = json.dumps({"tasks": ["shipyard_capitals_mc", "shipyard_prose_ppl"], "limit": 4, "cache": False})


def _ppl(summary: dict) -> float:
    return summary["scores"]["shipyard_prose_ppl"]["word_perplexity,none"]["value"]


@pytest.mark.slow
def test_per_adapter_gate_passes_same_weights_and_fails_a_broken_model_or_adapter(tiny_model: Path,
                                                                                  tmp_path: Path) -> None:
    from report_fixtures import judged

    # one compress-runtime process builds the adapters and the damaged model, one evaluates all four
    run_in_runtime("compress", build_lora_fixtures, model_dir=str(tiny_model), out_root=str(tmp_path / "src"))
    good, broken, damaged = tmp_path / "src" / "good", tmp_path / "src" / "broken", tmp_path / "src" / "damaged"
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model, copy)
    adapters = tmp_path / "adapters"
    [record] = fetch_adapters(json.dumps({"good": str(good)}), str(adapters))
    swapped = tmp_path / "swapped"  # "good" whose files were replaced by the broken adapter after the base's eval
    shutil.copytree(adapters, swapped)
    shutil.rmtree(swapped / "good")
    shutil.copytree(broken, swapped / "good")
    (swapped / "adapters.json").write_text(json.dumps({"adapters": [{**record, **adapter_identity(swapped / "good")}]}))

    runs = [(tiny_model, adapters, "base"), (copy, adapters, "copy"), (damaged, adapters, "damaged"),
            (copy, swapped, "swapped")]
    base, same, worse, other = (summaries["good"] for summaries in run_in_runtime(
        "compress", evaluate_adapters_each, eval_config=EVAL,
        runs=[{"model_dir": str(m), "adapters_dir": str(a), "out_dir": str(tmp_path / "eval" / name)}
              for m, a, name in runs]))

    # each run wrote its adapters' index beside their results (the step's record)
    assert all((tmp_path / "eval" / name / LORA_RECORD).is_file() for *_, name in runs)
    # lm-eval loaded the adapter (peft=) and summary.json pins it by content
    raw = json.loads((tmp_path / "eval" / "base" / "good" / "lm_eval_results.json").read_text())
    assert str((adapters / "good").resolve()) in json.dumps(raw["config"]["model_args"]), raw["config"]["model_args"]
    assert base["adapter"]["name"] == "good" and base["adapter"]["digest"] == record["digest"]
    assert base["adapter"]["rank"] == 8 and not base["cached"]
    # another adapter's content really moves the outputs (lm-eval applied it): word perplexity of the
    # random-weight tiny model is ~1e9 either way, so only the size of the change is asserted
    assert abs(math.log(_ppl(other) / _ppl(base))) > 0.1, (_ppl(other), _ppl(base))
    assert base["scores"] == same["scores"]
    # the damaged weights move perplexity by more than the 1% the gate allows; on a random-weight model
    # the direction depends on the noise, so the better side plays the base and the worse the candidate
    assert abs(math.log(_ppl(worse) / _ppl(base))) > 0.05, (_ppl(worse), _ppl(base))

    results = tmp_path / "eval"
    better, poorer = ((results / "base", results / "damaged") if _ppl(worse) > _ppl(base)
                      else (results / "damaged", results / "base"))
    # the recovery rule: a few questions per task are too few for the default rule to show anything
    passed = run_adapter_gates(str(results / "base"), str(results / "copy"), RECOVERY, str(tmp_path / "reports"))
    assert passed["good"]["passed"] and passed["good"]["worst_recovery"] == 1.0, passed
    assert passed["good"]["digest"] == record["digest"]
    assert "Accuracy gate: PASS" in (tmp_path / "reports" / "accuracy-lora-good.md").read_text()
    failed = run_adapter_gates(str(better), str(poorer), RECOVERY)
    assert not failed["good"]["passed"] and "shipyard_prose_ppl word_perplexity" in failed["good"]["reason"]
    assert failed["good"]["worst_recovery"] < 0.99
    refused = run_adapter_gates(str(results / "base"), str(results / "swapped"), RECOVERY)
    assert not refused["good"]["passed"] and "LoRA adapter (digest)" in refused["good"]["reason"], refused

    # the candidate's record: passed needs every adapter gate (the other gates pass on the fixtures)
    from shipyard.steps.judge import judge_candidate

    fixture = judged(tmp_path / "plain")
    assert fixture["passed"], fixture["reason"]
    kwargs = _judged_inputs(tmp_path / "plain")
    ok = judge_candidate(**kwargs, out_dir=str(tmp_path / "ok"), base_adapters=str(results / "base"),
                         candidate_adapters=str(results / "copy"))
    assert ok["passed"] and ok["candidate"]["adapters"]["good"]["passed"], ok["reason"]
    assert "all 1 LoRA adapter accuracy gates passed" in ok["reason"]
    bad = judge_candidate(**kwargs, out_dir=str(tmp_path / "bad"), base_adapters=str(better),
                          candidate_adapters=str(poorer))
    assert not bad["passed"] and bad["reason"].startswith("LoRA adapter good accuracy gate failed"), bad["reason"]
    assert bad["candidate"]["adapters"]["good"]["worst_recovery"] < 0.99
    assert bad["metrics"]["adapters_passed"] == 0.0
    assert json.loads((tmp_path / "bad" / "candidate.json").read_text())["adapters"]["good"]["passed"] is False


def _judged_inputs(tmp: Path) -> dict:
    """The fixture folders :func:`report_fixtures.judged` wrote, as judge_candidate's arguments."""
    from report_fixtures import SLO, THRESHOLDS

    return {"recipe": "w8a8-int8", "base_eval": str(tmp / "base-eval"), "candidate_eval": str(tmp / "w8a8-int8-eval"),
            "base_bench": str(tmp / "base-bench"), "candidate_bench": str(tmp / "w8a8-int8-bench"),
            "thresholds": THRESHOLDS, "slo": SLO}


URI = f"oci://quay.io/org/model@{DIGEST}"
GATED = {"sql": {"passed": True, "uri": "hf://acme/sql-lora", "digest": DIGEST, "worst_recovery": 1.0, "reason": "ok"},
         "local": {"passed": True, "uri": "/srv/adapters/local", "digest": DIGEST, "worst_recovery": 1.0, "reason": "ok"},
         "broken": {"passed": False, "uri": "s3://adapters/broken", "digest": DIGEST, "worst_recovery": 0.5,
                    "reason": "failed"}}


def test_the_champions_gated_adapters_render_into_spec_model_lora() -> None:
    from shipyard.gates.served_adapters import champion_adapters, with_adapters
    from shipyard.serving.kserve.config import parse_config
    from shipyard.serving.kserve.render import render
    from shipyard.serving.kserve.validate import require_valid

    adapters = champion_adapters({"adapters": GATED})
    assert [a["name"] for a in adapters] == ["sql", "local"]  # a failed adapter is never served
    params, notes = with_adapters({"lora": {"adapters": [{"name": "own", "uri": "pvc://loras/own"}], "max_rank": 16}},
                                  adapters, dry_run=True)
    assert params["lora"] == {"adapters": [{"name": "own", "uri": "pvc://loras/own"},
                                           {"name": "sql", "uri": "hf://acme/sql-lora"}], "max_rank": 16}
    assert any("local" in n and "left out of the dry-run manifest" for n in notes), notes
    docs = render(parse_config(params, name="llm", model_uri=URI), None)
    require_valid(docs)
    [svc] = [d for d in docs if d["kind"] == "LLMInferenceService"]
    assert svc["spec"]["model"]["lora"]["adapters"][1] == {"name": "sql", "uri": "hf://acme/sql-lora"}
    with pytest.raises(ShipyardError, match="^lora_adapters.local: '/srv/adapters/local' is a local folder"):
        with_adapters({}, adapters, dry_run=False)
    with pytest.raises(ShipyardError, match=r"^deploy_config.lora.adapters.sql: names 'hf://other/x'"):
        with_adapters({"lora": {"adapters": [{"name": "sql", "uri": "hf://other/x"}]}}, adapters, dry_run=True)
    assert with_adapters({"preset": "aggregated"}, [], dry_run=False) == ({"preset": "aggregated"}, [])


def test_deploy_dry_run_serves_the_champions_adapters(tmp_path: Path) -> None:
    from shipyard.core.records import CANDIDATE_SCHEMA as SCHEMA
    from shipyard.steps.deploy import run_deploy

    champion = tmp_path / "champion"
    champion.mkdir()
    (champion / "candidate.json").write_text(json.dumps({"schema": SCHEMA, "recipe": "w8a8-int8", "passed": True,
                                                         "reason": "passed", "adapters": GATED}))
    out = tmp_path / "manifest.yaml"
    run_deploy(deploy_config={"preset": "aggregated", "verify": {"enabled": False}}, manifest_path=str(out),
               dry_run=True, candidate=str(champion), name="llm", model_uri=URI)
    import yaml

    [svc] = [d for d in yaml.safe_load_all(out.read_text()) if d and d["kind"] == "LLMInferenceService"]
    assert svc["spec"]["model"]["lora"]["adapters"] == [{"name": "sql", "uri": "hf://acme/sql-lora"}]


def test_registration_tags_pin_the_champions_adapters(tmp_path: Path) -> None:
    import uuid

    from mlflow import MlflowClient
    from mlflow_server import shared_server

    from shipyard.core.records import CANDIDATE_SCHEMA as SCHEMA
    from shipyard.steps.register import register_champion
    from shipyard.tracking.pipeline_runs import start_tracking

    champion = tmp_path / "champion"
    champion.mkdir()
    (champion / "candidate.json").write_text(json.dumps({"schema": SCHEMA, "recipe": "w8a8-int8", "passed": True,
                                                         "reason": "passed", "adapters": {"sql": GATED["sql"]}}))
    url, name, run_id = shared_server().url, f"lora-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    start_tracking(url, name, "optimize-and-deploy", run_id, "{}", "")
    out = register_champion(tracking_uri=url, experiment=name, kfp_run_id=run_id, model_name=name,
                            source_uri=URI, digest=DIGEST, selection_dir=str(champion), base_model_uri="hf://org/base",
                            champion_tolerance=0.0, report_path=str(tmp_path / "champion.md"))
    version = MlflowClient(url).get_model_version(name, str(out["version"]))
    assert version.tags["lora.sql"] == f"hf://acme/sql-lora {DIGEST}"
