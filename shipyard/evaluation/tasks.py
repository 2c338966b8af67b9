"""Task resolution: the offline suite, a user's task folder and lm-eval's own tasks by name.

lm-eval silently skips a YAML it cannot parse and fails late on unknown names, so shipyard
checks the task folders and the requested names first and says plainly what is wrong.
Needs lm-eval (compress or vllm runtime).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from shipyard.core.errors import ShipyardError
from shipyard.evaluation.config import SUITE_DIR, EvalConfig

TASK_KEYS = ("task", "group", "tag", "include")


def check_task_folder(folder: Path) -> list[str]:
    """Parse every YAML under ``folder`` the way lm-eval does; return the task/group/tag names.

    A file that is not valid YAML, is not a mapping, names no task/group or points at a missing
    ``!function`` module is refused with a one-line error naming the file.
    """
    from lm_eval.tasks._yaml_loader import load_yaml

    field = "eval_config.task_dir" if folder != SUITE_DIR else "offline suite"
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and "__pycache__" not in p.parts)
    if not files:
        raise ShipyardError(field, f"{folder} holds no task YAML (*.yaml)", "add lm-eval task YAMLs to the folder")
    names: list[str] = []
    for path in files:
        try:
            cfg = load_yaml(path, resolve_func=False, recursive=True)
        except Exception as err:  # yaml.YAMLError, ValueError, OSError from an include
            first = " ".join(str(err).split())[:200]
            raise ShipyardError(field, f"{path.name} is not a valid task YAML: {type(err).__name__}: {first}",
                                "fix the YAML syntax (see lm-eval's task guide)") from None
        if not any(key in cfg for key in TASK_KEYS):
            raise ShipyardError(field, f"{path.name} names no task or group (no 'task:' or 'group:' key)",
                                "add 'task: <name>' to the YAML")
        _check_functions(path, field)
        for key in ("task", "group"):
            if isinstance(cfg.get(key), str):
                names.append(cfg[key])
        tags = cfg.get("tag") or []
        names.extend([tags] if isinstance(tags, str) else [t for t in tags if isinstance(t, str)])
    return sorted(set(names))


def _function_refs(path: Path) -> list[str]:
    """The ``!function mod.fn`` references of a task YAML, from its node graph (not from comments,
    nor from plain strings that happen to start with the folder's path)."""
    import yaml

    refs: list[str] = []
    seen: set[int] = set()
    stack = [yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode) and node.tag == "!function":
            refs.append(node.value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(item for pair in node.value for item in pair)
    return refs


def _importable(module: str) -> bool:
    """True when ``module`` can be imported here (lm-eval's second place to look for a function)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _check_functions(path: Path, field: str) -> None:
    """Each ``!function pkg.mod.fn`` must resolve as lm-eval resolves it: ``pkg/mod.py`` beside the
    YAML, else an importable ``pkg.mod``."""
    for ref in _function_refs(path):
        module = ref.rpartition(".")[0]
        if not module:
            raise ShipyardError(field, f"{path.name} references !function {ref}, which names no module",
                                "write !function <module>.<function>, e.g. utils.process_docs")
        local = module.replace(".", "/") + ".py"
        if not (path.parent / local).is_file() and not _importable(module):
            raise ShipyardError(field, f"{path.name} references {ref} but {local} is missing",
                                f"add {local} next to {path.name}")


def task_manager_for(cfg: EvalConfig) -> Any:
    """A ``TaskManager`` that knows every requested task; unknown names are refused.

    The offline suite and ``task_dir`` are indexed first; lm-eval's built-in tasks are added
    only when a requested name is not local (indexing them all takes a few seconds).
    """
    from lm_eval.tasks import TaskManager

    local: list[str] = []
    for folder in cfg.task_dirs():
        local.extend(check_task_folder(folder))
    dirs = [str(d) for d in cfg.task_dirs()]
    if all(name in local for name in cfg.tasks):
        return TaskManager(include_path=dirs, include_defaults=False)
    manager = TaskManager(include_path=dirs, include_defaults=True)
    known = set(manager.all_tasks)
    for name in cfg.tasks:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=3)
            hint = f"; did you mean {close}?" if close else ""
            raise ShipyardError(
                "eval_config.tasks",
                f"unknown task {name!r}{hint} (local tasks: {sorted(set(local))})",
                "use a local task, a task from task_dir, or a standard lm-eval task name (`lm-eval ls tasks`)",
            )
    return manager
