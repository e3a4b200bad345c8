"""The pieces a trainer's own checkpoint reader and merge are built from (``nbtools/trainers/<name>/``): byte spans of
source tensors, the allow-list unpickler, CRC checks, and the verified, atomic safetensors writer the NeMo-RL merge
uses too. Public so that a trainer's folder reads its checkpoints with them without reaching into this package's
private modules; the generic readers here never import a trainer.

Example:
    >>> from nbtools.checkpoints.parts import SourceTensor, write_merged
"""

from __future__ import annotations

from nbtools.checkpoints._crc import check_files, check_zip
from nbtools.checkpoints._files import reuse_existing, write_merged
from nbtools.checkpoints._outdir import check_not_overlapping
from nbtools.checkpoints._result import MergeResult
from nbtools.checkpoints._sources import Chunk, SourceTensor
from nbtools.checkpoints._unpickle import ForbiddenGlobal, SafeUnpickler
from nbtools.checkpoints._verify import CHECKSUMS, default_checksum

__all__ = ["check_files", "check_zip", "reuse_existing", "write_merged", "check_not_overlapping", "MergeResult", "Chunk",
           "SourceTensor", "ForbiddenGlobal", "SafeUnpickler", "CHECKSUMS", "default_checksum"]
