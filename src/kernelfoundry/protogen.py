"""Generates Python protobuf and gRPC modules from protos/ (build step and staleness test).

Must never import the generated modules themselves: it runs before they exist.
"""

from __future__ import annotations

from pathlib import Path


def generate(proto_root: Path, out_root: Path) -> list[Path]:
    """Run grpcio-tools' protoc over every .proto under proto_root, writing into out_root.

    Returns the generated files. Raises RuntimeError with protoc's exit code on failure.
    """
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(proto_root.rglob("*.proto"))
    if not protos:
        return []
    include = Path(grpc_tools.__file__).parent / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *(str(p) for p in protos),
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} for {proto_root}")
    generated: list[Path] = []
    for proto in protos:
        rel = proto.relative_to(proto_root).with_suffix("")
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            path = out_root / f"{rel}{suffix}"
            if path.exists():
                generated.append(path)
    return generated
