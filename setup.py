"""Build the optional C wire kernels; without a compiler the package falls back to numpy."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("chakra_trace.io._wire", sources=["src/chakra_trace/io/_wire.c"], optional=True,
                  extra_compile_args=["-O3"]),
    ]
)
