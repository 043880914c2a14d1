"""Bootstrap that `chakra collect` puts first on the job's PYTHONPATH (standard library only).

Python imports `sitecustomize` at start-up, so every Python process of the job runs this:

1. It runs the `sitecustomize` that this one shadows, if any (the next one on sys.path).
2. When CHAKRA_COLLECT_DIR is set, it waits for `torch.optim.optimizer` to be imported (a
   meta-path finder; torch itself is not imported here) and registers a global optimizer step
   post-hook. At the first optimizer step the hook loads the recorder
   (`chakra_trace/collect/_inject.py` from CHAKRA_COLLECT_PKG, by file path, so that the job's
   Python needs no chakra_trace install) and recording starts.

Nothing here may break the job: errors are printed on stderr and the job goes on.
"""

import os
import sys

TYPE_CHECKING = False  # mypy takes it as True; `typing` is not imported at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal


def _warn(msg):
    try:
        sys.stderr.write(f"chakra collect: {msg}\n")
    except Exception:
        pass


def _chain():
    """Run the sitecustomize that this module shadows."""
    import importlib

    here = os.path.dirname(os.path.realpath(__file__))
    me = sys.modules.get(__name__)

    def ours(p):
        try:
            return bool(p) and os.path.realpath(p) == here
        except Exception:
            return False

    sys.path[:] = [p for p in sys.path if not ours(p)]
    sys.modules.pop(__name__, None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if e.name != "sitecustomize":
            _warn(f"error in the chained sitecustomize: {type(e).__name__}: {e}")
    except Exception as e:
        _warn(f"error in the chained sitecustomize: {type(e).__name__}: {e}")
    finally:
        # sys.path stays as the chained module left it, without this folder (children still get
        # it from PYTHONPATH); `sitecustomize` names the chained module when there is one.
        # (typeshed types sys.modules values as modules only; None, an import blocker, is allowed at run time)
        sys.modules.setdefault(__name__, me)  # type: ignore[arg-type]
        sys.modules["_chakra_collect_sitecustomize"] = me  # type: ignore[assignment]


_impl: "Callable[..., None] | Literal[False] | None" = None  # False: loading failed


def _load_impl():
    import importlib.util

    pkg = os.environ.get("CHAKRA_COLLECT_PKG") or os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    mods = {}
    for short, name in (("recorder", "_chakra_collect_recorder"), ("_inject", "_chakra_collect_inject")):
        path = os.path.join(pkg, short + ".py")
        mod = sys.modules.get(name)
        if mod is None:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None  # a `.py` path always gets a source loader
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        mods[short] = mod
    return mods["_inject"].post_hook


def _hook(opt, args, kwargs):
    global _impl
    if _impl is None:
        try:
            _impl = _load_impl()
        except Exception as e:
            _impl = False
            _warn(f"pid {os.getpid()}: cannot load the recorder ({type(e).__name__}: {e}); not recording")
    if _impl:
        _impl(opt, args, kwargs)


class _OptimizerImportFinder:
    """Registers the hook right after `torch.optim.optimizer` has been executed."""

    target = "torch.optim.optimizer"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.target:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            try:
                module.register_optimizer_step_post_hook(_hook)
            except Exception as e:
                _warn(f"pid {os.getpid()}: cannot register the optimizer hook ({type(e).__name__}: {e})")

        spec.loader.exec_module = exec_module
        return spec


def _install():
    if not os.environ.get("CHAKRA_COLLECT_DIR"):
        return
    mod = sys.modules.get(_OptimizerImportFinder.target)
    if mod is not None:  # imported by a chained sitecustomize already
        mod.register_optimizer_step_post_hook(_hook)
    else:
        sys.meta_path.insert(0, _OptimizerImportFinder())


try:
    _chain()
except Exception as e:  # pragma: no cover - defensive
    _warn(f"error while chaining sitecustomize: {type(e).__name__}: {e}")
try:
    _install()
except Exception as e:  # pragma: no cover - defensive
    _warn(f"pid {os.getpid()}: injection not installed ({type(e).__name__}: {e})")
