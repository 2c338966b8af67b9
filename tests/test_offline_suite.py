"""The offline suite's data: the committed JSON-lines files are what shipyard.evaluation.suite_data writes,
and every generated task is well-formed (unique questions, one right answer among distinct options,
answers spread over the positions). Pure Python: no lm-eval, no model. The
suite's own filters (``utils.contains_answer``, ``utils.first_word``) are tested here too."""

from __future__ import annotations

import collections
import json
import re

import pytest

from shipyard.evaluation import suite_data as GEN
from shipyard.evaluation.config import SUITE_DIR
from shipyard.evaluation.suite import utils as SUITE_UTILS

BUILT = GEN.build()


@pytest.mark.parametrize("name", sorted(BUILT))
def test_committed_data_is_what_the_generator_writes(name: str) -> None:
    assert (SUITE_DIR / name).read_text(encoding="utf-8") == GEN.render(BUILT[name]), (
        f"{name} differs: run .venvs/base/bin/python -m shipyard.evaluation.suite_data")


@pytest.mark.parametrize("name", sorted(BUILT))
def test_generated_task_is_well_formed(name: str) -> None:
    rows = BUILT[name]
    splits = collections.Counter(r["split"] for r in rows)
    assert splits["train"] == GEN.FEWSHOT and splits["test"] >= 150
    questions = [r["question"] for r in rows]
    assert len(set(questions)) == len(questions)
    if "choices" in rows[0]:
        for r in rows:
            assert len(r["choices"]) == 4 and len(set(r["choices"])) == 4, r
            assert 0 <= r["label"] < 4
        positions = collections.Counter(r["label"] for r in rows)
        assert min(positions.values()) > len(rows) / 8, positions  # no position favoured much
    else:
        assert all(r["answer"] for r in rows)


def test_each_yaml_states_its_item_count() -> None:
    """The comment at the top of every task YAML says how many items it has (kept in step with the data)."""
    for name, rows in BUILT.items():
        yaml = (SUITE_DIR / name.replace(".jsonl", ".yaml")).read_text(encoding="utf-8")
        test = sum(r["split"] == "test" for r in rows)
        assert f"{test} test items" in yaml.split("\ntask:", 1)[0], name


def test_opposites_never_offer_a_second_right_answer() -> None:
    opposite: dict[str, set[str]] = collections.defaultdict(set)
    for a, b in GEN.OPPOSITES:
        opposite[a].add(b)
        opposite[b].add(a)
    for r in BUILT["opposites_mc.jsonl"]:
        word = json.loads(json.dumps(r["question"])).split('"')[1]
        wrong = [c for i, c in enumerate(r["choices"]) if i != r["label"]]
        assert not set(wrong) & opposite[word], r


def test_every_function_a_suite_yaml_names_is_in_utils() -> None:
    """lm-eval resolves ``!function utils.<name>`` only when it runs the task: a renamed helper
    would fail there, on the evaluation step, not here."""
    named = {name for path in SUITE_DIR.glob("*.yaml")
             for name in re.findall(r"!function utils\.(\w+)", path.read_text(encoding="utf-8"))}
    assert named == {"load_jsonl", "contains_answer", "first_word"}
    assert all(callable(getattr(SUITE_UTILS, name, None)) for name in named)


def test_contains_answer_maps_a_generation_holding_the_answer_or_an_alias_to_the_answer() -> None:
    docs = [{"answer": "Paris"}, {"answer": "Rome", "aliases": ["Roma"]}, {"answer": "Oslo"}, {"answer": 42}]
    resps = [[" The capital is PARIS.", "Lyon"], ["Roma, of course"], ["Stockholm"], [None]]
    assert SUITE_UTILS.contains_answer(resps, docs) == [["Paris", "Lyon"], ["Rome"], ["Stockholm"], [""]]
    with pytest.raises(ValueError):  # one response list per document, never silently cut
        SUITE_UTILS.contains_answer(resps[:2], docs)


@pytest.mark.parametrize(("resp", "want"), [
    ('Cold", he said', "cold"),     # the first word is the answer, whatever follows
    ("  12. Chilly", "cold"),      # an alias, after what is not a word
    ("coldness", "coldness"),      # not the answer: kept, lower-case
    ("Not cold", "not"),
    ("don't know", "don't"),
    ("", ""),
    (None, ""),
])
def test_first_word_scores_the_first_word_generated(resp: object, want: str) -> None:
    docs = [{"answer": "cold", "aliases": ["chilly"]}]
    assert SUITE_UTILS.first_word([[resp]], docs) == [[want]]
