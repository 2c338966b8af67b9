"""Calls to the Hugging Face Hub (``hf://`` models and adapters) within a deadline in all.

huggingface_hub's own timeouts bound each read only: a hub (or a proxy before it) that sends a
byte every few seconds would hold a pin or a download forever. Every call here ends within
``SHIPYARD_HF_TIMEOUT_S`` seconds in all (default 120), a file's download getting its bytes at
256 KiB/s on top (the size the hub lists for it); past it one line naming the setting (exit 3,
:func:`shipyard.core.net.call_within`). ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE``
are read as huggingface_hub reads them.

The files come over plain HTTP, not hf_xet (:func:`plain_http`): hf_xet moves a Xet-stored file in
Rust threads and sockets the deadline cannot see or shut (its own timeouts are per read, its retries
last minutes), so a call past its deadline would give up while the transfer went on.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from shipyard.core.env import env_seconds, hub_offline
from shipyard.core.errors import UnreachableError
from shipyard.core.net import call_within, transfer_deadline

#: the setting that bounds each call to the hub (seconds in all; a file's bytes at 256 KiB/s on top)
ENV_TIMEOUT = "SHIPYARD_HF_TIMEOUT_S"
#: how many files of a model download at once (each within its own deadline)
PARALLEL_FILES = 4


def hf_timeout_s() -> float:
    """The most one call to the hub may take before its bytes (``SHIPYARD_HF_TIMEOUT_S``, default 120)."""
    return env_seconds(ENV_TIMEOUT, 120.0)


class _Hub:
    """The owner of the hub calls' sockets: huggingface_hub's one shared HTTP client reuses them."""


#: the ``owner`` of every call to the hub (:func:`~shipyard.core.net.call_within`): a pooled
#: connection an earlier call left (huggingface_hub's one shared client) is shut at a later one's deadline
HUB_SOCKETS = _Hub()


#: huggingface_hub's switch for hf_xet (read once, when huggingface_hub is first imported)
ENV_DISABLE_XET = "HF_HUB_DISABLE_XET"


def plain_http() -> None:
    """Hub files over plain HTTP from here on in this process, not hf_xet, unless the user set
    ``HF_HUB_DISABLE_XET`` (any value: their choice stands, ``0`` trading the deadline for Xet's speed).

    huggingface_hub uses hf_xet for every Xet-stored file whenever it is installed and
    ``HF_HUB_DISABLE_XET`` is not true; hf_xet then moves the bytes in Rust threads and sockets that
    :func:`~shipyard.core.net.call_within` cannot shut, its own settings being per read
    (``HF_XET_CLIENT_READ_TIMEOUT``) and retries of minutes, and huggingface_hub keeps the download
    group that could abort it to itself. Over HTTP the same file comes from the same hub, in Python
    sockets the deadline shuts. Process-wide (huggingface_hub reads the flag at each download, from
    its ``constants``; a flag per call would race the parallel files): a step is a process of its
    own, and the environment is left as it was, so the processes it starts (vLLM) choose for themselves."""
    if os.environ.get(ENV_DISABLE_XET, "").strip():
        return
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_XET = True


def within(what: str, fn: Any, *args: Any, size: int | None = None, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` (a huggingface_hub call) within ``SHIPYARD_HF_TIMEOUT_S``, plus
    ``size`` bytes at 256 KiB/s, over plain HTTP (:func:`plain_http`); past it one line naming the setting."""
    deadline = transfer_deadline(hf_timeout_s(), size)
    plain_http()

    def late() -> UnreachableError:
        from huggingface_hub import constants

        return UnreachableError(ENV_TIMEOUT, f"the Hugging Face Hub at {constants.ENDPOINT} gave no whole answer to "
                                f"{what} within {round(deadline, 1):g} s", f"check the network (and HF_ENDPOINT), or "
                                f"raise {ENV_TIMEOUT} (seconds per call; a file gets 256 KiB/s on top)")

    return call_within(deadline, fn, *args, on_timeout=late, owner=HUB_SOCKETS, **kwargs)


def model_info(repo: str, revision: str | None, *, files_metadata: bool = False) -> Any:
    """The hub's ``ModelInfo`` of ``repo`` at ``revision`` (with each file's size when ``files_metadata``)."""
    hf_timeout_s()  # a bad setting is one line before anything is imported or contacted
    from huggingface_hub import HfApi

    api = HfApi(token=os.environ.get("HF_TOKEN") or None)
    return within(f"the model info of hf://{repo}", api.model_info, repo, revision=revision,
                  files_metadata=files_metadata)


def download(repo: str, revision: str | None, dest: Path) -> None:
    """The files of ``repo`` at ``revision`` into ``dest``: the commit and each file's size from
    the hub first, then each file within its own deadline (its bytes at 256 KiB/s on top).
    Offline (``HF_HUB_OFFLINE``): from the local cache, no network."""
    hf_timeout_s()
    from huggingface_hub import hf_hub_download, snapshot_download

    token = os.environ.get("HF_TOKEN") or None
    if hub_offline():
        within(f"hf://{repo} from the local cache", snapshot_download, repo_id=repo, revision=revision, local_dir=dest)
        return
    info = model_info(repo, revision, files_metadata=True)

    def fetch(sibling: Any) -> None:
        within(f"the download of hf://{repo}/{sibling.rfilename}", hf_hub_download, repo, sibling.rfilename,
               revision=info.sha, local_dir=dest, token=token, size=sibling.size)

    with ThreadPoolExecutor(max_workers=PARALLEL_FILES, thread_name_prefix="shipyard-hf") as pool:
        list(pool.map(fetch, info.siblings or []))
