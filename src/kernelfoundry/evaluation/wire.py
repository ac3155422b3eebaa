"""JSON form of an EvaluationRequest, for the pipe between EvaluationWorker and its judge process.

Both ends are trusted; JSON replaces pickle so that nothing on that pipe can execute code either.
Only what an evaluation uses travels: the task (reference source, shapes, tolerance, seeds), the
kernel (language, code, entry point, glue, tunables, params), the artifact path, the device, the
settings. Pure data; never imports torch.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from kernelfoundry.domain.kernel import KernelSource, Tunable
from kernelfoundry.evaluation.settings import EvaluationRequest, EvaluationSettings
from kernelfoundry.tasks.model import ShapeVariant, Task, Tolerance


def _tolerance(data: dict[str, Any] | None) -> Tolerance | None:
    return Tolerance(float(data["atol"]), float(data["rtol"])) if data else None


def request_to_dict(request: EvaluationRequest) -> dict[str, Any]:
    task, kernel, settings = request.task, request.kernel, request.settings
    return {
        "task": {
            "name": task.name,
            "reference_source": task.reference_source,
            "shapes": [{"name": s.name, "overrides": dict(s.overrides)} for s in task.shapes],
            "tolerance": asdict(task.tolerance) if task.tolerance else None,
            "seeds": task.seeds,
            "targets": list(task.targets),
        },
        "kernel": {
            "language": kernel.language,
            "code": kernel.code,
            "entry_point": kernel.entry_point,
            "glue": kernel.glue,
            "tunables": [
                {"name": t.name, "values": list(t.values), "default": t.default} for t in kernel.tunables
            ],
            "params": dict(kernel.params),
        },
        "artifact": str(request.artifact),
        "device": request.device,
        "settings": {
            f.name: (
                asdict(settings.tolerance)
                if f.name == "tolerance" and settings.tolerance
                else getattr(settings, f.name)
            )
            for f in fields(EvaluationSettings)
        },
    }


def request_from_dict(data: dict[str, Any]) -> EvaluationRequest:
    t, k, s = data["task"], data["kernel"], dict(data["settings"])
    task = Task(
        name=t["name"],
        reference_source=t["reference_source"],
        shapes=tuple(ShapeVariant(v["name"], dict(v["overrides"])) for v in t["shapes"]),
        tolerance=_tolerance(t["tolerance"]),
        seeds=int(t["seeds"]),
        targets=tuple(t["targets"]),
    )
    kernel = KernelSource(
        language=k["language"],
        code=k["code"],
        entry_point=k["entry_point"],
        glue=k["glue"],
        tunables=tuple(Tunable(u["name"], tuple(u["values"]), u["default"]) for u in k["tunables"]),
        params=dict(k["params"]),
    )
    s["tolerance"] = _tolerance(s.get("tolerance"))
    return EvaluationRequest(task, kernel, Path(data["artifact"]), data["device"], EvaluationSettings(**s))
