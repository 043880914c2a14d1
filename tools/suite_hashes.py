#!/usr/bin/env python3
"""Fill a suite manifest's content hashes: what a maintainer runs after editing `suites/*/suite.json`.

    python tools/suite_hashes.py suites/v0.1

Each pre-execution recipe is captured (torch needed; the master trace lands in the suite cache,
where `chakra suite run` finds it) and its master trace hashed, its provenance given the versions
it was made with; each post-execution path is hashed as it is. The manifest is rewritten atomically.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from chakra_trace.io.et import atomic_output  # noqa: E402
from chakra_trace.suite.inputs import capture_recipe, suite_cache, versions  # noqa: E402
from chakra_trace.suite.manifest import MANIFEST, content_sha256, load_suite  # noqa: E402


def main(folder: str) -> int:
    s = load_suite(folder)
    doc = s.to_dict()
    made = versions()
    for w, e in zip(doc["workloads"], s.workloads):
        if e.recipe is not None:
            tmp = suite_cache() / f".{e.name}.hashing.et"
            sha = capture_recipe(e.recipe, tmp)
            tmp.replace(suite_cache() / f"{sha}.master.et")
            w["provenance"] = {
                **w.get("provenance", {}),
                "versions": {k: made[k] for k in ("torch", "chakra-trace") if k in made},
            }
        else:
            sha = content_sha256(s.resolve(e))
        print(f"{e.name}: {sha}", flush=True)
        w["sha256"] = sha
    with atomic_output(Path(folder) / MANIFEST, compress=False) as f:
        f.write(json.dumps(doc, indent=1).encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "suites/v0.1"))
