"""The offline suite's data: the committed JSON-lines files are what shipyard.evaluation.suite_data writes,
and every generated task is well-formed (unique questions, one right answer among distinct options,
answers spread over the positions). Pure Python: no lm-eval, no model."""

from __future__ import annotations

import collections
import json

import pytest

from shipyard.evaluation import suite_data as GEN
from shipyard.evaluation.config import SUITE_DIR

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
