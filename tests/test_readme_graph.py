"""The README's picture of the pipeline is the compiled pipeline's graph (``python -m
shipyard.pipelines.graph``): a task, loop or condition added, renamed or rewired changes it, and
this test then asks for the README's ``mermaid`` block to be regenerated."""

from __future__ import annotations

from pathlib import Path

from shipyard.pipelines.graph import mermaid

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_graph_is_the_compiled_pipeline() -> None:
    graph = mermaid("optimize-and-deploy")
    assert graph.startswith("flowchart LR\n") and "candidate_gates" in graph and "for_loop_" in graph
    assert f"```mermaid\n{graph}```" in README.read_text(), (
        "the README's pipeline picture is stale: replace its ```mermaid block with the output of "
        "`python -m shipyard.pipelines.graph`")


def test_the_parameter_tables_show_cluster_defaults_whole() -> None:
    """A default cut to 40 characters ("`{"tasks": ["arc_challenge", "hellaswa...`") cannot be
    copied; the generated tables show every default whole."""
    from shipyard.params.pipeline import readme_table

    table = readme_table("optimize-and-deploy", {})
    assert '"hellaswag", "winogrande"]' in table and "...`" not in table


def test_the_readme_states_the_prerequisites_and_the_license_matches_pyproject() -> None:
    import tomllib

    root = README.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    text = README.read_text()
    python = project["requires-python"].removeprefix(">=")
    assert f"**Python >= {python}**" in text and "GB of disk" in text and "`apt`" in text and "**root**" in text
    assert project["license"]["text"] == "Apache-2.0"
    licence = (root / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    for section in ("## Gates", "## Adding a recipe", "## Troubleshooting", "## Rollback",
                    "(components/gates/README.md)"):
        assert section in text, section


def test_the_first_screen_is_what_shipyard_does_the_two_commands_then_the_picture() -> None:
    """The README's first screen: one paragraph naming every gate (accuracy, your own eval sets,
    SLO, safety, the serving-configuration search, the verification of what was deployed), then
    "## Two commands" with the two commands, then the small hand-drawn picture; the compiled graph
    ("As compiled") comes after them."""
    text = README.read_text()
    head, _, rest = text.partition("\n## Two commands\n")
    assert rest, "the README has no '## Two commands' section"
    paragraphs = [p for p in head.split("\n\n") if p.strip()]
    assert paragraphs[0] == "# shipyard" and paragraphs[1].startswith("**"), paragraphs[:2]
    assert len(paragraphs) == 3, f"the opening is one paragraph, not {len(paragraphs) - 2}"
    opening = " ".join(paragraphs[2].split())
    for gate in ("**accuracy** gate", "your own eval sets", "`eval_sets`", "**SLO** gate",
                 "**safety** gate", "serving-configuration search", "**verified** once Ready",
                 "**champion/challenger** gate"):
        assert gate in opening, f"the opening paragraph does not name {gate!r}"
    commands = rest.index("bash .ci/setup && .venvs/base/bin/shipyard run --local")
    tests = rest.index("bash .ci/test\n")
    picture = rest.index("```mermaid\nflowchart LR\n    PF[pre-flight")
    compiled = rest.index("\n### As compiled\n")
    assert commands < tests < picture < compiled
    assert "\n## " not in rest[:picture], "another section comes between the two commands and the picture"
    assert rest.index("```mermaid") == picture, "the first picture is the hand-drawn one, not the compiled graph"
