"""The judge path on a real vLLM server, for the slow test of user eval sets (issue 36).

:func:`judge_prepared_sets` serves one model folder with vLLM and uses it as base, candidate and
judge at once, on one server: the rubric prompts of a prepared folder are answered into both
results folders, then the judge step's own work runs against that server
(:func:`shipyard.steps.eval_sets.judge_on_server`): every rubric set judged in both orders, the
labelled slice once, and Ragas (garak runtime) on the rag sets' answers that lm-eval generated.
The path is what is tested, not the judge's quality (the tiny model's verdicts and Ragas' scores
are noise, often NaN). Runs in the vllm runtime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the tiny model's 1,024-token vocabulary spends about 4,100 tokens on Ragas' longest prompt (the
#: correctness classifier's), so it is served past its 2,048 positions (its weights are random anyway)
TINY_JUDGE_MAX_MODEL_LEN = 8192


def judge_prepared_sets(model_dir: str, prepared_dir: str, base_results: str, candidate_results: str,
                        max_model_len: int = TINY_JUDGE_MAX_MODEL_LEN) -> dict[str, Any]:
    """``judged.json``'s content (``sets``, ``labels``, ``ragas``) from one vLLM server of ``model_dir``;
    the rubric answers (``rubric_answers.json``) are written into both results folders first."""
    from shipyard.core.files import atomic_write_text
    from shipyard.evaluation.judge import answer_rubric
    from shipyard.serving.vllm_server import VLLMServer
    from shipyard.steps.eval_sets import ANSWERS, RUBRIC, judge_on_server

    rubric = sorted((Path(prepared_dir) / RUBRIC).glob("*.jsonl"))
    with VLLMServer(Path(model_dir), served_model_name="judge", extra_args=["--max-model-len", str(max_model_len)],
                    env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}) as server:
        for results in (base_results, candidate_results):
            answers = {path.stem: answer_rubric(server.base_url, server.served_model_name,
                                                [json.loads(line) for line in path.read_text().splitlines() if line],
                                                max_tokens=16) for path in rubric}
            atomic_write_text(Path(results) / ANSWERS, json.dumps(answers))
        return judge_on_server(server.base_url, server.served_model_name, prepared_dir, base_results,
                               candidate_results)
