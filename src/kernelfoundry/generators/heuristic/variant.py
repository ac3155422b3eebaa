"""A variant: the strategy choices one generated unit embodies, recorded in its source.

The emitters read a Variant; the mutation operators change one; the unit carries it as a
`// @kf.variant {...}` line so a later mutation of that unit (as a parent) knows where it stands.
Pure data.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields, replace

_LINE = re.compile(r"^// @kf\.variant (\{.*\})$", re.MULTILINE)


@dataclass(frozen=True)
class Variant:
    fuse: bool = True  # fused steps (False: direct translation, one loop per op)
    vectorize: bool = True  # CPU: `omp simd` + vectorisable math; CUDA: float4 loads/stores
    reduction: str = "warp"  # "block" (CUDA tree), "warp" (shuffles / CPU SIMD), "atomic" (row splits)
    online: bool = False  # softmax / log-softmax: one pass for max and sum (rescaled running sum)
    cache_rows: bool = False  # tiling: CUDA rowops keep rows on chip; CPU pointwise runs op by op in L1 tiles
    par_rows: bool = False  # CPU pointwise: parallelise over rows only (else rows x chunks)
    fold: bool = False  # fold per-channel affine tails into the heavy op's weights (glue)
    row_warps: bool = False  # CUDA rows: one warp per row when R <= WARP_ROW_MAX
    channels_last: bool = False  # conv tails: conv in NHWC, the tail transposes through a tile (layout.py)
    # the linear itself generated, the tail its epilogue: CPU tiled GEMM (cpu_gemm.py) or implicit-GEMM
    # conv (cpu_conv.py); CUDA tiled SGEMM with a pointwise or sum / mean tail (cuda_gemm.py)
    gemm: bool = False
    tensor_cores: bool = False  # CUDA GEMM family: 3xTF32 mma.sync (cuda_gemm_tc.py), not SIMT FMAs
    # tensor cores at one TF32 product (cuDNN's default precision for float32 convs), not 3xTF32
    tf32: bool = False
    # the conv / linear kept where only a mean over its output follows: not reformulated as that mean
    # (conv_means.py, feature_means.py)
    literal_means: bool = False

    def line(self) -> str:
        data = asdict(self)
        if not self.gemm:
            del data["gemm"]  # units without the GEMM family read exactly as before it existed
        if not self.tensor_cores:
            del data["tensor_cores"]  # likewise units before the tensor-core kernel
        if not self.tf32:
            del data["tf32"]
        if not self.literal_means:
            del data["literal_means"]
        return "// @kf.variant " + json.dumps(data, sort_keys=True)

    def with_(self, **changes: object) -> Variant:
        return replace(self, **changes)  # type: ignore[arg-type]


def parse_variant(code: str) -> Variant | None:
    """The variant a generated unit declares, or None for a unit the proposer did not write."""
    m = _LINE.search(code)
    if not m:
        return None
    try:
        data = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None
    known = {f.name for f in fields(Variant)}
    return Variant(**{k: v for k, v in data.items() if k in known})
