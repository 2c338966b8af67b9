"""Compile user eval sets into lm-eval tasks: shipyard does not reinvent the harness.

``mcq``, ``qa``, ``chat`` and ``rag`` sets (:mod:`shipyard.evaluation.eval_sets`) become one lm-eval
task YAML each, in one task folder, run by the evaluate step like the offline suite
(``eval_config.task_dir`` and ``tasks``; ``log_samples`` always on, so the accuracy gate's paired
statistics apply per row):

* ``mcq``: ``multiple_choice`` over the row's choices, metric ``acc`` (the gated one);
* ``qa`` / ``rag`` / ``chat``: ``generate_until`` (greedy), a filter that maps a generation matching
  the reference or an alias to the reference (``match``: exact, contains or regex:
  ``eval_set_utils``), then ``exact_match``. A ``rag`` prompt holds the recorded contexts, so only
  the generator varies; a ``chat`` conversation is written as a ``System:/User:/Assistant:``
  transcript ending in ``Assistant:`` (lm-eval 0.4 tasks take one text per document; with
  ``apply_chat_template`` that text becomes one user turn).

Each task's data sits next to its YAML (``<task>.jsonl``, read by the offline suite's loader with a
relative path), so the folder's content hash, which the eval config hash covers, is the same
wherever it is compiled: base and candidate evaluated from two compilations still compare.
``rubric`` sets are not lm-eval tasks: a judge decides them (:mod:`shipyard.gates.judging`).

:func:`validate_task_folder` loads the compiled folder with lm-eval's own task loading (needs
lm-eval: compress or vllm runtime) before any model runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir, package_dir
from shipyard.evaluation.config import parse_eval_config
from shipyard.evaluation.eval_sets import LMEVAL_FORMS, EvalSet, match_of
from shipyard.evaluation.tasks import check_task_folder

TAG = "shipyard_eval_sets"
MANIFEST = "eval_sets.json"
#: the lm-eval metric key the gate decides on, per form
GATED_METRIC = {"mcq": "acc,none", "qa": "exact_match,match", "chat": "exact_match,match", "rag": "exact_match,match"}
_STOP = {"qa": ["\n\n", "Question:"], "rag": ["\n\n", "Question:"], "chat": ["\n\n", "User:"]}


def task_name(set_name: str) -> str:
    """The lm-eval task of a set: ``shipyard_set_<name>`` ('-' becomes '_')."""
    return "shipyard_set_" + set_name.replace("-", "_")


def _chat_text(messages: list[dict[str, str]]) -> str:
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n".join(turns) + "\nAssistant:"


def document(form: str, row: dict[str, Any]) -> dict[str, Any]:
    """One compiled document: the prompt ``text``, and ``choices``/``label`` (mcq) or
    ``answer``/``aliases`` (generation forms); the row's ``id`` is kept to trace samples back."""
    doc: dict[str, Any] = {"id": str(row["id"]) if "id" in row else None}
    if form == "mcq":
        answer = row["answer"]
        doc.update(text=f"Question: {row['question']}\nAnswer:", choices=list(row["choices"]),
                   label=answer if isinstance(answer, int) else row["choices"].index(answer))
        return doc
    if form == "qa":
        text = f"Question: {row['prompt']}\nAnswer:"
    elif form == "rag":
        contexts = "\n\n".join(f"[{i}] {c}" for i, c in enumerate(row["retrieved_contexts"], start=1))
        text = f"Context:\n{contexts}\n\nQuestion: {row['user_input']}\nAnswer:"
    else:
        text = _chat_text(row["messages"])
    doc.update(text=text, answer=row["reference"], aliases=list(row.get("aliases") or []))
    return doc


