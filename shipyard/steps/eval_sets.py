"""Your own eval sets as step logic: prepare once, evaluate per model, judge rubric answers, decide.

The functions a pipeline wires (the KFP wrappers call them with ``call_step``):

* :func:`pin_step` (once per run, never cached; base runtime): every set of ``eval_sets`` and the
  judge's labelled slice pinned to the sha256 of its bytes now, as pin-model pins the model: the
  pinned ``eval_sets`` (each digest written in) is the prepare step's input, so KFP's cache key of
  that step changes exactly when a set's content does, even under the same ``s3://`` key.
* :func:`prepare_eval_sets` (once per run; a runtime with lm-eval): reads every set of
  ``eval_sets`` (``s3://`` too), validates, deduplicates and pins it, runs the leak check against
  the calibration data (refusing a set over ``max_leak_share``), compiles the mcq/qa/chat/rag sets
  into one lm-eval task folder and loads it with lm-eval's own loader, and keeps the rubric rows
  and the judge's labelled slice: the *prepared* folder (``prepared.json``, ``tasks/``,
  ``rubric/<set>.jsonl``, ``labels.jsonl``).
* :func:`evaluate_eval_sets` (per model, beside the evaluate step; the same backend): lm-eval on the
  compiled tasks with per-sample logs (an evaluate results folder), and, given a vLLM server, the
  model's greedy answers to the rubric prompts (``rubric_answers.json``).
* :func:`judge_eval_sets` (per candidate, vllm runtime, only with rubric sets): the judge model
  served by vLLM judges base against candidate in both orders, and the labelled slice once. The
  judge model is pinned and fetched once per run, before the candidates' loop, by the pipeline's
  pin-model and resolve-model (the way the base model is); :func:`judge_step` serves that artifact
  and fetches nothing.
* :func:`decide_eval_sets` (per candidate, base runtime): the per-set gate
  (:mod:`shipyard.gates.eval_sets`) and its report; never raises (fails closed with the reason).

The pipelines (``shipyard.pipelines.stages``) run :func:`pin_step`, then :func:`prepare_step` once per run (an empty
``eval_sets`` writes an empty prepared folder and nothing else runs), :func:`evaluate_eval_sets`
inside each model's measure step (the same vLLM server or hf backend as the evaluation),
:func:`judge_step` per candidate only when a rubric set exists, and :func:`decide_eval_sets` inside
the candidate's gates (``shipyard.steps.judge.judge_candidate``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, atomic_write_text

PREPARED = "prepared.json"
TASKS = "tasks"
RUBRIC = "rubric"
#: the rag sets' rows (user_input, retrieved_contexts, reference) that Ragas scores the answers of
RAG = "rag"
LABELS = "labels.jsonl"
ANSWERS = "rubric_answers.json"
JUDGED = "judged.json"


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def pin_step(eval_sets: str) -> dict[str, Any]:
    """The pipeline's pin step: ``eval_sets`` with every set (and the judge's labelled slice)
    pinned to the sha256 of its bytes now (:func:`shipyard.evaluation.eval_sets.pin_eval_sets`).
    Returns ``{"eval_sets": the pinned value ("" for an empty one), "sets": [{name, uri, sha256}],
    "labels_sha256": the labelled slice's digest or ""}``. A digest given in ``eval_sets`` that the
    content does not match is one line naming the set."""
    from shipyard.evaluation.eval_sets import config_text, pin_eval_sets

    if not eval_sets.strip():
        return {"eval_sets": "", "sets": [], "labels_sha256": ""}
    config = pin_eval_sets(eval_sets)
    return {"eval_sets": config_text(config),
            "sets": [{"name": s.name, "uri": s.uri, "sha256": s.sha256} for s in config.sets],
            "labels_sha256": (config.judge.labels_sha256 or "") if config.judge else ""}


def prepare_eval_sets(eval_sets: str, out_dir: str, calibration_dataset: str = "", text_column: str = "text",
                      validate_runtime: str = "compress") -> dict[str, Any]:
    """Read, check, leak-check and compile ``eval_sets`` into the prepared folder ``out_dir``.

    Returns ``prepared.json``: ``sets`` (name, form, uri, sha256, pinned, rows, duplicates dropped,
    margin, match; a set whose bytes are not its pinned sha256 raises one line), ``manifest`` (the compiled tasks, or None), ``leaks`` (one report per set), ``warnings``
    (duplicates, overlaps), ``judge`` (the judge spec, or None) and ``lm_eval_docs`` (documents
    lm-eval loaded per task). A bad set or a leak over ``max_leak_share`` raises one line."""
    from shipyard.evaluation.eval_set_tasks import compile_eval_sets, validate_task_folder
    from shipyard.evaluation.eval_sets import LMEVAL_FORMS, load_all, load_labels, parse_eval_sets
    from shipyard.evaluation.leakage import leak_check
    from shipyard.runtimes.runtime import run_in_runtime

    config = parse_eval_sets(eval_sets)
    if not config.sets:
        raise ShipyardError("eval_sets", "names no set", "leave eval_sets empty to skip, or list at least one set")
    downloads = Path(tempfile.mkdtemp(prefix="shipyard-evalsets-"))
    try:
        sets = load_all(config, downloads)
        reports, overlaps = leak_check(sets, calibration_dataset, text_column=text_column,
                                       max_leak_share=config.max_leak_share)
        judge = config.judge
        labels = load_labels(judge.labels_uri, downloads, judge.labels_sha256) if judge and judge.labels_uri else []
    finally:
        shutil.rmtree(downloads, ignore_errors=True)
    prepared: dict[str, Any] = {
        "format": "shipyard.eval_sets.prepared/v1",
        "sets": [s.summary() for s in sets],
        "manifest": None,
        "leaks": [r.to_dict() for r in reports],
        "warnings": [w for s in sets for w in s.warnings] + overlaps,
        "judge": config.judge.model_dump() if config.judge else None,
        "lm_eval_docs": {},
    }
    with atomic_dir(out_dir) as tmp:
        if any(s.form in LMEVAL_FORMS for s in sets):
            prepared["manifest"] = compile_eval_sets(sets, tmp / TASKS)
            prepared["lm_eval_docs"] = run_in_runtime(validate_runtime, validate_task_folder, task_dir=str(tmp / TASKS))
        for folder, form in ((RUBRIC, "rubric"), (RAG, "rag")):
            chosen = [s for s in sets if s.form == form]
            if chosen:
                (tmp / folder).mkdir()
                for s in chosen:
                    _jsonl(tmp / folder / f"{s.name}.jsonl", s.rows)
        if labels:
            _jsonl(tmp / LABELS, labels)
        (tmp / PREPARED).write_text(json.dumps(prepared, indent=2, sort_keys=True), encoding="utf-8")
    return prepared


def prepare_step(eval_sets: str, out_dir: str, calibration_dataset: str = "", text_column: str = "text",
                 validate_runtime: str = "compress") -> dict[str, Any]:
    """The pipeline's prepare step: :func:`prepare_eval_sets`, or for an empty ``eval_sets`` an
    empty prepared folder (no set, no task, no judge) so that every later step does nothing.
    Returns ``prepared.json`` plus ``judge_model_uri``: the judge's model URI when a rubric set
    needs it, else ""."""
    if not eval_sets.strip():
        prepared: dict[str, Any] = {"format": "shipyard.eval_sets.prepared/v1", "sets": [], "manifest": None,
                                    "leaks": [], "warnings": [], "judge": None, "lm_eval_docs": {}}
        with atomic_dir(out_dir) as tmp:
            (tmp / PREPARED).write_text(json.dumps(prepared, indent=2, sort_keys=True), encoding="utf-8")
    else:
        prepared = prepare_eval_sets(eval_sets, out_dir, calibration_dataset, text_column, validate_runtime)
    return {**prepared, "judge_model_uri": judge_model_uri(prepared)}


def judge_model_uri(prepared: dict[str, Any]) -> str:
    """The judge's model URI when a rubric set needs judging or a rag set is scored by Ragas (a rag
    set is scored only when ``eval_sets`` names a judge), else ""."""
    if not any(s["form"] in ("rubric", "rag") for s in prepared.get("sets") or []):
        return ""
    return str((prepared.get("judge") or {}).get("model_uri") or "")


def has_sets(prepared_dir: str | Path) -> bool:
    """Whether a prepared folder holds any set (False for the empty folder of an empty ``eval_sets``)."""
    return bool(load_prepared(prepared_dir).get("sets"))


def load_prepared(prepared_dir: str | Path) -> dict[str, Any]:
    """``prepared.json`` of a prepared folder, or one line naming it."""
    from shipyard.core.records import read_record

    return read_record(prepared_dir, PREPARED, field="eval_sets", what="prepared eval sets",
                       fix="run the prepare step of eval_sets again")


def _task_dir(prepared_dir: str | Path) -> Path:
    """The compiled task folder of a prepared folder (the path the eval config names)."""
    return Path(prepared_dir).resolve() / TASKS


def evaluate_eval_sets(model_dir: str, prepared_dir: str, eval_config: str, out_dir: str, backend: str = "hf",
                       server: Any = None) -> dict[str, Any]:
    """One model on the prepared sets: lm-eval on the compiled tasks (``out_dir`` is an evaluate
    results folder with ``samples/``), and with ``server`` (a running vLLM server of this model)
    the answers to the rubric prompts in ``out_dir/rubric_answers.json``. Returns the evaluate summary."""
    from shipyard.evaluation.eval_set_tasks import eval_config_for
    from shipyard.evaluation.lmeval import evaluate_model

    prepared = load_prepared(prepared_dir)
    summary: dict[str, Any] = {}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    if prepared.get("manifest"):
        config = eval_config_for(_task_dir(prepared_dir), prepared["manifest"], eval_config)
        summary = evaluate_model(model_dir, config, out_dir, backend=backend, server=server)
    rubric = sorted((Path(prepared_dir) / RUBRIC).glob("*.jsonl")) if (Path(prepared_dir) / RUBRIC).is_dir() else []
    if rubric and server is not None:
        from shipyard.evaluation.judge import answer_rubric

        answers = {path.stem: answer_rubric(server.base_url, server.served_model_name, _read_jsonl(path))
                   for path in rubric}
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(out_dir) / ANSWERS, json.dumps(answers, indent=2))
    return summary


def rag_inputs(prepared_dir: str | Path, base_results: str, candidate_results: str) -> dict[str, dict[str, Any]]:
    """What Ragas scores per rag set: its rows and both models' generated answers, read from each
    model's logged lm-eval samples of the set's task (:func:`shipyard.evaluation.ragas_scoring.rag_answers`)."""
    from shipyard.evaluation.ragas_scoring import rag_answers
    from shipyard.gates.paired import load_samples

    folder = Path(prepared_dir) / RAG
    paths = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not paths:
        return {}
    manifest = load_prepared(prepared_dir).get("manifest") or {"sets": {}}
    base, cand = load_samples(base_results), load_samples(candidate_results)
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        rows = _read_jsonl(path)
        task = manifest["sets"][path.stem]["task"]
        field = f"eval_sets.{path.stem}"
        out[path.stem] = {"rows": [{k: r[k] for k in ("user_input", "retrieved_contexts", "reference", "id") if k in r}
                                   for r in rows],
                          "base": rag_answers(base.get(task) or {}, len(rows), f"{field} (base)"),
                          "candidate": rag_answers(cand.get(task) or {}, len(rows), f"{field} (candidate)")}
    return out


def judge_on_server(base_url: str, model: str, prepared_dir: str, base_results: str,
                    candidate_results: str) -> dict[str, Any]:
    """The judge step's work with the judge already served at ``base_url`` (``http://host:port/v1``,
    served as ``model``): every rubric set judged in both orders, the labelled slice once, and Ragas
    with that judge on every rag set's answers (:func:`shipyard.evaluation.ragas_scoring.score_rag_sets`,
    in the garak runtime), within the caps of ``eval_sets.judge`` (``max_tokens`` per verdict,
    ``ragas_max_tokens`` per Ragas call, ``concurrency`` requests in flight, ``max_rows``: a set's
    first rows only). Returns ``judged.json``'s content without ``judge_model``: ``{"sets": {name:
    {"judged": [...], "unparsed": k, "rows": the set's rows}}, "labels": {"verdicts", "truth"},
    "ragas": Ragas' scores (only with rag sets; each set with its ``rows``)}``."""
    from shipyard.evaluation.judge import JudgeCaps, judge_labels, judge_set
    from shipyard.evaluation.ragas_scoring import score_rag_sets
    from shipyard.runtimes.runtime import run_in_runtime

    spec = load_prepared(prepared_dir).get("judge") or {}
    caps = JudgeCaps(int(spec.get("max_tokens") or 16), int(spec.get("concurrency") or 4))
    max_rows = spec.get("max_rows")
    rubric = sorted((Path(prepared_dir) / RUBRIC).glob("*.jsonl")) if (Path(prepared_dir) / RUBRIC).is_dir() else []
    base = json.loads((Path(base_results) / ANSWERS).read_text()) if rubric else {}
    cand = json.loads((Path(candidate_results) / ANSWERS).read_text()) if rubric else {}
    rag = rag_inputs(prepared_dir, base_results, candidate_results)
    labels = _read_jsonl(Path(prepared_dir) / LABELS) if (Path(prepared_dir) / LABELS).is_file() else []
    out: dict[str, Any] = {"sets": {}, "labels": {"verdicts": [], "truth": [r["label"] for r in labels]}}
    for path in rubric:
        rows = _read_jsonl(path)
        n = min(len(rows), max_rows or len(rows))
        judged, unparsed = judge_set(base_url, model, rows[:n], base[path.stem][:n], cand[path.stem][:n], caps=caps)
        out["sets"][path.stem] = {"judged": judged, "unparsed": unparsed, "rows": len(rows)}
    if labels:
        out["labels"]["verdicts"] = judge_labels(base_url, model, labels, caps=caps)
    if rag:
        totals = {name: len(data["rows"]) for name, data in rag.items()}
        if max_rows:
            rag = {name: {key: value[:max_rows] for key, value in data.items()} for name, data in rag.items()}
        out["ragas"] = run_in_runtime("garak", score_rag_sets, base_url=base_url, model=model, sets=rag,
                                      max_tokens=int(spec.get("ragas_max_tokens") or 512),
                                      concurrency=caps.concurrency)
        for name, total in totals.items():
            out["ragas"]["sets"][name]["rows"] = total
    return out


def judge_eval_sets(prepared_dir: str, base_results: str, candidate_results: str, judge_model_dir: str,
                    out_path: str, judge_model: dict[str, str] | None = None) -> dict[str, Any]:
    """The judge (a vLLM server of ``judge_model_dir``, the resolved pinned judge model) on the
    prepared sets (:func:`judge_on_server`: rubric sets in both orders, the labelled slice, Ragas
    on the rag sets); writes and returns ``judged.json``, plus ``judge_model`` (``{"uri",
    "pinned_uri", "fingerprint"}``: which judge judged) when given."""
    from shipyard.serving.vllm_server import VLLMServer

    with VLLMServer(Path(judge_model_dir), served_model_name="shipyard-judge") as server:
        out = judge_on_server(server.base_url, server.served_model_name, prepared_dir, base_results, candidate_results)
    if judge_model:
        out["judge_model"] = dict(judge_model)
    atomic_write_text(out_path, json.dumps(out, indent=2))
    return out


def judged_model(uri: str, model_dir: str, pinned_uri: str = "", fingerprint: str = "") -> dict[str, str]:
    """Which judge a candidate's judge step serves, checked without fetching anything: ``model_dir``
    (the judge model resolve-model fetched once for the run) holds a model, and ``pinned_uri``
    (its metadata) is the judge ``uri`` of ``prepared.json``. Returns ``{"uri", "pinned_uri",
    "fingerprint"}`` for ``judged.json``; one line otherwise."""
    from shipyard.models.resolve import parse_model_uri

    field = "eval_sets.judge.model_uri"
    folder = Path(model_dir) if model_dir else None
    if folder is None or not (folder / "config.json").is_file():
        raise ShipyardError(field, f"the judge model was not handed to the judge step (no config.json in "
                            f"{model_dir or 'no folder'})", "run the judge step with the judge model resolve-model "
                            "fetched for the run (the pipeline wires it: pin-model, resolve-model, judge-eval-sets)")
    named = str(parse_model_uri(uri, field=field))
    if pinned_uri and pinned_uri != named:
        raise ShipyardError(field, f"the judge model handed to the judge step is {pinned_uri[:200]}, not {named[:200]}",
                            "resolve the judge named in eval_sets (the pipeline resolves prepare-eval-sets' answer)")
    return {"uri": uri, "pinned_uri": pinned_uri or named, "fingerprint": fingerprint}


def judge_step(prepared_dir: str, base_results: str, candidate_results: str, out_dir: str, model_dir: str = "",
               pinned_uri: str = "", fingerprint: str = "") -> dict[str, Any]:
    """The pipeline's judge step of one candidate: :func:`judge_eval_sets` into ``out_dir/judged.json``
    with the judge served from ``model_dir``, the judge model pinned (``pinned_uri``,
    ``fingerprint``) and fetched once for the run by pin-model and resolve-model: nothing is
    fetched here (:func:`judged_model` checks the folder is the judge ``prepared.json`` names).
    Without a rubric set, and without a rag set scored by a judge, it writes nothing and returns ``{}``."""
    uri = judge_model_uri(load_prepared(prepared_dir))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    if not uri:
        return {}
    model = judged_model(uri, model_dir, pinned_uri, fingerprint)
    return judge_eval_sets(prepared_dir, base_results, candidate_results, model_dir, str(Path(out_dir) / JUDGED),
                           judge_model=model)


def ragas_lines(scored: dict[str, Any]) -> list[str]:
    """The report's lines on a Ragas run (``judged.json``'s ``ragas``): the release and judge, the
    first error of each kind per set and metric, and each skipped metric with its reason."""
    lines = [f"Ragas {scored.get('ragas_version', '?')} with the judge {scored.get('judge_model', '?')} at temperature 0: "
             f"{', '.join(scored.get('metrics') or [])}"]
    for name, result in sorted((scored.get("sets") or {}).items()):
        for metric, errors in sorted((result.get("errors") or {}).items()):
            if errors:
                lines.append(f"{name} {metric}: not scored because " + "; ".join(errors[:3]))
    lines.extend(f"skipped {metric}: {why}" for metric, why in sorted((scored.get("skipped") or {}).items()))
    return lines


def read_judged(prepared: dict[str, Any], judged_path: str) -> tuple[dict[str, Any], dict[str, Any], list[str],
                                                                     dict[str, Any] | None]:
    """What the judge step wrote (``judged.json``) as the gate reads it: the rubric sets' judgements,
    the rag sets' Ragas scores (both with the judge's calibration), the report's Ragas lines and
    which judge judged. A rag set without a judge in ``eval_sets`` is not scored (a Ragas line says
    so); a set that needed the judge step and has no result is one line."""
    from shipyard.gates.eval_sets import RAGAS_NO_JUDGE, JudgedSet, RagasSet
    from shipyard.gates.judging import Judged, calibrate

    judged: dict[str, Any] = {}
    ragas: dict[str, Any] = {}
    rubric = [s for s in prepared["sets"] if s["form"] == "rubric"]
    rag = [s for s in prepared["sets"] if s["form"] == "rag"]
    judge = prepared.get("judge") or {}
    notes = [RAGAS_NO_JUDGE] if rag and not judge else []
    if not (rubric or (rag and judge)):
        return judged, ragas, notes, None
    if not judged_path or not Path(judged_path).is_file():
        what = [s["name"] for s in rubric] or [s["name"] for s in rag]
        raise ShipyardError("eval_sets", f"{'rubric' if rubric else 'rag'} set(s) {what} were not judged",
                            "run the judge step (judge_eval_sets) before deciding")
    data = json.loads(Path(judged_path).read_text())
    labels = data.get("labels") or {}
    calibration = calibrate(labels.get("verdicts") or None, labels.get("truth") or None,
                            float(judge.get("min_kappa", 0.6)))
    for s in rubric:
        done = data["sets"][s["name"]]
        judged[s["name"]] = JudgedSet([Judged(**j) for j in done["judged"]], calibration, s.get("margin"),
                                      rows=done.get("rows"))
    if rag:
        scored = data.get("ragas")
        if not scored:
            raise ShipyardError("eval_sets", f"rag set(s) {[s['name'] for s in rag]} were not scored by Ragas",
                                "run the judge step (judge_eval_sets), which scores them with the judge")
        missing = [s["name"] for s in rag if s["name"] not in scored["sets"]]
        if missing:
            raise ShipyardError("eval_sets", f"Ragas scored no answers of rag set(s) {missing}",
                                "run the judge step again on these prepared sets")
        for s in rag:
            done = scored["sets"][s["name"]]
            ragas[s["name"]] = RagasSet(done["scores"], calibration, s.get("margin"), rows=done.get("rows"))
        notes.extend(ragas_lines(scored))
    return judged, ragas, notes, data.get("judge_model")


def decide_eval_sets(prepared_dir: str, base_results: str, candidate_results: str, accuracy_thresholds: str = "",
                     judged_path: str = "", report_path: str = "", records_path: str = "") -> dict[str, Any]:
    """The per-set gate of one candidate (:func:`shipyard.gates.eval_sets.gate_eval_sets`), its
    Markdown report (``report_path``) and the per-sample records, base and candidate side by side,
    in MLflow's table format (``records_path``: log it as the step run's artifact). Returns
    ``{"passed", "reason", "metrics", "rows", "judged", "leaks", "ragas", "sets"}`` (a rag set also
    has one row per Ragas metric when ``eval_sets`` names a judge; without one the report says Ragas
    did not run) and, when rubric or rag sets were judged, ``judge_model`` (the judge's URI, pinned URI and content fingerprint); fails closed
    (``passed`` false with the reason) instead of raising."""
    from shipyard.gates.eval_sets import EvalSetsGate, gate_eval_sets, paired_records, report_doc
    from shipyard.gates.paired import load_samples
    from shipyard.gates.parity import check_parity
    from shipyard.gates.recovery import load_summary, parse_thresholds

    prepared: dict[str, Any] = {}
    judge_model: dict[str, Any] | None = None  # which judge judged the rubric sets (judged.json)
    try:
        prepared = load_prepared(prepared_dir)
        thresholds = parse_thresholds(accuracy_thresholds, "accuracy_thresholds")
        judged, ragas, ragas_notes, judge_model = read_judged(prepared, judged_path)
        manifest = prepared.get("manifest") or {"sets": {}}
        base = load_samples(base_results) if manifest["sets"] else {}
        cand = load_samples(candidate_results) if manifest["sets"] else {}
        if manifest["sets"]:  # unlike evaluations are refused, as by the accuracy gate
            base_summary = load_summary(base_results, "eval_sets base results")
            cand_summary = load_summary(candidate_results, "eval_sets candidate results")
            check_parity(base_summary, cand_summary, base, cand)
            if base_summary["config_hash"] != cand_summary["config_hash"]:
                raise ShipyardError("eval_sets", "base and candidate ran the sets with different eval configs (hash "
                                    f"{base_summary['config_hash'][:12]} vs {cand_summary['config_hash'][:12]})",
                                    "evaluate both from the same prepared sets with the same eval_config and backend")
        gate = gate_eval_sets(manifest, base, cand, thresholds, judged, [r["line"] for r in prepared.get("leaks") or []],
                              ragas, ragas_notes)
        if records_path:
            atomic_write_text(records_path, json.dumps(paired_records(manifest, base, cand, ragas), ensure_ascii=False))
    except ShipyardError as err:
        gate = EvalSetsGate(False, f"failed closed: {err}", [])
    except Exception as err:  # noqa: BLE001 - any surprise still means "do not promote"
        gate = EvalSetsGate(False, f"failed closed: unexpected {type(err).__name__}: {err}".splitlines()[0], [])
    if report_path:
        atomic_write_text(report_path, report_doc(gate, prepared.get("sets"), judge_model).to_markdown())
    return {**gate.to_dict(), "metrics": gate.metrics(), "sets": prepared.get("sets") or [],
            **({"judge_model": judge_model} if judge_model else {})}
