"""Build the optional C kernels; without a compiler the package falls back to numpy/Python."""
from setuptools import Extension, setup

VEC = ["src/chakra_trace/_vec.h"]  # shared by the extensions (#include "../_vec.h")

setup(
    ext_modules=[
        Extension("chakra_trace.schema._wire", sources=["src/chakra_trace/schema/_wire.c"], depends=VEC, optional=True,
                  extra_compile_args=["-O3"]),
        Extension("chakra_trace.convert._kineto", sources=["src/chakra_trace/convert/_kineto.c"], depends=VEC,
                  optional=True, extra_compile_args=["-O3"]),
        Extension("chakra_trace.convert._host", sources=["src/chakra_trace/convert/_host.c"], depends=VEC,
                  optional=True, extra_compile_args=["-O3"]),
    ]
)
