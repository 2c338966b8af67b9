"""The accuracy gate inside a local KFP pipeline run (kfp.local): its decision drives dsl.If, a
failing candidate skips the promote branch and the run records why.

No ``from __future__ import annotations`` here: KFP reads the components' annotations.
"""

import json
from pathlib import Path

import pytest

BASE = {
    "mc": {"acc,none": {"value": 0.80, "stderr": 0.04, "higher_is_better": True},
           "acc_norm,none": {"value": 0.70, "stderr": 0.05, "higher_is_better": True}},
    "ppl": {"word_perplexity,none": {"value": 20.0, "stderr": None, "higher_is_better": False},
            "bits_per_byte,none": {"value": 1.0, "stderr": None, "higher_is_better": False}},
}


def write(tmp: Path, name: str, scores: dict, config_hash: str = "c0ffee" * 4) -> str:
    folder = tmp / name
    folder.mkdir()
    summary = {"format": "shipyard.eval/v1", "config": {}, "config_hash": config_hash,
               "model_identity": {"sha256": name * 8}, "backend": "hf", "scores": scores}
    (folder / "summary.json").write_text(json.dumps(summary))
    return str(folder)
def _gate_pipeline():
    from kfp import dsl
    from kfp.dsl import Artifact, Input, Markdown

    from shipyard.components.evaluate.component import accuracy_gate
    from shipyard.runtimes.runtime import runtime_image

    @dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
    def promote(marker: str):
        """Stands in for package/deploy: leaves a file when it runs."""
        from pathlib import Path

        Path(marker).write_text("promoted")

    @dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
    def stop(report: Input[Markdown], marker: str):
        """The failing branch: records why the candidate was not promoted."""
        from pathlib import Path

        Path(marker).write_text(report.metadata["reason"])

    @dsl.pipeline(name="gate-test")
    def gate_pipeline(base_dir: str, candidate_dir: str, thresholds: str, promoted: str, stopped: str):
        base = dsl.importer(artifact_uri=base_dir, artifact_class=Artifact, reimport=True)
        cand = dsl.importer(artifact_uri=candidate_dir, artifact_class=Artifact, reimport=True)
        gate = accuracy_gate(base_results=base.output, candidate_results=cand.output, thresholds=thresholds)
        with dsl.If(gate.outputs["Output"] == True):  # noqa: E712 - KFP condition syntax
            promote(marker=promoted)
        with dsl.Else():
            stop(report=gate.outputs["report"], marker=stopped)

    return gate_pipeline


@pytest.mark.parametrize("verdict", ["pass", "fail", "unreadable"])
def test_gate_drives_dsl_if_in_a_local_pipeline(tmp_path: Path, verdict: str) -> None:
    from kfp import local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    base = write(tmp_path, "b", BASE)
    cand_scores = json.loads(json.dumps(BASE))
    if verdict == "fail":
        cand_scores["mc"]["acc,none"]["value"] = 0.60  # recovery 0.75
    cand = write(tmp_path, "c", cand_scores)
    if verdict == "unreadable":
        (Path(cand) / "summary.json").write_text("{truncated")
    promoted, stopped = tmp_path / "promoted", tmp_path / "stopped"
    # the recovery rule: these summaries carry no per-sample logs, which the default rule needs (it would
    # fail closed on every verdict); this test is about the gate driving dsl.If, not about the rule
    _gate_pipeline()(base_dir=base, candidate_dir=cand, thresholds=json.dumps({"rule": "recovery"}),
                     promoted=str(promoted), stopped=str(stopped))
    if verdict == "pass":
        assert promoted.read_text() == "promoted" and not stopped.exists()
    elif verdict == "unreadable":  # fail closed: the run goes on and takes the "stop" branch
        assert not promoted.exists()
        assert stopped.read_text().startswith("failed closed: candidate_results: cannot read")
    else:
        assert not promoted.exists()
        assert stopped.read_text().startswith("failed: 1 of 4 gated metrics below threshold: mc acc,none: recovery 0.7500")


def _eval_pipeline():
    from kfp import dsl
    from kfp.dsl import Input, Markdown, Model

    from shipyard.components.evaluate.component import accuracy_gate, evaluate_hf
    from shipyard.runtimes.runtime import runtime_image

    @dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
    def record(report: Input[Markdown], marker: str):
        """Leaves the gate's reason in a file (stands in for package on pass, for stop on fail)."""
        from pathlib import Path

        Path(marker).write_text(report.metadata["reason"])

    @dsl.pipeline(name="eval-gate-test")
    def eval_pipeline(model_dir: str, eval_config: str, thresholds: str, promoted: str, stopped: str):
        model = dsl.importer(artifact_uri=model_dir, artifact_class=Model, reimport=True)
        base = evaluate_hf(model=model.output, eval_config=eval_config).set_display_name("evaluate base")
        cand = evaluate_hf(model=model.output, eval_config=eval_config).set_display_name("evaluate candidate")
        cand.after(base)
        gate = accuracy_gate(base_results=base.outputs["results"], candidate_results=cand.outputs["results"],
                             thresholds=thresholds)
        with dsl.If(gate.outputs["Output"] == True):  # noqa: E712 - KFP condition syntax
            record(report=gate.outputs["report"], marker=promoted)
        with dsl.Else():
            record(report=gate.outputs["report"], marker=stopped)

    return eval_pipeline


@pytest.mark.slow
def test_evaluate_and_gate_in_a_local_pipeline(tiny_model: Path, tmp_path: Path, monkeypatch) -> None:
    """Real lm-eval through the KFP wrappers: the second evaluation reuses the first (cache),
    the gate (rule recovery) passes identical results and fails with an injected threshold."""
    from kfp import local

    monkeypatch.setenv("SHIPYARD_CACHE", str(tmp_path / "cache"))
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    config = json.dumps({"limit": 3, "tasks": ["shipyard_capitals_mc", "shipyard_prose_ppl"]})
    pipeline = _eval_pipeline()
    # the recovery rule: 3 questions per task are too few for the default rule to show anything
    for name, thresholds in (("pass", json.dumps({"rule": "recovery"})),
                             ("fail", json.dumps({"rule": "recovery", "min_recovery": 1.2}))):
        promoted, stopped = tmp_path / f"{name}-promoted", tmp_path / f"{name}-stopped"
        pipeline(model_dir=str(tiny_model), eval_config=config, thresholds=thresholds,
                 promoted=str(promoted), stopped=str(stopped))
        if name == "pass":
            assert promoted.read_text().startswith("passed: all 5 gated metrics") and not stopped.exists()
        else:
            assert not promoted.exists()
            assert stopped.read_text().startswith("failed: 5 of 5 gated metrics below threshold")
            assert "recovery 1.0000 < 1.2" in stopped.read_text()
    summaries = sorted((tmp_path / "root").rglob("summary.json"))
    cached = [json.loads(p.read_text())["cached"] for p in summaries]
    assert len(cached) == 4 and cached.count(False) == 1  # evaluated once, reused three times
    assert len(list((tmp_path / "cache" / "eval").iterdir())) == 1
