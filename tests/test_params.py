"""The parameter surface is written once: signature, KFP descriptions, README table and the
pre-flight component all come from shipyard.params.pipeline."""

import inspect
from pathlib import Path

import pytest

from shipyard.params.pipeline import PIPELINE_PARAMS, REQUIRED, render_readme
from shipyard.pipelines import PIPELINES, get_pipeline

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_signature_and_descriptions_come_from_the_params(name: str) -> None:
    pipeline = get_pipeline(name)
    sig = inspect.signature(pipeline.pipeline_func)
    spec = {p.name: p for p in PIPELINE_PARAMS[name]}
    assert set(sig.parameters) == set(spec)
    inputs = pipeline.component_spec.inputs
    for pname, param in spec.items():
        assert sig.parameters[pname].annotation is param.type
        assert inputs[pname].description == param.help
        if param.default is REQUIRED:
            assert not inputs[pname].optional
        else:
            assert inputs[pname].default == param.default


def test_readme_tables_match_the_params() -> None:
    text = README.read_text()
    assert render_readme(text) == text, "run: python -m shipyard.params.pipeline --write README.md"
    assert "<!-- parameters:optimize-and-deploy" in text and "<!-- parameters:promote" in text


def test_preflight_component_takes_every_parameter() -> None:
    from shipyard.components.preflight.component import preflight

    accepted = set(preflight.component_spec.inputs)
    for params in PIPELINE_PARAMS.values():
        for p in params:
            assert p.name in accepted, p.name
            assert preflight.component_spec.inputs[p.name].type == {
                str: "String", int: "Integer", float: "Float", bool: "Boolean", list: "List"}[p.type]


def test_each_check_is_named_by_its_declaration() -> None:
    """Each parameter's value check sits beside its declaration and is named by it (``check=``):
    no check function is left that no declaration names, and the pre-flight runs the named one."""
    from shipyard.core.errors import ShipyardError
    from shipyard.params import pipeline
    from shipyard.params.checks import check_values

    defined = {name for name in vars(pipeline) if name.startswith("_check_")}
    named = {p.check.__name__ for p in pipeline.BY_NAME.values() if p.check is not None}
    assert defined == named
    assert pipeline.BY_NAME["seed"].check is pipeline.BY_NAME["max_seq_length"].check
    with pytest.raises(ShipyardError, match="^package_mode: unknown mode 'zip'"):
        check_values({"package_mode": "zip"})


def test_each_credential_fix_is_declared_and_refuses_before_the_check() -> None:
    """A URI-like parameter declares where its credentials go (``credential_fix=``): the pre-flight
    refuses a value carrying them with that fix, before the value's own check, never echoing them."""
    from shipyard.core.errors import ShipyardError
    from shipyard.params.checks import check_values
    from shipyard.params.pipeline import BY_NAME

    declared = {p.name for p in BY_NAME.values() if p.credential_fix}
    assert {"tracking_uri", "calibration_dataset", "eval_sets", "modelcar_base_image"} <= declared
    for name in sorted(declared):
        with pytest.raises(ShipyardError) as err:
            check_values({name: "https://bob:hunter2@example.com/x"})
        assert (err.value.field, err.value.fix) == (name, BY_NAME[name].credential_fix)
        assert "hunter2" not in str(err.value)
