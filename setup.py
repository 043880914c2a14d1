"""Build the optional C kernels; without a compiler the package falls back to numpy/Python.

Each kernel is compiled with the ABI and the hash of its sources from chakra_trace/_native.py
(loaded by path: the package itself needs its dependencies), so `_native.load` can refuse a
kernel that was built for other sources.
"""

import importlib.util
import sys

from setuptools import Extension, setup

SPEC = importlib.util.spec_from_file_location("_chakra_trace_native", "src/chakra_trace/_native.py")
native = sys.modules[SPEC.name] = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(native)

# a kernel is rebuilt when its shared header or the ABI changes, not only its own source
DEPENDS = [f"src/chakra_trace/{native.SHARED_HEADER}", "src/chakra_trace/_native.py"]

setup(
    ext_modules=[
        Extension(
            module,
            sources=[f"src/chakra_trace/{source}"],
            depends=DEPENDS,
            optional=True,
            extra_compile_args=["-O3"],
            define_macros=native.build_macros(module),
        )
        for module, source in native.KERNELS.items()
    ]
)
