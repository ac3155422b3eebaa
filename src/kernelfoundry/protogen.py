"""Generates Python protobuf and gRPC modules from protos/ (build step and staleness test).

The request contracts in protos/ are protovalidate annotations (`buf.validate` field rules). Their schema,
`buf/validate/validate.proto`, is not copied into this repository: it is taken, as a compiled descriptor,
from the installed `protovalidate` package (a build requirement) and handed to protoc as a descriptor set,
so the version the rules are written against is the version that enforces them at run time. The
generated kernelfoundry modules need the schema's Python module too: protoc writes it as
`buf/validate/validate_pb2.py`, and it is moved under the project's own namespace
(`kernelfoundry/v1/buf_validate_pb2.py`, git-ignored like every generated module) with the imports
rewritten, so no generic top-level `buf` package lands in site-packages.

Must never import the generated modules themselves: it runs before they exist.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

VALIDATE_PROTO = "buf/validate/validate.proto"
VALIDATE_MODULE = Path("kernelfoundry/v1/buf_validate_pb2.py")  # where the schema's module lands
_GENERATED_IMPORT = "from buf.validate import validate_pb2 as "
_OWN_IMPORT = "from kernelfoundry.v1 import buf_validate_pb2 as "


def _dependency_descriptor_set() -> bytes:
    """A FileDescriptorSet of buf/validate/validate.proto and the well-known files it imports."""
    from google.protobuf import descriptor_pb2, duration_pb2, field_mask_pb2, timestamp_pb2
    from protovalidate._gen.buf.validate import validate_pb

    files = descriptor_pb2.FileDescriptorSet()
    for module in (descriptor_pb2, duration_pb2, field_mask_pb2, timestamp_pb2):
        module.DESCRIPTOR.CopyToProto(files.file.add())
    validate = files.file.add()
    validate.ParseFromString(validate_pb.desc().proto.to_binary())
    if validate.name != VALIDATE_PROTO:
        raise RuntimeError(f"protovalidate ships {validate.name!r}, expected {VALIDATE_PROTO!r}")
    return files.SerializeToString()


def generate(proto_root: Path, out_root: Path) -> list[Path]:
    """Run grpcio-tools' protoc over every .proto under proto_root, writing into out_root.

    Returns the generated files. Raises RuntimeError with protoc's exit code on failure.
    """
    from grpc_tools import protoc

    protos = sorted(proto_root.rglob("*.proto"))
    if not protos:
        return []
    out_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kf-protogen-") as tmp:
        deps = Path(tmp) / "deps.binpb"
        deps.write_bytes(_dependency_descriptor_set())
        args = [
            "protoc",
            f"-I{proto_root}",
            f"--descriptor_set_in={deps}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            VALIDATE_PROTO,
            *(str(p) for p in protos),
        ]
        code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} for {proto_root}")
    generated: list[Path] = []
    for rel in (p.relative_to(proto_root).with_suffix("") for p in protos):
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            path = out_root / f"{rel}{suffix}"
            if path.exists():
                text = path.read_text()
                if _GENERATED_IMPORT in text:
                    path.write_text(text.replace(_GENERATED_IMPORT, _OWN_IMPORT))
                generated.append(path)
    schema = out_root / Path(VALIDATE_PROTO).with_suffix("")
    (out_root / VALIDATE_MODULE).write_bytes(schema.with_name("validate_pb2.py").read_bytes())
    generated.append(out_root / VALIDATE_MODULE)
    shutil.rmtree(out_root / "buf")  # protoc's own layout of the schema module: nothing may import it
    return generated


def build_image(proto_root: Path, image: Path) -> Path:
    """A buf-readable image (FileDescriptorSet with imports and source info) of every .proto under
    proto_root: `buf lint` reads it, because the buf.validate import resolves only through protovalidate."""
    from grpc_tools import protoc

    protos = sorted(proto_root.rglob("*.proto"))
    with tempfile.TemporaryDirectory(prefix="kf-protogen-") as tmp:
        deps = Path(tmp) / "deps.binpb"
        deps.write_bytes(_dependency_descriptor_set())
        code = protoc.main(
            [
                "protoc",
                f"-I{proto_root}",
                f"--descriptor_set_in={deps}",
                "--include_imports",
                "--include_source_info",
                f"--descriptor_set_out={image}",
                *(str(p) for p in protos),
            ]
        )
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} for {proto_root}")
    return image
