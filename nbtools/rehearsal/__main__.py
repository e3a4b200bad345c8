"""``python -m nbtools.rehearsal --config experiments/local.yaml --runs-dir runs [key=value ...]``.

The CPU kernels are pinned before torch loads (``setdefault``: an explicit setting wins): ATen's vectorised kernels to
AVX2 (``ATEN_CPU_CAPABILITY``; on this AVX-512 machine the AVX2 kernels change seed 2's run from step to step) and MKL's
GEMMs to its AVX2 code path (``MKL_CBWR``), so x86-64 machines with AVX2 take the same kernels and the rehearsal learns
the same way on each: the run is chaotic in floating-point details, a run on other kernels is a run on another seed.
"""

from __future__ import annotations

import os
import sys

PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}

if __name__ == "__main__":
    for _k, _v in PINNED_KERNELS.items():
        os.environ.setdefault(_k, _v)
    from nbtools.rehearsal._launch import main

    sys.exit(main())
