"""The fit verdict as a string enum: ``fits`` < ``tight`` < ``does-not-fit`` (and ``not-applicable`` off GPUs)."""

from __future__ import annotations

import enum

__all__ = ["Verdict"]


class Verdict(str, enum.Enum):
    """Will it fit; a ``str`` whose value is the word ``nbtools fit --json`` and the lint finding print."""

    NOT_APPLICABLE = "not-applicable"  # the rehearsal on CPU ranks: no GPU to hold it against
    FITS = "fits"
    TIGHT = "tight"  # fits, within the margin the estimate cannot promise
    DOES_NOT_FIT = "does-not-fit"

    def __str__(self) -> str:
        return self.value

    @property
    def ok(self) -> bool:
        """Worth launching: it fits, tightly, or the question does not apply."""
        return self is not Verdict.DOES_NOT_FIT

    @classmethod
    def worst(cls, verdicts) -> Verdict:
        """The worst of ``verdicts`` (a training and a generation verdict: the step fits only if both do)."""
        order = list(cls)
        return max((cls(v) for v in verdicts), key=order.index, default=cls.NOT_APPLICABLE)
