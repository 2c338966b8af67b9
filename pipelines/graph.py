"""A pipeline's graph as a Mermaid flowchart, read from its compiled IR (the README's picture).

``python -m shipyard.pipelines.graph [PIPELINE]`` prints it. Every task is a box with its display
name (what the KFP UI shows); loops, conditions and the exit handler are boxes around their tasks;
an arrow is a dependency in the IR. GitHub renders the ``mermaid`` block as a picture, and
``tests/test_readme_graph.py`` checks that the README's block is what the compiled pipeline gives,
so the picture cannot drift.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from shipyard.pipelines import DEFAULT_PIPELINE, get_pipeline

#: names for KFP's structural components, which have no display name of their own
_STRUCTURE = {"exit-handler": "MLflow parent run open (exit handler)"}


def _id(component: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", component.removeprefix("comp-"))


def _branches(inner: dict[str, Any] | None) -> str:
    """A dsl.If/Else group's box: the eval backend's, or its branches' names ("either rubric sets or no rubric sets")."""
    names = sorted(str((t.get("taskInfo") or {}).get("name") or "") for t in ((inner or {}).get("tasks") or {}).values())
    if not names or any(n.endswith("-on-vllm") for n in names):
        return "eval backend: vLLM or hf"
    return "either " + " or ".join(n.replace("-", " ") for n in names)


def _label(task: dict[str, Any], component: str, inner: dict[str, Any] | None = None) -> str:
    name = str((task.get("taskInfo") or {}).get("name") or component)
    for prefix, label in _STRUCTURE.items():
        if re.fullmatch(rf"{prefix}-\d+", component.removeprefix("comp-")) and (
                name == component.removeprefix("comp-") or prefix == "exit-handler"):
            name = label
    bare = component.removeprefix("comp-")
    if name == "candidates" and bare.startswith("for-loop-"):
        name = "for each recipe (candidates, in parallel)"
    elif re.fullmatch(r"condition-\d+", bare):
        name = "if " + name.replace("-", " ")
    elif re.fullmatch(r"condition-branches-\d+", bare):
        name = _branches(inner)
    return name.replace('"', "'")


def mermaid(pipeline: str = DEFAULT_PIPELINE) -> str:
    """The Mermaid flowchart of ``pipeline`` (left to right: a wide, short picture), deterministic for a given IR."""
    from google.protobuf import json_format

    spec = json_format.MessageToDict(get_pipeline(pipeline).pipeline_spec)
    components = spec.get("components") or {}
    lines = ["flowchart LR"]
    edges: list[str] = []

    def walk(dag: dict[str, Any], indent: str) -> None:
        tasks = dag.get("tasks") or {}
        ids = {name: _id(t["componentRef"]["name"]) for name, t in tasks.items()}
        for name in sorted(tasks, key=lambda n: (len(tasks[n].get("dependentTasks") or []), n)):
            task = tasks[name]
            component = task["componentRef"]["name"]
            inner = (components.get(component) or {}).get("dag")
            node, label = ids[name], _label(task, component, inner)
            if inner:
                lines.append(f'{indent}subgraph {node}["{label}"]')
                walk(inner, indent + "  ")
                lines.append(f"{indent}end")
            else:
                lines.append(f'{indent}{node}["{label}"]')
            for dep in sorted(task.get("dependentTasks") or []):
                if dep in ids:
                    edges.append(f"  {ids[dep]} --> {node}")

    walk(spec["root"]["dag"], "  ")
    return "\n".join(lines + edges) + "\n"


if __name__ == "__main__":
    sys.stdout.write(mermaid(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_PIPELINE))
