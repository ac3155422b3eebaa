"""The generated protobuf/gRPC code matches protos/, the protos pass buf lint, and their buf.validate
rules load in protovalidate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelfoundry.protogen import build_image, generate

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src"


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    fresh = generate(ROOT / "protos", tmp_path)
    assert fresh, "no .proto files found"
    stale = []
    for path in fresh:
        installed = PACKAGE / path.relative_to(tmp_path)
        if not installed.exists() or installed.read_bytes() != path.read_bytes():
            stale.append(str(installed.relative_to(ROOT)))
    assert not stale, f"generated code is stale; rebuild (pip install -e .) to regenerate: {stale}"


def test_every_generated_module_imports() -> None:
    for proto in sorted((ROOT / "protos").rglob("*.proto")):
        module = ".".join(proto.relative_to(ROOT / "protos").with_suffix("").parts) + "_pb2"
        __import__(module)


def _buf() -> str | None:
    candidate = Path(sys.executable).parent / "buf"
    return str(candidate) if candidate.exists() else shutil.which("buf")


@pytest.mark.skipif(_buf() is None, reason="buf (the buf-bin wheel) is not installed")
def test_protos_pass_buf_lint(tmp_path: Path) -> None:
    # buf reads the image protoc builds: the buf.validate import resolves only through protovalidate.
    image = build_image(ROOT / "protos", tmp_path / "image.binpb")
    config = '{"version":"v2","lint":{"use":["STANDARD"],"ignore":["buf/validate","google"]}}'
    result = subprocess.run(
        [_buf(), "lint", str(image), "--config", config],  # type: ignore[list-item]
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_request_contract_compiles_in_protovalidate() -> None:
    import protovalidate

    from kernelfoundry.v1 import lineage_pb2, service_pb2

    validator = protovalidate.Validator()
    for module in (service_pb2, lineage_pb2):
        requests = [n for n in module.DESCRIPTOR.message_types_by_name if n.endswith("Request")]
        assert requests
        for name in requests:  # a rule that does not compile raises CompilationError
            assert isinstance(validator.collect_violations(getattr(module, name)()), list)
