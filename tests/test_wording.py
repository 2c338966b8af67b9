"""The local run's summary in words (shipyard.run.wording): no raw KFP output names, and why each step
did not run."""

from __future__ import annotations

import json

from shipyard.run.local import StepSummary
from shipyard.run.wording import not_run_line, not_run_reason, outputs_text


def test_outputs_are_said_in_words_never_as_kfp_names() -> None:
    assert outputs_text("preflight", {"Output": "91b260aa11bb22cc33dd"}) == "MLflow run 91b260aa11bb"
    assert outputs_text("close-tracking", {"Output": "FINISHED"}) == "MLflow run ended FINISHED"
    assert outputs_text("deploy", {"url": "", "status": "DryRun"}) == "dry run: rendered and checked, nothing applied"
    assert outputs_text("deploy", {"url": "http://llm.ns.svc", "status": "Ready"}) == "status Ready, http://llm.ns.svc"
    assert outputs_text("for-loop-8-iteration-0/candidate-gates", {"Output": True}) == "yes"
    assert outputs_text("pin-model", {"uri": "hf://org/m@abc", "fingerprint": ""}) == "uri=hf://org/m@abc"
    pinned = json.dumps({"sets": [{"name": "faq", "form": "qa", "uri": "s3://b/faq.jsonl", "sha256": "ab" * 32}]})
    assert outputs_text("pin-eval-sets", {"Output": pinned}) == "faq sha256:abababababab"
    assert "Output" not in outputs_text("select-champion", {"Output": "/runs/x/resolve-model/model"})


def test_each_step_not_run_says_which_branch_and_why() -> None:
    params = {"eval_backend": "hf", "lora_adapters": ""}
    steps = [StepSummary(task="measure-vllm", status="NOT RUN", name="evaluate + benchmark base (one vLLM server)"),
             StepSummary(task="measure-vllm-2", status="NOT RUN", name="evaluate + benchmark candidate"),
             StepSummary(task="evaluate-adapters-hf", status="NOT RUN", name="evaluate base + each LoRA adapter (hf)"),
             StepSummary(task="deploy", status="NOT RUN", name="deploy; promote unless dry run"),
             StepSummary(task="compress", status="SUCCESS")]
    line = not_run_line(steps, params, {"champion": "base"})
    assert line == ("not run (4 steps): evaluate + benchmark base (one vLLM server), evaluate + benchmark candidate "
                    "(eval_backend=hf: lm-eval ran in-process and a vLLM server ran the benchmark); evaluate base + "
                    "each LoRA adapter (hf) (no LoRA adapters: the empty record was written on a CPU node); deploy; "
                    "promote unless dry run (the champion/challenger gate said no (see its row))")
    assert not_run_reason("package-champion", params, {"champion": ""}, failed=False).startswith("no champion")
    assert not_run_reason("package-champion", params, {"champion": ""}, failed=True) == "an upstream step failed"
    assert not_run_line(steps[-1:], params, {}) == ""


def test_the_judge_of_eval_sets_not_run_says_whether_a_rubric_set_was_given() -> None:
    """The judge step runs on a GPU node with a rubric set, or a rag set and a judge (Ragas scores it
    with the judge), else on a CPU node: the other branch says why."""
    judge = {"model_uri": "embedded://smollm2-135m-instruct"}
    rubric = {"eval_sets": json.dumps({"sets": [{"name": "h", "form": "rubric", "uri": "h.jsonl"}], "judge": judge})}
    rag = {"eval_sets": json.dumps({"sets": [{"name": "n", "form": "rag", "uri": "n.jsonl"}], "judge": judge})}
    rag_alone = {"eval_sets": json.dumps([{"name": "n", "form": "rag", "uri": "n.jsonl"}])}
    qa = {"eval_sets": json.dumps([{"name": "rubric-like-name", "form": "qa", "uri": "q.jsonl"}])}
    for params in (rubric, rag):
        assert not_run_reason("judge-eval-sets", params, {}, failed=False).startswith(
            "rubric sets, or rag sets and a judge, in eval_sets: the judge ran")
    for params in (qa, rag_alone, {"eval_sets": ""}, {}):
        assert not_run_reason("judge-eval-sets", params, {}, failed=False).startswith(
            "no rubric set, nor a rag set with a judge, in eval_sets")
    # the judge model, pinned and fetched once per run only when judged, else the no-op step
    assert not_run_reason("no-judge-model", rubric, {}, failed=False).startswith("rubric sets, or rag sets and a judge")
    for step in ("pin-model", "resolve-model"):
        assert not_run_reason(step, qa, {}, failed=False) == ("no rubric set, nor a rag set with a judge, in eval_sets: "
                                                              "no judge model to pin or fetch")
        assert not_run_reason(step, qa, {}, failed=True) == "an upstream step failed"
