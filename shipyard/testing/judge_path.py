"""The judge path on a real vLLM server, for the slow test of user eval sets (issue 36).

:func:`judge_shipped_rubric` serves one model folder with vLLM and uses it as base, candidate and
judge at once: the first ``rows`` rows of the shipped rubric set are answered, judged in both
orders, and the shipped labelled slice is judged once. The path is what is tested, not the judge's
quality (the tiny model's verdicts are noise). Runs in the vllm runtime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shipyard.evaluation.eval_sets import check_eval_sets, load_labels, shipped_eval_sets


def judge_shipped_rubric(model_dir: str, rows: int = 3) -> dict[str, Any]:
    """``{"judged": [...], "unparsed", "labels", "label_verdicts", "label_truth"}`` from one vLLM server."""
    from shipyard.evaluation.judge import answer_rubric, judge_labels, judge_set
    from shipyard.serving.vllm_server import VLLMServer

    config, sets = check_eval_sets(shipped_eval_sets())
    rubric = next(s for s in sets if s.form == "rubric").rows[:rows]
    labels = load_labels(config.judge.labels_uri)[:rows] if config.judge and config.judge.labels_uri else []
    with VLLMServer(Path(model_dir), served_model_name="judge") as server:
        base = answer_rubric(server.base_url, server.served_model_name, rubric, max_tokens=16)
        cand = answer_rubric(server.base_url, server.served_model_name, rubric, max_tokens=16)
        judged, unparsed = judge_set(server.base_url, server.served_model_name, rubric, base, cand)
        verdicts = judge_labels(server.base_url, server.served_model_name, labels)
    return {"judged": judged, "unparsed": unparsed, "labels": len(labels), "label_verdicts": verdicts,
            "label_truth": [r["label"] for r in labels]}
