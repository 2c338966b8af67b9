"""Building blocks shared by shipyard's pipelines (KFP DSL, evaluated at compile time).

``evaluate`` picks the eval backend with If/Else and merges the branch outputs with OneOf;
``gated`` evaluates and benchmarks a candidate and runs ``then`` only inside both gates;
``release`` registers a packaged candidate, runs the champion/challenger gate and deploys.
"""

from collections.abc import Callable
from typing import Any

from kfp import dsl

from shipyard.components.benchmark.component import benchmark, slo_gate
from shipyard.components.deploy.component import deploy
from shipyard.components.evaluate.component import accuracy_gate, evaluate_hf, evaluate_vllm
from shipyard.components.resolve.component import resolve_model
from shipyard.components.track.component import (
    close_tracking,
    promotion_gate,
    register_model,
    run_parameters,
    set_production,
    start_tracking,
    track_step,
)
from shipyard.pipelines.platform import on_cpu, on_gpu

Params = dict[str, Any]


def evaluate(model: Any, eval_config: Any, eval_backend: Any, label: str) -> dict[str, Any]:
    """Evaluate ``model`` with the chosen backend; the outputs of whichever branch ran."""
    with dsl.If(eval_backend == "vllm", name=f"{label}-on-vllm"):
        on_vllm = on_gpu(evaluate_vllm(model=model, eval_config=eval_config)).set_display_name(f"{label} (vLLM)")
    with dsl.Else(name=f"{label}-on-hf"):
        on_hf = on_gpu(evaluate_hf(model=model, eval_config=eval_config)).set_display_name(f"{label} (hf)")
    return {
        name: dsl.OneOf(on_vllm.outputs[name], on_hf.outputs[name]) for name in ("results", "metrics", "table")
    }


