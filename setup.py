"""The optional C extension; everything else is in pyproject.toml.

dlog._record_codec runs dlog.record's per-record loops in C. It is optional:
where it cannot be built (no compiler or no Python headers), the install
goes on and dlog.record runs the same loops in Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dlog._record_codec",
            sources=["dlog/_record_codec.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
