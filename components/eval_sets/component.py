"""KFP wrappers of your own eval sets' run-level and per-candidate steps (logic: shipyard/steps/eval_sets.py).

The pin step (never cached) pins every set to the sha256 of its bytes; the prepare step (cached by
the pinned sets) reads them; each model's measure step evaluates the prepared sets; with a rubric
set the judge model is pinned and fetched once per run (pin-model, resolve-model) and each
candidate's judge step serves that artifact; the candidate's gates decide on them.
"""

from kfp import dsl
from kfp.dsl import Artifact, Input, Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def pin_eval_sets(eval_sets: str) -> str:
    """Pin your eval sets to what they hold now, so that the cached prepare step (and every measure
    step that reads its output) reruns exactly when a set's content changes, even under the same
    s3:// key. Never cached: every set and the judge's labelled slice is read (file, s3://, pvc://,
    builtin://) and its sha256 written into the spec.

    Args:
        eval_sets: The eval_sets parameter (JSON). A "sha256" given for a set (or "labels_sha256" for the
            judge's labelled slice) must be the sha256 of its bytes, or the step fails naming the set.

    Returns the pinned eval_sets (each set with its "sha256"), the prepare step's input; "" when empty.
    """
    from shipyard.runtimes.runtime import call_step
    from shipyard.steps.eval_sets import pin_step

    if not eval_sets.strip():  # no sets: nothing to pin, no runtime started
        return ""
    out = call_step("base", pin_step, eval_sets=eval_sets)
    for pinned in out["sets"]:
        print(f"eval set {pinned['name']}: {pinned['uri']}; content sha256:{pinned['sha256']}", flush=True)
    if out["labels_sha256"]:
        print(f"judge labelled slice: content sha256:{out['labels_sha256']}", flush=True)
    return out["eval_sets"]


@dsl.component(base_image=runtime_image("vllm"), install_kfp_package=False)
def prepare_eval_sets(
    eval_sets: str,
    prepared: Output[Artifact],
    calibration_dataset: str = "",
    text_column: str = "text",
) -> str:
    """Your eval sets, prepared once for the run: every set read (file, s3://, pvc://, builtin://),
    checked against the sha256 the pin step gave it (a set changed since is refused), validated
    against its form's schema, deduplicated and checked for overlap with
    the calibration data (refused over max_leak_share); mcq/qa/chat/rag sets are compiled into
    lm-eval tasks and loaded with lm-eval's own loader; rubric rows and the judge's labelled slice
    are kept for the judge.

    Args:
        eval_sets: The pinned eval_sets (pin-eval-sets' output: each set with its sha256). Empty: an empty
            folder, and no later step runs a set.
        prepared: prepared.json (sets, digests, leak reports, warnings, judge), tasks/, rubric/, labels.jsonl.
        calibration_dataset: The compression calibration data the sets are checked against.
        text_column: Its text column.

    Returns the judge model's URI when a rubric set needs judging, else "" (the judge step then does not run).
    """
    from shipyard.runtimes.runtime import call_step
    from shipyard.steps.eval_sets import prepare_step

    if not eval_sets.strip():  # no sets: an empty folder, written here (no runtime started)
        out = prepare_step(eval_sets="", out_dir=prepared.path)
    else:
        # the vllm runtime has what reading (jsonschema, minio) and lm-eval's loader need, in one image
        out = call_step("vllm", prepare_step, eval_sets=eval_sets, out_dir=prepared.path,
                        calibration_dataset=calibration_dataset, text_column=text_column, validate_runtime="vllm")
    prepared.metadata.update({"sets": [s["name"] for s in out["sets"]], "warnings": out["warnings"],
                              "leaks": [r["line"] for r in out["leaks"]]})
    for line in [r["line"] for r in out["leaks"]] + out["warnings"]:
        print(f"eval_sets: {line}", flush=True)
    return out["judge_model_uri"]


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def no_judge_model(model: Output[Model]) -> str:
    """No rubric set in this run, so no judge model to fetch: an empty folder in place of the judge
    model (the judge step then writes nothing), in this step's own process on a CPU node.

    Args:
        model: Empty.

    Returns "" (no pinned content).
    """
    import os

    os.makedirs(model.path, exist_ok=True)
    return ""


@dsl.component(base_image=runtime_image("vllm"), install_kfp_package=False)
def judge_eval_sets(
    prepared: Input[Artifact],
    base_results: Input[Artifact],
    candidate_results: Input[Artifact],
    judge_model: Input[Model],
    judged: Output[Artifact],
    judge_fingerprint: str = "",
):
    """The judge of your rubric sets for one candidate: the judge model, pinned and fetched once for
    the run (pin-model, resolve-model), served by vLLM from that artifact (nothing is downloaded
    here), reads base's and candidate's answers to every rubric prompt in both orders (greedy), and
    judges your labelled slice once (its Cohen's kappa decides whether the judge may gate). With a
    rag set, Ragas (faithfulness, answer correctness) scores both models' generated answers with
    the same judge at temperature 0; metrics that need an embedding model are skipped. The judge's
    calls keep to eval_sets.judge's caps: max_tokens per verdict, ragas_max_tokens per Ragas call,
    concurrency (requests in flight) and max_rows (a set's first rows; the verdict says "N of M").

    Args:
        prepared: The prepared eval sets (prepare-eval-sets).
        base_results: The base's eval-set results (its answers to the rubric prompts, its lm-eval samples).
        candidate_results: The candidate's.
        judge_model: The judge model (resolve-model's folder; metadata: its pinned uri and fingerprint).
            Empty without rubric sets.
        judged: judged.json: per rubric set the verdicts in both orders, the labelled slice's verdicts,
            Ragas' per-answer scores per rag set (None where Ragas could not score) and the judge model
            (pinned uri, content fingerprint). Without rubric sets, and without rag sets scored by a
            judge (this step then runs on a CPU node), nothing is written.
        judge_fingerprint: pin-model's content fingerprint of the judge: part of KFP's cache key, so a cached
            judgement is reused only while the judge is the same content. judged.json records the
            fingerprint resolve-model wrote into the judge model's metadata (this value only without it:
            kfp.local 2.17 hands a task inside the candidates' loop the loop item here instead).
    """
    import os

    from shipyard.runtimes.runtime import call_step
    from shipyard.steps.eval_sets import judge_model_uri, judge_step, load_prepared

    if not judge_model_uri(load_prepared(prepared.path)):  # nothing to judge: no runtime started
        os.makedirs(judged.path, exist_ok=True)
        return
    out = call_step("vllm", judge_step, prepared_dir=prepared.path, base_results=base_results.path,
                    candidate_results=candidate_results.path, out_dir=judged.path, model_dir=judge_model.path,
                    pinned_uri=str(judge_model.metadata.get("uri") or ""),
                    fingerprint=str(judge_model.metadata.get("fingerprint") or "") or judge_fingerprint)
    judged.metadata.update({"sets": sorted((out.get("sets") or {}).keys()), "judge_model": out.get("judge_model") or {},
                            "ragas_sets": sorted(((out.get("ragas") or {}).get("sets") or {}).keys())})