def _q(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def task_yaml(eval_set: EvalSet) -> str:
    """The lm-eval task YAML of a set (``!function`` tags refer to the folder's ``utils.py``)."""
    form, name = eval_set.form, task_name(eval_set.name)
    head = [
        f"# shipyard eval set {eval_set.name!r} ({form}, {len(eval_set.rows)} rows), compiled from {eval_set.spec.uri}",
        f"# sha256 {eval_set.sha256}: do not edit, compile again (shipyard.evaluation.eval_set_tasks)",
        f"task: {name}",
        f"tag: {TAG}",
        "custom_dataset: !function utils.load_jsonl",
        "dataset_kwargs:",
        f"  data_file: {name}.jsonl",
        "test_split: test",
        'doc_to_text: "{{text}}"',
    ]
    if form == "mcq":
        body = [
            "output_type: multiple_choice",
            'doc_to_choice: "{{choices}}"',
            "doc_to_target: label",
            "metric_list:",
            "  - metric: acc",
            "    aggregation: mean",
            "    higher_is_better: true",
        ]
    else:
        body = [
            "output_type: generate_until",
            'doc_to_target: "{{answer}}"',
            "generation_kwargs:",
            f"  until: {_q(_STOP[form])}",
            f"  max_gen_toks: {eval_set.spec.max_gen_toks}",
            "  do_sample: false",
            "filter_list:",
            "  - name: match",
            "    filter:",
            "      - function: custom",
            f"        filter_fn: !function utils.match_{match_of(eval_set.spec)}",
            "      - function: take_first",
            "metric_list:",
            "  - metric: exact_match",
            "    aggregation: mean",
            "    higher_is_better: true",
            "    ignore_case: true",
            "    ignore_punctuation: true",
        ]
    tail = ["metadata:", "  version: 1.0", f"  eval_set_sha256: {eval_set.sha256}"]
    return "\n".join(head + body + tail) + "\n"


def compile_eval_sets(sets: list[EvalSet], out_dir: str | Path) -> dict[str, Any]:
    """Write the task folder of every lm-eval form set into ``out_dir`` (whole or not at all):
    ``utils.py``, ``<task>.yaml`` and ``<task>.jsonl`` per set, and ``eval_sets.json`` (the
    manifest: set -> task, metric key, sha256, rows). Returns the manifest."""
    compiled = [s for s in sets if s.form in LMEVAL_FORMS]
    if not compiled:
        raise ShipyardError("eval_sets", "holds no mcq, qa, chat or rag set to run with lm-eval",
                            "rubric sets are judged, not compiled")
    names: dict[str, str] = {}
    for s in compiled:
        if task_name(s.name) in names:
            raise ShipyardError(f"eval_sets.{s.name}", f"compiles to the same task as {names[task_name(s.name)]!r}",
                                "give the sets names that differ in more than '-' and '_'")
        names[task_name(s.name)] = s.name
    manifest: dict[str, Any] = {"format": "shipyard.eval_sets/v1", "tag": TAG, "sets": {}}
    with atomic_dir(out_dir) as tmp:
        shutil.copyfile(package_dir("shipyard.evaluation") / "eval_set_utils.py", tmp / "utils.py")
        for s in compiled:
            name = task_name(s.name)
            (tmp / f"{name}.yaml").write_text(task_yaml(s), encoding="utf-8")
            with open(tmp / f"{name}.jsonl", "w", encoding="utf-8") as fh:
                for row in s.rows:
                    fh.write(json.dumps(document(s.form, row), ensure_ascii=False, sort_keys=True) + "\n")
            manifest["sets"][s.name] = {"task": name, "form": s.form, "metric": GATED_METRIC[s.form],
                                        "rows": len(s.rows), "sha256": s.sha256, "margin": s.spec.margin,
                                        "match": match_of(s.spec)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    return manifest


def eval_config_for(task_dir: str | Path, manifest: dict[str, Any], base_config: str = "") -> str:
    """The eval config that runs the compiled sets: the pipeline's ``eval_config`` (seed, batch size,
    chat template, backend) with ``tasks`` = the sets' tasks, ``task_dir`` = the folder, every row
    (no ``limit``), no few-shot and ``log_samples`` on."""
    cfg = parse_eval_config(base_config).to_dict()
    cfg.update(tasks=[entry["task"] for entry in manifest["sets"].values()], task_dir=str(task_dir), limit=None,
               num_fewshot=0, log_samples=True)
    cfg = {k: v for k, v in cfg.items() if v is not None and not (k == "gen_kwargs" and not v)}
    parse_eval_config(cfg)
    return json.dumps(cfg, sort_keys=True)


def validate_task_folder(task_dir: str) -> dict[str, int]:
    """Load every task of a compiled folder with lm-eval's own loader (``TaskManager`` and
    ``get_task_dict``: YAML, ``!function`` filters, the dataset); ``{task: documents}``. Runs where
    lm-eval is installed: ``run_in_runtime("compress", validate_task_folder, task_dir=...)``."""
    from lm_eval.tasks import TaskManager, get_task_dict

    folder = Path(task_dir)
    names = [n for n in check_task_folder(folder) if n != TAG]
    manager = TaskManager(include_path=[str(folder)], include_defaults=False)
    try:
        tasks = get_task_dict(names, manager)
    except Exception as err:  # lm-eval raises ValueError/KeyError/TypeError on a task it cannot build
        first = " ".join(str(err).split())[:200]
        raise ShipyardError("eval_sets", f"lm-eval cannot load the compiled tasks: {type(err).__name__}: {first}",
                            "report this: the compiled YAML should always load") from None
    out: dict[str, int] = {}
    for name, task in tasks.items():
        key = getattr(name, "group_name", None) or str(name)
        out[key] = len(list(task.eval_docs))
    missing = sorted(set(names) - set(out))
    if missing:
        raise ShipyardError("eval_sets", f"lm-eval did not load the compiled tasks {missing}", "report this")
    return out
