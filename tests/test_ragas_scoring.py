"""Ragas on the rag eval sets (issue 36): answers read back from lm-eval's logs, scored by real Ragas
against a judge endpoint, NaN counted, paired per row and gated (shipyard.evaluation.ragas_scoring,
shipyard.gates.eval_sets, shipyard.steps.eval_sets). The run against a vLLM-served judge on the tiny
model is the slow test in test_eval_sets.py."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from shipyard.core.errors import ShipyardError
from shipyard.evaluation.ragas_scoring import METRICS, SKIPPED, finite, rag_answers, score_rag_sets
from shipyard.gates.eval_sets import (
    RAGAS_NO_JUDGE,
    RagasSet,
    gate_eval_sets,
    pair_scores,
    report_doc,
    unscored,
)
from shipyard.gates.judging import calibrate
from shipyard.gates.recovery import parse_thresholds
from shipyard.runtimes.runtime import run_in_runtime
from shipyard.steps.eval_sets import judge_model_uri, ragas_lines
from shipyard.testing.loopback import LoopbackServer

CALIBRATED = calibrate(["A", "B"] * 10, ["A", "B"] * 10, 0.6)
UNCALIBRATED = calibrate(None, None, 0.6)


def sample(doc: int, text: str, filt: str = "match") -> tuple[tuple[int, str], dict[str, Any]]:
    """One logged lm-eval sample as load_samples keys it: the raw generation in resps, the filtered one after."""
    return (doc, filt), {"doc_id": doc, "filter": filt, "resps": [[f"  {text}\n"]], "filtered_resps": ["Buenos Aires"]}


def test_answers_are_the_raw_generations_in_row_order_and_a_missing_row_is_one_line() -> None:
    rows = dict([sample(1, "second"), sample(0, "first"), sample(0, "other filter", "none")])
    assert rag_answers(rows, 2, "eval_sets.notes") == ["first", "second"]
    with pytest.raises(ShipyardError, match=r"eval_sets.notes \(base\): no logged answer for row\(s\) \[3\] of 3"):
        rag_answers(rows, 3, "eval_sets.notes (base)")


def test_scores_pair_on_rows_scored_on_both_sides_and_nan_is_counted() -> None:
    assert finite(float("nan")) is None and finite(True) is None and finite(0.5) == 0.5
    b, c, left_out = pair_scores([1.0, None, 0.5, 1.0], [0.5, 1.0, None, 1.0])
    assert (b, c, left_out) == ([1.0, 1.0], [0.5, 1.0], 2) and unscored([None, 1.0, None]) == 2
    with pytest.raises(ShipyardError, match="Ragas scored 1 base and 2 candidate rows"):
        pair_scores([1.0], [1.0, 1.0])


def _ragas_set(base: list[float | None], cand: list[float | None], calibration: Any) -> RagasSet:
    return RagasSet({m: {"base": list(base), "candidate": list(cand)} for m in METRICS}, calibration, 0.05)


def test_a_candidate_less_faithful_on_a_rag_set_is_refused_when_the_judge_is_calibrated() -> None:
    """40 rows: base 1.0 everywhere; the candidate drops to 0 on a planted 12 and two answers of
    each side are NaN: 36 pairs, loss 1/3 >> margin 0.05: inferior, and the gate fails on that set."""
    base: list[float | None] = [1.0] * 38 + [None, None]
    cand: list[float | None] = [0.0] * 12 + [1.0] * 24 + [None, None, 1.0, 1.0]
    thresholds = parse_thresholds("")
    gate = gate_eval_sets({"sets": {}}, {}, {}, thresholds, ragas={"notes": _ragas_set(base, cand, CALIBRATED)})
    rows = {r.metric: r for r in gate.rows}
    faith = rows["ragas_faithfulness"]
    assert faith.gated and not faith.passed and faith.decision == "inferior" and faith.paired["n"] == 36
    assert "4 of 40 rows not scored on both sides (NaN)" in faith.note and not gate.passed
    assert "notes ragas_faithfulness:" in gate.reason
    assert gate.ragas["sets"]["notes"]["lines"][0] == ("notes faithfulness: 36 of 40 rows scored on both sides; not "
                                                        "scored (NaN): 2 base, 2 candidate")
    metrics = gate.metrics()
    assert metrics["eval_sets/notes/ragas_faithfulness/base"] == 1.0 and metrics["eval_sets_passed"] == 0.0
    # the same scores from an uncalibrated judge inform only
    informs = gate_eval_sets({"sets": {}}, {}, {}, thresholds, ragas={"notes": _ragas_set(base, cand, UNCALIBRATED)})
    assert informs.passed and all(not r.gated and r.note.count("informs only") == 1 for r in informs.rows)
    # equal scores: non-inferior, and the report names the Ragas lines
    same = gate_eval_sets({"sets": {}}, {}, {}, thresholds, ragas={"notes": _ragas_set([1.0] * 60, [1.0] * 60,
                                                                                       CALIBRATED)})
    assert same.passed and {r.decision for r in same.rows} == {"non-inferior"}
    text = report_doc(same).to_markdown()
    assert "Ragas on the rag sets" in text and "notes answer_correctness: 60 of 60 rows scored on both sides" in text


def test_a_rag_set_with_too_few_scored_rows_fails_closed_only_when_gated() -> None:
    thresholds = parse_thresholds("")
    nan = _ragas_set([None, None, 1.0], [1.0, None, None], CALIBRATED)
    gate = gate_eval_sets({"sets": {}}, {}, {}, thresholds, ragas={"notes": nan})
    assert not gate.passed and all(r.decision == "too few scores" and "Ragas scored 0 of 3 rows on both sides" in r.note
                                   for r in gate.rows)
    informs = gate_eval_sets({"sets": {}}, {}, {}, thresholds,
                             ragas={"notes": _ragas_set([None] * 3, [None] * 3, UNCALIBRATED)})
    assert informs.passed and all(not r.gated for r in informs.rows)


def test_ragas_needs_a_judge_and_says_so_without_one() -> None:
    rag = {"name": "notes", "form": "rag"}
    assert judge_model_uri({"sets": [rag], "judge": {"model_uri": "embedded://smollm2-135m-instruct"}}) \
        == "embedded://smollm2-135m-instruct"
    assert judge_model_uri({"sets": [rag], "judge": None}) == ""
    assert judge_model_uri({"sets": [{"name": "q", "form": "qa"}], "judge": {"model_uri": "embedded://x"}}) == ""
    gate = gate_eval_sets({"sets": {}}, {}, {}, parse_thresholds(""), ragas_notes=[RAGAS_NO_JUDGE])
    assert gate.ragas["notes"] == [RAGAS_NO_JUDGE] and "eval_sets names no judge" in RAGAS_NO_JUDGE
    lines = ragas_lines({"ragas_version": "0.4.3", "judge_model": "j", "metrics": list(METRICS), "skipped": SKIPPED,
                         "sets": {"notes": {"errors": {"faithfulness": ["ValueError: the answer is empty"]}}}})
    assert lines[0] == "Ragas 0.4.3 with the judge j at temperature 0: faithfulness, answer_correctness"
    assert "notes faithfulness: not scored because ValueError: the answer is empty" in lines
    assert any(line.startswith("skipped answer_relevancy: needs an embedding model") for line in lines)


class ScriptedJudge(BaseHTTPRequestHandler):
    """An OpenAI chat endpoint that answers Ragas' prompts by rule (a test double of the judge's
    vLLM server; Ragas, instructor and the OpenAI client are the real ones): an answer holding
    ``zq-good`` is supported and correct, ``zq-bad`` is not, ``UNPARSEABLE`` gets no JSON back."""

    requests: list[dict[str, Any]] = []
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.requests.append(body)
        prompt = "\n".join(m["content"] for m in body["messages"] if isinstance(m.get("content"), str))
        tail = prompt[prompt.lower().rfind("input:"):]  # the row's own input, after the prompt's examples
        item = {"statement": "s", "reason": "r"}
        if "UNPARSEABLE" in tail:
            text = "I cannot say."
        elif "judge the faithfulness" in prompt:
            text = json.dumps({"statements": [{**item, "verdict": 1 if "zq-good" in tail else 0}]})
        elif "TP (true positive)" in prompt:
            text = json.dumps({"TP": [item], "FP": [], "FN": []} if "zq-good" in tail
                              else {"TP": [], "FP": [item], "FN": [item]})
        else:
            word = next((w for w in ("zq-good", "zq-bad") if w in tail), "zq-ref")
            text = json.dumps({"statements": [f"{word} claim"]})
        answer = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_real_ragas_scores_each_answer_and_counts_what_it_could_not_score(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Real Ragas 0.4.3 in the garak runtime against the scripted judge: faithfulness and the factual
    part of answer correctness per answer, None for an unparseable judge answer and an empty answer
    (counted, with the first error of each kind), every request at temperature 0. Offline: every
    address but the judge's goes to a closed port and tiktoken's cache is empty, so a download
    (tiktoken's BPE files, a hub file) would turn the scores into NaNs."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = [{"id": f"r{i}", "user_input": f"Where does the government of country {i} sit?",
             "retrieved_contexts": [f"The government of country {i} sits in zq-ref city {i}."],
             "reference": f"zq-ref city {i}"} for i in range(4)]
    sets = {"notes": {"rows": rows, "base": [f"zq-good city {i}" for i in range(4)],
                      "candidate": ["zq-good city 0", "zq-bad somewhere", "UNPARSEABLE", "  "]}}
    ScriptedJudge.requests = []
    with LoopbackServer(ScriptedJudge) as server:
        out = run_in_runtime("garak", score_rag_sets, base_url=server.url + "/v1", model="judge", sets=sets)
    result = out["sets"]["notes"]
    assert out["ragas_version"] == "0.4.3" and out["metrics"] == list(METRICS) and out["skipped"] == SKIPPED
    assert result["ids"] == ["r0", "r1", "r2", "r3"]
    for metric in METRICS:
        assert result["scores"][metric] == {"base": [1.0] * 4, "candidate": [1.0, 0.0, None, None]}, metric
        assert result["unscored"][metric] == {"base": 0, "candidate": 2}
        assert any(e.startswith("ValueError: the answer is empty") for e in result["errors"][metric])
        assert len(result["errors"][metric]) == 2  # the empty answer and the judge's answer that did not parse
    assert ScriptedJudge.requests and {r.get("temperature") for r in ScriptedJudge.requests} == {0.0}
    assert {r["model"] for r in ScriptedJudge.requests} == {"judge"}


class CappedJudge(ScriptedJudge):
    """:class:`ScriptedJudge` that also gives pairwise verdicts (``/v1/completions``: always "A"),
    keeps every request's ``max_tokens`` and counts the requests in flight at once."""

    in_flight = 0
    most_in_flight = 0

    def do_POST(self) -> None:
        with self.lock:
            CappedJudge.in_flight += 1
            CappedJudge.most_in_flight = max(CappedJudge.most_in_flight, CappedJudge.in_flight)
        try:
            time.sleep(0.05)  # long enough for requests sent together to overlap
            if self.path.endswith("/chat/completions"):
                super().do_POST()
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with self.lock:
                self.requests.append(body)
            data = json.dumps({"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "text": " A", "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        finally:
            with self.lock:
                CappedJudge.in_flight -= 1


def test_the_judge_step_keeps_to_the_judges_caps_and_says_how_many_rows_it_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``eval_sets.judge``'s caps hold in the judge step (real Ragas, the real pairwise judge's HTTP
    calls): ``max_rows`` judges a rubric set's and a rag set's first rows only, ``max_tokens`` is every
    verdict's, ``ragas_max_tokens`` every Ragas call's, ``concurrency`` the most requests in flight;
    the verdict, the rows and the report say "2 of 5 rows judged" (never silently)."""
    from shipyard.steps.eval_sets import JUDGED, judge_on_server, read_judged

    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    n = 5
    judge = {"model_uri": "embedded://smollm2-135m-instruct", "labels_uri": "builtin://homework_judge_labels.jsonl",
             "min_kappa": 0.6, "max_tokens": 7, "ragas_max_tokens": 300, "concurrency": 2, "max_rows": 2}
    prepared = tmp_path / "prepared"
    for folder in ("rubric", "rag"):
        (prepared / folder).mkdir(parents=True)
    (prepared / "rubric" / "homework.jsonl").write_text("".join(
        json.dumps({"id": f"h{i}", "prompt": f"What is {i} plus 1?", "guideline": "Right wins."}) + "\n"
        for i in range(n)))
    (prepared / "rag" / "notes.jsonl").write_text("".join(
        json.dumps({"id": f"r{i}", "user_input": f"Where does country {i}'s government sit?",
                    "retrieved_contexts": [f"It sits in zq-ref city {i}."], "reference": f"zq-ref city {i}"}) + "\n"
        for i in range(n)))
    (prepared / "labels.jsonl").write_text("".join(
        json.dumps({"prompt": "p", "answer_a": "a", "answer_b": "b", "label": label}) + "\n" for label in ("A", "B")))
    sets = [{"name": "homework", "form": "rubric"}, {"name": "notes", "form": "rag"}]
    (prepared / "prepared.json").write_text(json.dumps({"sets": sets, "judge": judge,
                                                        "manifest": {"sets": {"notes": {"task": "notes_task"}}}}))
    for side in ("base", "cand"):
        (tmp_path / side / "samples").mkdir(parents=True)
        (tmp_path / side / "rubric_answers.json").write_text(json.dumps({"homework": [f"{i + 1}" for i in range(n)]}))
        (tmp_path / side / "samples" / "notes_task.jsonl").write_text("".join(
            json.dumps(sample(i, f"zq-good city {i}")[1]) + "\n" for i in range(n)))
    CappedJudge.requests, CappedJudge.most_in_flight = [], 0
    with LoopbackServer(CappedJudge) as server:
        out = judge_on_server(server.url + "/v1", "judge", str(prepared), str(tmp_path / "base"), str(tmp_path / "cand"))
    verdicts = [r for r in CappedJudge.requests if "prompt" in r]
    ragas_calls = [r for r in CappedJudge.requests if "messages" in r]
    assert len(out["sets"]["homework"]["judged"]) == 2 and out["sets"]["homework"]["rows"] == n
    assert len(verdicts) == 2 * 2 + 2 and {r["max_tokens"] for r in verdicts} == {7}  # both orders, and the labels
    scored = out["ragas"]["sets"]["notes"]
    assert scored["rows"] == n and scored["ids"] == ["r0", "r1"]
    assert all(len(side) == 2 for m in METRICS for side in scored["scores"][m].values())
    assert ragas_calls and {r["max_tokens"] for r in ragas_calls} == {300}
    assert 1 <= CappedJudge.most_in_flight <= 2, CappedJudge.most_in_flight
    # the gate says how many rows the judge saw, in the verdict, the rows and the report
    (tmp_path / JUDGED).write_text(json.dumps(out))
    judged, ragas, notes, _ = read_judged(json.loads((prepared / "prepared.json").read_text()), str(tmp_path / JUDGED))
    gate = gate_eval_sets({"sets": {}}, {}, {}, parse_thresholds(""), judged, None, ragas, notes)
    assert "judge cap: homework 2 of 5 rows judged, notes 2 of 5 rows judged" in gate.reason, gate.reason
    assert gate.judge_capped == {"homework": {"judged": 2, "rows": 5, "by": "the pairwise judge"},
                                 "notes": {"judged": 2, "rows": 5, "by": "Ragas"}}
    assert all("judged on 2 of 5 rows (eval_sets.judge.max_rows)" in r.note for r in gate.rows), gate.rows
    assert gate.metrics()["eval_sets/notes/judged_rows"] == 2.0
    report = report_doc(gate).to_markdown()
    assert "homework: the pairwise judge judged 2 of 5 rows" in report and "notes: Ragas judged 2 of 5 rows" in report
