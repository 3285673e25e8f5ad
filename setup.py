"""Build of the optional C kernel; everything else is in pyproject.toml.

The extension is optional: where it cannot be compiled (no C compiler, other platform) the
install goes on and lar_prec.compare uses its numpy path, which gives the same results.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lar_prec.compare.engine._kernel",
            ["lar_prec/compare/engine/_kernel.c"],
            # IEEE float32 without contraction: max_err must match compare_binary_iodump bit for bit
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math", "-Wno-psabi"],
            optional=True,
        )
    ]
)
