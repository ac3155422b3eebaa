"""How busy a GPU was while a bench ran: nvidia-smi's utilisation sampled every `sample_ms`.

NVML's utilisation.gpu is the percentage of the last sample period in which any kernel ran on the device.
`busy_fraction` is the share of samples above zero (the device never sat idle for a whole period);
`fraction_above(50)` is the share above half (the issue's "busy" measure); `mean` the average percentage.
Off a GPU, or without nvidia-smi, there are no samples and every figure is None.
"""

from __future__ import annotations

import subprocess

SAMPLE_MS = 50


class GpuBusy:
    """Samples one device's utilisation while open (a context manager)."""

    def __init__(self, device: str, sample_ms: int = SAMPLE_MS) -> None:
        self.index = device.split(":", 1)[1] if ":" in device else "0"
        self.sample_ms = sample_ms
        self.samples: list[float] = []
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> GpuBusy:
        try:
            self._process = subprocess.Popen(
                [
                    "nvidia-smi",
                    "-i",
                    self.index,
                    "--query-gpu=utilization.gpu",
                    "--format=csv,noheader,nounits",
                    f"--loop-ms={self.sample_ms}",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            self._process = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is None:
            return
        self._process.terminate()
        out, _ = self._process.communicate(timeout=10)
        self.samples = parse_samples(out)

    @property
    def busy_fraction(self) -> float | None:
        return self.fraction_above(0.0)

    def fraction_above(self, percent: float) -> float | None:
        return sum(1 for s in self.samples if s > percent) / len(self.samples) if self.samples else None

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def parse_samples(text: str) -> list[float]:
    """Percentages of nvidia-smi's csv,noheader,nounits output; lines that are not numbers are skipped."""
    samples = []
    for line in text.split():
        try:
            samples.append(float(line))
        except ValueError:
            continue
    return samples
