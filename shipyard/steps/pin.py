"""Pin a model URI to what it names right now, so that KFP caches ``resolve-model`` (and every
step downstream of its artifact) by the model's content, never by a URI string that can move.

KFP's cache key is the task's inputs: ``resolve-model`` cached on ``hf://org/name`` would hand a
scheduled run last week's weights after the hub repository moved on. :func:`pin_model` runs in
an uncached task before it and returns:

* ``uri``: ``hf://org/name@<commit sha>`` for a hub model named by branch, tag or nothing
  (the revision the hub serves now); every other URI unchanged;
* ``fingerprint``: what the content is: the hub commit, a sha256 over the S3 objects' keys,
  ETags and sizes, over a PVC or local folder's file names, sizes and modification times, the
  OCI digest, or the embedded model's name.

``resolve-model`` takes both as inputs, so its cache key changes exactly when the model does.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from shipyard.core.env import hub_offline
from shipyard.core.errors import ShipyardError
from shipyard.models import s3
from shipyard.models.resolve import ModelURI, parse_model_uri, pvc_root

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _digest(rows: list[tuple[Any, ...]]) -> str:
    h = hashlib.sha256()
    for row in sorted(rows):
        h.update("\0".join(map(str, row)).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def _folder_fingerprint(folder: Path, field: str = "model_uri") -> str:
    if not folder.is_dir():
        raise ShipyardError(field, f"{folder} does not exist (or is not mounted)",
                            "give an existing model folder; for pvc:// list the claim in pvc.claims of the cluster config")
    rows = [(str(p.relative_to(folder)), st.st_size, st.st_mtime_ns)
            for p in folder.rglob("*") if p.is_file() for st in (p.stat(),)]
    if not rows:
        raise ShipyardError(field, f"{folder} is empty", "point at the folder that holds config.json")
    return _digest(rows)


def _hf_commit(parsed: ModelURI, field: str = "model_uri") -> str:
    from shipyard.models.hub import model_info

    try:
        info = model_info(parsed.location, parsed.revision)
    except ShipyardError:  # a bad SHIPYARD_HF_TIMEOUT_S, or past it: one line naming the setting
        raise
    except Exception as err:  # network errors, 401/404 from the hub
        raise ShipyardError(field, f"cannot read the current revision of hf://{parsed.location}: "
                            f"{type(err).__name__}: {err}".splitlines()[0],
                            "check the name, HF_TOKEN and network, or pin it: hf://ORG/NAME@<commit sha>") from None
    if not info.sha:
        raise ShipyardError(field, f"the hub gave no commit for hf://{parsed.location}",
                            "pin it: hf://ORG/NAME@<commit sha>")
    return str(info.sha)


def _s3_fingerprint(uri: str, field: str = "model_uri") -> str:
    config = s3.load_config()
    bucket, prefix = s3.parse_s3_uri(uri, field)
    try:
        objects = [o for o in s3.client(config).list_objects(bucket, prefix=f"{prefix}/", recursive=True)
                   if not o.is_dir]
    except Exception as err:
        raise s3._s3_error(err, uri, config) from None
    if not objects:
        raise ShipyardError(field, f"no objects under {uri}", "check the bucket and prefix (upload the model first)")
    return _digest([(o.object_name, (o.etag or "").strip('"'), o.size) for o in objects])


def pin_model(uri: str, field: str = "model_uri") -> dict[str, Any]:
    """``uri`` pinned to its current content: ``{"uri", "fingerprint", "moved_from"}`` (see the
    module doc). ``moved_from`` is the revision the URI named (``""`` when already pinned);
    ``field``: the parameter an error names (``eval_sets.judge.model_uri`` for the judge)."""
    parsed = parse_model_uri(uri, field=field)
    moved_from = ""
    if parsed.scheme == "hf":
        if parsed.revision and _COMMIT.match(parsed.revision):
            commit = parsed.revision
        elif hub_offline():
            raise ShipyardError(field, f"hf://{parsed.location}@{parsed.revision or 'main'} can move and the hub "
                                "is offline (HF_HUB_OFFLINE), so it cannot be pinned",
                                "pin it: hf://ORG/NAME@<commit sha>")
        else:
            commit = _hf_commit(parsed, field)
            moved_from = parsed.revision or "main"
        pinned = ModelURI("hf", parsed.location, commit)
        return {"uri": str(pinned), "fingerprint": f"hf:{commit}", "moved_from": moved_from}
    if parsed.scheme == "s3":
        fingerprint = _s3_fingerprint(str(parsed), field)
    elif parsed.scheme == "pvc":
        fingerprint = _folder_fingerprint(pvc_root() / parsed.location, field)
    elif parsed.scheme == "file":
        fingerprint = _folder_fingerprint(Path(parsed.location), field)
    elif parsed.scheme == "oci":
        fingerprint = parsed.location.rsplit("@", 1)[-1]
    else:  # embedded: shipped inside shipyard's wheel, whose code is hashed into the image tag
        fingerprint = f"embedded:{parsed.location}"
    return {"uri": str(parsed), "fingerprint": fingerprint, "moved_from": moved_from}
