"""A workload's trace made ready to simulate, and proved to be the one the suite names.

Post-execution traces are files in the suite (or the repository's recorded corpus): their bytes
must hash to the manifest's sha256. Pre-execution traces are large, so the suite keeps a recipe
(a model this tool ships, its config, batch, sequence, dtype, optimizer) and the hash of the
master trace `chakra capture` makes from it: captured once into the cache folder
(`io.cache.cache_dir`), and again only when the cached copy is missing or does not match. A
capture whose bytes differ from the manifest's (another PyTorch, another tool version) is refused:
a closed-division result must simulate exactly the suite's traces.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path

from ..capture import capture, load_build
from ..errors import ChakraError
from ..io.cache import cache_dir
from ..io.et import write_trace
from .manifest import MODELS, Entry, Suite, SuiteError, content_sha256


def versions() -> dict[str, str]:
    """The tool and runtime versions a trace or a result was made with."""
    out = {"python": platform.python_version()}
    for pkg in ("chakra-trace", "torch", "numpy", "protobuf"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def suite_cache() -> Path:
    return Path(os.environ.get("CHAKRA_SUITE_CACHE") or cache_dir() / "suite")


def capture_recipe(recipe: dict, out: Path) -> str:
    """Capture a recipe's master trace into ``out`` (atomically); its sha256."""
    try:
        build = load_build(f"{MODELS[recipe['model']]}:build")
        cap = capture(
            build,
            recipe.get("config", {}),
            batch=recipe["batch"],
            seq=recipe["seq"],
            dtype=recipe.get("dtype", "bfloat16"),
            optimizer=recipe.get("optimizer", "adamw"),
            fold_views=True,
        )
    except ImportError as e:
        raise SuiteError(
            f"pre-execution workloads are captured with torch ({e}): pip install 'chakra-trace[collect]'"
        ) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(cap.trace, out)
    return content_sha256(out)


def materialize(suite: Suite, e: Entry, *, refresh: bool = False) -> dict:
    """The sweep workload definition (`sweep.evaluate.build_workload`) of entry ``e``, its input
    proved to hash to the manifest's sha256; SuiteError naming the workload otherwise."""
    if e.path is not None:
        p = suite.resolve(e)
        got = content_sha256(p)
        if got != e.sha256:
            raise SuiteError(
                f"workload {e.name!r}: {p} hashes to {got[:16]}..., the suite says {e.sha256[:16]}...: "
                "its trace is not the suite's"
            )
        return {"path": str(p)}
    assert e.recipe is not None
    master = suite_cache() / f"{e.sha256}.master.et"
    if refresh or not master.is_file() or content_sha256(master) != e.sha256:
        tmp = master.with_name(f".{master.name}.{os.getpid()}.capture")
        try:
            got = capture_recipe(e.recipe, tmp)
            if got != e.sha256:
                made = versions()
                raise SuiteError(
                    f"workload {e.name!r}: its recipe captured a master trace hashing to {got[:16]}..., the "
                    f"suite says {e.sha256[:16]}... (captured with torch {made.get('torch', '?')}, chakra-trace "
                    f"{made.get('chakra-trace', '?')}; the suite's traces were made with "
                    f"{_made_with(e)}): a closed result needs the suite's traces"
                )
            os.replace(tmp, master)
        except ChakraError:
            raise
        finally:
            tmp.unlink(missing_ok=True)
    return {"master": str(master), "plan": dict(e.recipe.get("plan", {}))}


def _made_with(e: Entry) -> str:
    v = e.provenance.get("versions") or {}
    return ", ".join(f"{k} {v[k]}" for k in ("torch", "chakra-trace") if k in v) or "versions not recorded"
