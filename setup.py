"""Build glue: generates the protobuf/gRPC Python code from protos/ at build time.

The generated modules land in src/kernelfoundry/v1 (git-ignored) and are never edited by hand;
tests/unit/test_generated_code.py fails when they are stale.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent


class BuildWithProtos(build_py):
    def run(self) -> None:
        import sys

        sys.path.insert(0, str(ROOT / "src"))
        from kernelfoundry.protogen import generate

        generate(ROOT / "protos", ROOT / "src")
        super().run()


packages = ["kernelfoundry", *(f"kernelfoundry.{p}" for p in find_packages("src/kernelfoundry"))]
packages += ["kernelfoundry.services", *(f"kernelfoundry.services.{p}" for p in find_packages("services"))]

setup(packages=packages, cmdclass={"build_py": BuildWithProtos})
