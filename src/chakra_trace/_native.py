"""The optional C kernels (setup.py builds them when a compiler is present).

A kernel is used only when it was built for this package: setup.py compiles every kernel with
`ABI` and the hash of its C sources (`build_macros`), the kernel exports both (`ABI`, `SOURCE`),
and `load` refuses one whose values differ from what the package here expects. A kernel left
over from another build would otherwise load and could disagree with the Python side.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

#: The calling convention between the Python side and the kernels (arguments, results, dtypes).
#: Bump it whenever that changes: kernels built before the bump are then refused until rebuilt.
ABI = 1

#: Each kernel's C source, relative to this package; every kernel also includes `SHARED_HEADER`.
KERNELS = {
    "chakra_trace.schema._wire": "schema/_wire.c",
    "chakra_trace.io._kineto": "io/_kineto.c",
    "chakra_trace.io._host": "io/_host.c",
}
SHARED_HEADER = "_vec.h"
REBUILD = "rebuild with `pip install -e .` or `python setup.py build_ext --inplace`"
PURE = "CHAKRA_TRACE_PURE"
HERE = Path(__file__).resolve().parent


class StaleKernelWarning(RuntimeWarning):
    """A built kernel that was not built for this package: ignored, the numpy/Python path runs."""


@dataclass(frozen=True)
class KernelStatus:
    """Whether a kernel runs and, if not, why (what `chakra --version` prints)."""

    module: str
    active: bool
    file: str | None  # the built extension, where there is one
    reason: str = ""  # "" when active: "not built", "disabled by CHAKRA_TRACE_PURE", "refused: ..."


def source_hash(module: str) -> str | None:
    """SHA-256 of the kernel's C source and the shared header, or None where the package ships
    without them (then only the ABI can be checked)."""
    h = hashlib.sha256()
    for rel in (KERNELS[module], SHARED_HEADER):
        try:
            h.update(rel.encode() + b"\0" + (HERE / rel).read_bytes())
        except FileNotFoundError:
            return None
    return h.hexdigest()


def build_macros(module: str) -> list[tuple[str, str]]:
    """The `-D` macros a kernel is compiled with (setup.py): this package's ABI and the hash of
    the sources it is built from, which the kernel exports as `ABI` and `SOURCE`."""
    return [("CHAKRA_KERNEL_ABI", str(ABI)), ("CHAKRA_KERNEL_SOURCE", f'"{source_hash(module)}"')]


def _built_file(module: str) -> str | None:
    spec = importlib.util.find_spec(module)
    return spec.origin if spec is not None else None


def _probe(module: str):
    """(the kernel module or None, its status), without warning."""
    if os.environ.get(PURE):
        return None, KernelStatus(module, False, _built_file(module), f"disabled by {PURE}")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        return None, KernelStatus(module, False, None, "not built")
    except ImportError as e:  # a file that is no extension for this interpreter
        return None, KernelStatus(module, False, _built_file(module), f"refused: cannot import ({e})")
    abi, source = getattr(mod, "ABI", None), getattr(mod, "SOURCE", None)
    expected = source_hash(module)
    if abi != ABI:
        why = f"refused: stale (ABI {'none' if abi is None else abi}, expected {ABI})"
    elif expected is not None and source != expected:
        why = f"refused: stale (built from other sources: hash {str(source)[:12]}, the sources here {expected[:12]})"
    else:
        return mod, KernelStatus(module, True, mod.__file__)
    return None, KernelStatus(module, False, mod.__file__, why)


def load(module: str):
    """The kernel module (e.g. "chakra_trace.schema._wire"), or None when it was not built, was
    built for other sources or ABI (with one `StaleKernelWarning`), or CHAKRA_TRACE_PURE is set:
    callers then take their numpy/Python path, with the same results."""
    mod, st = _probe(module)
    if st.reason.startswith("refused"):
        warnings.warn(
            f"chakra_trace: C kernel {module} ({st.file}) {st.reason}; the numpy/Python path runs instead "
            f"(same results, slower); {REBUILD}",
            StaleKernelWarning,
            stacklevel=2,
        )
    return mod


def status() -> dict[str, KernelStatus]:
    """Every kernel's status, as `load` would find it now."""
    return {module: _probe(module)[1] for module in KERNELS}