def tracking(tracking_uri: Any, experiment: Any, start: Any) -> dict[str, Any]:
    """How later steps reach the pipeline's MLflow run: by the KFP run id it is tagged with.

    (Passing start_tracking's parent_run_id into a ParallelFor works on the KFP backend but
    not under kfp.local 2.17, which resolves such a parameter to the loop item.)
    """
    return {"tracking_uri": tracking_uri, "experiment": experiment, "kfp_run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            "_start": start}


def track(run: dict[str, Any], step: str, **artifacts: Any) -> Any:
    """Record one step's metrics and reports as a nested MLflow run."""
    task = track_step(
        tracking_uri=run["tracking_uri"], parent_run_id="", step=step, params_json="{}", tags_json="{}",
        kfp_run_id=run["kfp_run_id"], experiment=run["experiment"], **artifacts,
    )
    return on_cpu(task.set_display_name(f"track {step}").after(run["_start"]))


def tracked(p: Params, pipeline_name: str, body: Callable[[dict[str, Any]], None]) -> None:
    """One MLflow parent run around ``body(run)``, closed by an exit handler (FINISHED/FAILED)."""
    finish = on_cpu(
        close_tracking(tracking_uri=p["tracking_uri"], experiment=p["experiment"], kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    ).set_display_name("close MLflow run")
    with dsl.ExitHandler(finish, name="shipyard"):
        described = on_cpu(
            run_parameters(
                model_uri=p["model_uri"],
                recipes=p.get("recipes", []),
                eval_backend=p["eval_backend"],
                eval_config=p["eval_config"],
                accuracy_thresholds=p["accuracy_thresholds"],
                benchmark_config=p["benchmark_config"],
                slo=p["slo"],
                deploy_config=p["deploy_config"],
                candidate_uri=p.get("candidate_uri", ""),
            ).set_display_name("collect parameters")
        )
        start = on_cpu(
            start_tracking(
                tracking_uri=p["tracking_uri"],
                experiment=p["experiment"],
                pipeline_name=pipeline_name,
                kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                params_json=described.output,
                tags_json="{}",
            ).set_display_name("start MLflow run")
        )
        body(tracking(p["tracking_uri"], p["experiment"], start))


def base_reference(p: Params, run: dict[str, Any]) -> tuple[Any, dict[str, Any], Any]:
    """Resolve the base model, evaluate and benchmark it once: the reference every candidate meets."""
    base = on_cpu(resolve_model(model_uri=p["model_uri"]).set_display_name("resolve base model"))
    base_eval = evaluate(base.outputs["model"], p["eval_config"], p["eval_backend"], "evaluate base")
    track(run, "evaluate-base", metrics=base_eval["metrics"], files=base_eval["results"], report=base_eval["table"])
    base_bench = on_gpu(benchmark(model=base.outputs["model"], benchmark_config=p["benchmark_config"]))
    base_bench.set_display_name("benchmark base")
    track(run, "benchmark-base", metrics=base_bench.outputs["metrics"], report=base_bench.outputs["summary"])
    return base, base_eval, base_bench


def gated(
    p: Params, run: dict[str, Any], model: Any, base_eval: dict[str, Any], base_bench: Any,
    then: Callable[[dict[str, Any], Any], None],
) -> None:
    """Evaluate ``model`` like the base, accuracy gate, benchmark, SLO gate; ``then(cand_eval,
    cand_bench)`` builds what runs only when both gates pass."""
    cand_eval = evaluate(model, p["eval_config"], p["eval_backend"], "evaluate candidate")
    accuracy = on_cpu(
        accuracy_gate(
            base_results=base_eval["results"], candidate_results=cand_eval["results"], thresholds=p["accuracy_thresholds"]
        ).set_display_name("accuracy gate")
    )
    track(run, "accuracy-gate", metrics=accuracy.outputs["metrics"], files=cand_eval["results"],
          report=accuracy.outputs["report"])
    with dsl.If(accuracy.outputs["Output"] == True, name="accuracy-passed"):  # noqa: E712 - KFP condition
        cand_bench = on_gpu(benchmark(model=model, benchmark_config=p["benchmark_config"]))
        cand_bench.set_display_name("benchmark candidate")
        slo_check = on_cpu(
            slo_gate(
                base_results=base_bench.outputs["results"], candidate_results=cand_bench.outputs["results"], slo=p["slo"]
            ).set_display_name("SLO gate")
        )
        track(run, "slo-gate", metrics=slo_check.outputs["metrics"], report=slo_check.outputs["report"])
        with dsl.If(slo_check.outputs["Output"] == True, name="slo-passed"):  # noqa: E712
            then(cand_eval, cand_bench)


def release(
    p: Params, run: dict[str, Any], source_uri: Any, model: Any, cand_eval: dict[str, Any], cand_bench: Any,
    base_eval: dict[str, Any],
) -> None:
    """Register the packaged candidate (alias candidate), gate it against production, deploy it
    and give it the production alias."""
    version = on_cpu(
        register_model(
            tracking_uri=p["tracking_uri"],
            model_name=p["registered_model_name"],
            source_uri=source_uri,
            parent_run_id="",
            tags_json="{}",
            kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            experiment=p["experiment"],
        ).set_display_name("register model version")
    )
    promotion = on_cpu(
        promotion_gate(
            tracking_uri=p["tracking_uri"],
            model_name=p["registered_model_name"],
            candidate_version=version.outputs["version"],
            parent_run_id="",
            kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            experiment=p["experiment"],
            slos_json="{}",
            accuracy_metrics="",
            min_recovery=0.0,
            champion_tolerance=p["champion_tolerance"],
            candidate_eval=cand_eval["results"],
            candidate_bench=cand_bench.outputs["metrics"],
            base_eval=base_eval["results"],
        ).set_display_name("champion/challenger gate")
    )
    with dsl.If(promotion.outputs["Output"] == True, name="promoted"):  # noqa: E712
        rollout = on_cpu(
            deploy(
                model_uri=source_uri,
                name=p["deploy_name"],
                namespace=p["namespace"],
                deploy_config=p["deploy_config"],
                dry_run=p["dry_run"],
                model=model,
            ).set_display_name("deploy LLMInferenceService")
        )
        track(run, "deploy", files=rollout.outputs["manifest"])
        on_cpu(
            set_production(
                tracking_uri=p["tracking_uri"],
                model_name=p["registered_model_name"],
                version=version.outputs["version"],
                gate_passed=promotion.outputs["Output"],
            ).set_display_name("alias production").after(rollout)
        )
