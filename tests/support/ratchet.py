"""A count that may only go down (per file): the shrink-only allow-lists of the architecture tests."""

from __future__ import annotations


def check_ratchet(found: dict[str, int], left: dict[str, int], what: str, fix: str, constant: str) -> None:
    """Fail when a file has more of ``what`` than ``left`` allows (``fix`` says what to do instead), or fewer than
    ``left`` still says (then ``constant`` must be lowered, so the ratchet follows every removal)."""
    grew = {f: (left.get(f, 0), n) for f, n in found.items() if n > left.get(f, 0)}
    assert not grew, f"{what} (before, now); {fix}: {grew}"
    shrank = {f: (n, found.get(f, 0)) for f, n in left.items() if found.get(f, 0) < n}
    assert not shrank, f"fewer {what.split(' outside')[0]} than {constant} says: lower those counts (was, now): {shrank}"
