"""Time shipyard's registry push against a plain `skopeo copy` of the same OCI layout.

Builds a modelcar layout from a model folder (``--model``) or a synthetic one of ``--size-mb``
random weights, then for each repeat starts a fresh local registry (Debian ``docker-registry``)
per tool, pushes, and prints the times and the ratio shipyard/skopeo. Both must end with the
same manifest digest in the registry.

    .venvs/base/bin/python benchmarks/push_vs_skopeo.py --size-mb 512 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from shipyard.oci.modelcar import build_modelcar
from shipyard.oci.transfer import push_layout
from shipyard.testing.registry import LocalRegistry


def synthetic_model(folder: Path, size_mb: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (folder / "tokenizer.json").write_text("{}")
    shard = 1 << 20
    with open(folder / "model.safetensors", "wb") as fh:
        for _ in range(size_mb):
            fh.write(os.urandom(shard))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: synthetic)")
    parser.add_argument("--size-mb", type=int, default=256, help="synthetic weights size in MiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compression", default="gzip", choices=["gzip", "none"])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="shipyard-bench-") as tmp:
        work = Path(tmp)
        model = Path(args.model) if args.model else synthetic_model(work / "model", args.size_mb)
        t0 = time.perf_counter()
        built = build_modelcar(model, work / "layout", tag="bench", compression=args.compression)
        build_s = time.perf_counter() - t0
        size = built["size_bytes"]
        print(f"layout: {size / 2**20:.1f} MiB in {len(built['layers'])} layers ({args.compression}), "
              f"build {build_s:.2f} s ({size / 2**20 / build_s:.1f} MiB/s), digest {built['digest']}")
        ours, theirs = [], []
        for i in range(args.repeats):
            with LocalRegistry() as reg:
                t0 = time.perf_counter()
                pushed = push_layout(work / "layout", reg.address, "bench/shipyard", "bench")
                ours.append(time.perf_counter() - t0)
                assert pushed["digest"] == built["digest"]
            with LocalRegistry() as reg:
                t0 = time.perf_counter()
                subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", f"oci:{work / 'layout'}:bench",
                                f"docker://{reg.address}/bench/skopeo:bench"], check=True)
                theirs.append(time.perf_counter() - t0)
                digest = json.loads(subprocess.run(
                    ["skopeo", "inspect", "--tls-verify=false", f"docker://{reg.address}/bench/skopeo:bench"],
                    check=True, capture_output=True, text=True).stdout)["Digest"]
                assert digest == built["digest"], f"skopeo pushed {digest}, shipyard {built['digest']}"
            print(f"run {i + 1}: shipyard {ours[-1]:.2f} s, skopeo {theirs[-1]:.2f} s")
        a, b = statistics.median(ours), statistics.median(theirs)
        print("| tool | median push (s) | MiB/s |")
        print("|---|---:|---:|")
        print(f"| shipyard push_layout | {a:.2f} | {size / 2**20 / a:.1f} |")
        print(f"| skopeo copy | {b:.2f} | {size / 2**20 / b:.1f} |")
        print(f"ratio shipyard/skopeo: {a / b:.2f}")


if __name__ == "__main__":
    main()
