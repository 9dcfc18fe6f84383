"""The generated protobuf modules must match proto/ (run `make proto`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").glob("*.proto"))
    assert protos, "proto/ has no .proto files"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            "proto",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            *protos,
        ],
        cwd=ROOT,
        check=True,
    )
    generated = sorted(p.name for p in tmp_path.iterdir())
    for name in generated:
        committed = ROOT / "dlog" / "protocol" / name
        assert committed.exists(), f"dlog/protocol/{name} is missing: run `make proto`"
        assert committed.read_bytes() == (tmp_path / name).read_bytes(), (
            f"dlog/protocol/{name} is stale against proto/: run `make proto`"
        )
    stale = {p.name for p in (ROOT / "dlog" / "protocol").glob("*_pb2.py*")} - set(generated)
    assert not stale, f"generated modules without a .proto source: {sorted(stale)}"


def test_proto_is_not_an_importable_package() -> None:
    assert not (ROOT / "proto" / "__init__.py").exists()
