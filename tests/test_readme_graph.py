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


#: each measured figure of the README, with what must be said near it: the machine and how it was
#: measured (a benchmarks/ script that reproduces it, or "measured by hand" and how)
FIGURES = {
    "**9.4 GB of disk**": ("AMD EPYC", "measured by hand", "du -sh .venvs/*"),
    "**252 s**": ("Intel Xeon with AMX", "benchmarks/local_run_time.py"),
    "took 229 s": ("timed by hand",),
    "took 295 s": ("the same machine", "timed by hand"),
    "732 s on the Xeon": ("Xeon", "measured by hand"),
    "1,321 s measured": ("Intel Xeon with AMX", "benchmarks/test_suite_time.py"),
    "1,317 s measured": ("1,321 s run", "benchmarks/test_suite_time.py"),
    "3,481 s": ("AMD EPYC", "wall time"),
    "43 s by default": ("AMD EPYC", "measured by hand", "OMP_WAIT_POLICY=PASSIVE"),
    "39 s for a vLLM start": ("AMD EPYC", "tests/test_deploy_verify.py", "about 40 s"),
}


def test_each_figure_says_its_machine_and_how_it_was_measured() -> None:
    """Issue 33: every figure in the README says on what machine and how it was measured, and names
    the benchmarks/ script that reproduces it (or says it was measured by hand, and how); every script
    named exists, and those of the figures are listed in benchmarks/README.md."""
    import re

    text = " ".join(README.read_text().split())
    for figure, needs in FIGURES.items():
        assert text.count(figure) == 1, figure
        at = text.index(figure)
        near = text[max(0, at - 450):at + 450]
        for need in needs:
            assert need in near, f"the README's {figure!r} does not say {need!r} near it"
    listed = (README.parent / "benchmarks" / "README.md").read_text()
    for script in sorted({s for needs in FIGURES.values() for s in needs if s.startswith("benchmarks/")}):
        assert (README.parent / script).is_file(), script
        assert script.removeprefix("benchmarks/") in listed, f"benchmarks/README.md does not list {script}"
    for script in set(re.findall(r"benchmarks/\w+\.py", text)):
        assert (README.parent / script).is_file(), f"the README names {script}, which does not exist"


def test_the_suite_time_script_reads_each_process_time_from_the_test_commands_output() -> None:
    """benchmarks/test_suite_time.py reads the three processes' pytest summaries out of `.ci/test`'s
    output (as it prints them: the pipelines' report as it runs, then the other two under their
    headers, then the pipelines' repeated) and its "all three" seconds."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_time", README.parent / "benchmarks" / "test_suite_time.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ci = (README.parent / ".ci" / "test").read_text()
    assert all(header.removeprefix("==== ") in ci for _, header in module.GROUP_HEADERS)
    output = ("..s.  [ 50%]\n=== slowest 15 durations ===\n12.50s call tests/test_wheel.py::test_x\n"
              "21 passed, 1 skipped in 812.40s (0:13:32)\n\n"
              "==== slow tests, servers (pytest -m slow, all but the pipelines' files), run beside the above ====\n"
              "34 passed in 1,2.0s\n34 passed, 2 warnings in 1201.30s (0:20:01)\n"
              "==== the quick half (pytest -m 'not slow'), run beside the above ====\n"
              "2317 passed, 58 deselected in 1413.21s (0:23:33)\n"
              "==== slow tests, pipelines: durations and outcome, repeated from above ====\n"
              "21 passed, 1 skipped in 812.40s (0:13:32)\n"
              "==== pipelines: exit 0; servers: exit 0; quick: exit 0; all three: 1418 s ====\n")
    assert module.group_times(output) == {
        "groups": {"pipelines": {"outcome": "21 passed, 1 skipped", "seconds": 812.4},
                   "servers": {"outcome": "34 passed, 2 warnings", "seconds": 1201.3},
                   "quick": {"outcome": "2317 passed, 58 deselected", "seconds": 1413.21}},
        "all_three_s": 1418}
    cut = module.group_times(output.split("==== the quick half")[0])
    assert cut["groups"]["quick"] is None and cut["all_three_s"] is None and cut["groups"]["servers"]["seconds"] == 1201.3
