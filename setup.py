"""The optional C extensions; everything else is in pyproject.toml.

dlog._record_codec runs dlog.record's per-record loops in C, and
dlog.protocol._add_codec encodes and decodes BookKeeper's add request and
response. They are optional: where they cannot be built (no compiler or no
Python headers), the install goes on and dlog runs the same code in Python
(see dlog.extensions).
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
#: Shared by both (slots of plain classes).
HEADERS = ["dlog/_slots.h"]

setup(
    ext_modules=[
        Extension(
            "dlog._record_codec",
            sources=["dlog/_record_codec.c"],
            depends=HEADERS,
            optional=True,
            extra_compile_args=FLAGS,
        ),
        Extension(
            "dlog.protocol._add_codec",
            sources=["dlog/protocol/_add_codec.c"],
            depends=HEADERS,
            optional=True,
            extra_compile_args=FLAGS,
        ),
    ]
)
