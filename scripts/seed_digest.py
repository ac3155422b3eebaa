"""Digest of every heuristic-proposer seed of every suite task, for "byte-identical" refactor checks.

For each tasks/*.py and each backend (cpu, cuda) the proposer's seeds are generated (pure code
generation: nothing is compiled or run), and one mutation per operator of the first seed. Every
candidate's language, entry point, code, glue, tunables, params, self-reported descriptors and
mutation are hashed; one line per (task, backend) and a total digest are printed. Run it before and
after a change and compare the output:

    .venv/bin/python scripts/seed_digest.py > /tmp/before.txt
    ... change ...
    .venv/bin/python scripts/seed_digest.py | diff /tmp/before.txt -
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from kernelfoundry.generators.base import MUTATIONS, GeneratedCandidate, GenerationRequest, ParentKernel
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.loading import load_task

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("cpu", "cuda")


def _record(c: GeneratedCandidate) -> str:
    s = c.source
    return json.dumps(
        {
            "language": s.language,
            "entry": s.entry_point,
            "code": s.code,
            "glue": s.glue,
            "tunables": [[t.name, list(t.values), t.default] for t in s.tunables],
            "params": sorted((k, str(v)) for k, v in s.params.items()),
            "strategy": [c.strategy.memory, c.strategy.algorithm, c.strategy.parallelism],
            "mutation": c.mutation,
        },
        sort_keys=True,
    )


def main() -> int:
    generator = HeuristicGenerator()
    total = hashlib.sha256()
    for path in sorted((ROOT / "tasks").glob("*.py")):
        task = load_task(path)
        for backend in BACKENDS:
            h = hashlib.sha256()
            request = GenerationRequest("digest", task, backend, count=64)  # type: ignore[arg-type]
            seeds = generator.generate_sync(request).candidates
            records = [_record(c) for c in seeds]
            if seeds:
                first = seeds[0]
                parent = ParentKernel(first.source, first.strategy, 1.0, 1.0)
                for mutation in MUTATIONS:
                    mutated = GenerationRequest(
                        "digest", task, backend, parent=parent, mutation=mutation, count=2, seed=7
                    )  # type: ignore[arg-type]
                    records += [_record(c) for c in generator.generate_sync(mutated).candidates]
            for r in records:
                h.update(r.encode())
            total.update(h.digest())
            counts = f"seeds={len(seeds):3d} candidates={len(records):3d}"
            print(f"{path.stem:40s} {backend:5s} {counts} {h.hexdigest()}")
    print(f"total {total.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
