"""Compiler handler: CompileCandidate -> build -> artifact in the object store -> events.

Runs without an accelerator. A build failure is a result (CandidateCompiled with ok=false and the
compiler's message), never an exception: only transport problems make the message come back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.bus.artifact_cleanup import artifact_name as unit_name
from kernelfoundry.bus.consumer import Delivery, Reject
from kernelfoundry.bus.protocol import Bus, Outgoing
from kernelfoundry.codec import kernel_from_proto
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.stack.quiet_host import QuietHost
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.toolchains import BuildCache, BuildResult, BuildTarget, build
from kernelfoundry.v1 import build_pb2


class CompileHandler:
    def __init__(
        self, bus: Bus, cache_dir: Path, metrics: Metrics | None = None, quiet: QuietHost | None = None
    ) -> None:
        self.bus = bus
        self.cache = BuildCache(cache_dir)
        self.metrics = metrics
        self.quiet = quiet or QuietHost(None)

    def _build(self, source: KernelSource, target: BuildTarget) -> BuildResult:
        """One build, held back while a CPU executor on this machine times its runs."""
        with self.quiet.sharing():
            return build(source, target, self.cache)

    async def __call__(self, request: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        try:
            source = kernel_from_proto(request.source)
            target = BuildTarget.parse(request.build_target)
        except ValueError as exc:
            raise Reject("bad_request", f"candidate {request.candidate_id}: {exc}") from exc
        result = await asyncio.to_thread(self._build, source, target)
        artifact_name = ""
        if result.ok and result.artifact is not None:
            artifact_name = unit_name(request.candidate_id)
            await self.bus.put_artifact(artifact_name, Path(result.artifact).read_bytes())
        if self.metrics is not None:
            hw = request.build_target
            self.metrics.compiles_total.labels(
                hardware=hw, outcome="ok" if result.ok else (result.reason or "error")
            ).inc()
            self.metrics.compile_duration_seconds.labels(hardware=hw).observe(result.duration_s)
            if result.cache_hit:
                self.metrics.build_cache_hits_total.labels(hardware=hw).inc()
        compiled = build_pb2.CandidateCompiled(
            candidate_id=request.candidate_id,
            run_id=request.run_id,
            ok=result.ok,
            reason=result.reason or "",
            log=result.log,
            duration_s=result.duration_s,
            cache_hit=result.cache_hit,
            artifact=artifact_name,
            toolchain=result.toolchain,
            flags=list(result.flags),
            build_target=request.build_target,
        )
        out = [Outgoing(subjects.CANDIDATE_COMPILED, compiled, f"compiled-{request.candidate_id}")]
        if result.ok:
            evaluate = build_pb2.EvaluateCandidate(
                candidate_id=request.candidate_id,
                run_id=request.run_id,
                source=request.source,
                artifact=artifact_name,
                task=request.task,
                hardware=request.execute_hardware,
                screen_above_ms=request.screen_above_ms,
            )
            out.append(
                Outgoing(
                    subjects.execute(request.execute_hardware), evaluate, f"evaluate-{request.candidate_id}"
                )
            )
        return out
