"""Find a build function from a command line: `path/to/file.py:function` or `package.module:function`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ChakraError


def load_build(spec: str) -> Callable[..., Any]:
    """The function `spec` names: `FILE.py:NAME` (the file is imported as a module, its folder on
    sys.path while it loads so that it can import its neighbours) or `MODULE:NAME`."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ChakraError(f"{spec!r}: expected FILE.py:FUNCTION or MODULE:FUNCTION")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ChakraError(f"{target}: no such file")
        mod_name = f"_chakra_capture_{path.stem}"
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:  # pragma: no cover
            raise ChakraError(f"{target}: cannot be imported")
        module = importlib.util.module_from_spec(loader_spec)
        folder = str(path.resolve().parent)
        sys.path.insert(0, folder)
        sys.modules[mod_name] = module  # (dataclasses in the file look their module up)
        try:
            loader_spec.loader.exec_module(module)
        finally:
            if sys.path and sys.path[0] == folder:
                sys.path.pop(0)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise ChakraError(f"{target}: cannot import ({e})") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ChakraError(f"{spec}: {target} has no function {name!r}")
    return fn


__all__ = ["load_build"]
