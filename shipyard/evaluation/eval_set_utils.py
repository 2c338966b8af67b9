"""Helpers the compiled eval-set task YAMLs reference with ``!function utils.<name>``.

:mod:`shipyard.evaluation.eval_set_tasks` copies this file into every compiled task folder as
``utils.py`` (lm-eval imports a ``!function`` module from the YAML's own folder), so it imports
nothing from shipyard. ``load_jsonl`` is the offline suite's loader (a JSON-lines file next to the
YAML, relative, so the folder's content hash does not depend on where it was written); the three
filters map a generation to the reference when it matches the reference or an alias, so that
lm-eval's ``exact_match`` against the reference scores "matched":

* ``match_exact``: equal after lower-casing and trimming spaces and punctuation;
* ``match_contains``: the reference or an alias occurs in the generation (case-insensitive);
* ``match_regex``: the reference or an alias, as a regular expression, is found in the generation
  (case-insensitive).
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_jsonl(data_file: str, **_: Any) -> Any:
    """Load ``data_file`` (relative to this folder) as a ``datasets.DatasetDict`` with one ``test`` split."""
    import datasets

    path = Path(data_file)
    if not path.is_absolute():
        path = HERE / path
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def _answers(doc: dict[str, Any]) -> list[str]:
    return [str(doc["answer"]), *[str(a) for a in doc.get("aliases") or []]]


def _normal(text: str) -> str:
    return text.strip().strip(string.punctuation + " \t\n").lower()


def _map(resps: Any, docs: Any, hit: Any) -> list[list[str]]:
    out = []
    for inst, doc in zip(resps, docs, strict=True):
        answers = _answers(doc)
        out.append([answers[0] if any(hit(r if isinstance(r, str) else "", a) for a in answers)
                    else (r if isinstance(r, str) else "") for r in inst])
    return out


def match_exact(resps: Any, docs: Any) -> list[list[str]]:
    """The reference when the generation equals it or an alias (case, surrounding spaces and punctuation aside)."""
    return _map(resps, docs, lambda text, answer: _normal(text) == _normal(answer))


def match_contains(resps: Any, docs: Any) -> list[list[str]]:
    """The reference when the generation contains it or an alias (case-insensitive)."""
    return _map(resps, docs, lambda text, answer: answer.lower() in text.lower())


def match_regex(resps: Any, docs: Any) -> list[list[str]]:
    """The reference when the reference or an alias, as a regular expression, is found in the generation."""
    return _map(resps, docs, lambda text, answer: re.search(answer, text, flags=re.IGNORECASE) is not None)
