"""A plan as a bash script: the same checks and commands as ``Plan.apply``, for people who run plans by hand.

A provisioning script stops at its first failure (``set -e``). A keep-going script (the destroy plan) records each
failure, skips only the steps that need a failed one, and ends with a "what is still there" check of every resource,
exiting non-zero when something failed or remains, so a refused bucket delete cannot leave the GPU pool billing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nbtools._escape import sh_echo
from nbtools.gke._step import Step, _join, _quote

__all__ = ["render"]

_DONE = [
    "done_() {  # true when the check succeeds and prints every EXPECT line (and, with STATES, exactly one of them)",
    '  local out; out="$("$@" 2>/dev/null)" || return 1; [[ -n "$out" ]] || return 1',
    '  for want in "${EXPECT[@]:-}"; do [[ -z "$want" || "$out" == *"$want"* ]] || return 1; done',
    '  (( ${#STATES[@]} == 0 )) && return 0',
    '  for s in "${STATES[@]}"; do [[ "$out" == "$s" ]] && return 0; done; return 1',
    "}",
]
_GONE = [
    "gone_() {  # true when the check succeeds and does not print the resource (a failing check proves nothing)",
    '  local out; out="$("$@" 2>/dev/null)" || return 1; [[ -n "$out" ]] || return 0',
    '  for want in "${EXPECT[@]:-}"; do [[ -n "$want" && "$out" != *"$want"* ]] && return 0; done; return 1',
    "}",
]


def _set(s: Step) -> str:
    exp = "EXPECT=(" + " ".join(_quote(e) for e in s.expect) + ")"
    return exp + "; STATES=(" + " ".join(_quote(x) for x in s.states) + ")"


def render(kind: str, steps: Sequence[Step], *, variables: Mapping[str, tuple[str, ...]] | None = None,
           keep_going: bool = False) -> str:
    """The bash text of a plan's ``steps`` (see the module docstring); ``Plan.to_script`` passes its own fields."""
    head = [
        "#!/usr/bin/env bash",
        f"# nbtools {kind} plan ({len(steps)} steps). Safe to re-run: finished steps are skipped.",
    ]
    if keep_going:
        head += ["# A failed step does not stop the others; only the steps that need it are skipped.", "set -uo pipefail"]
    else:
        head.append("set -euo pipefail")
    out = head + [""] + _DONE + _GONE
    for name, cmd in (variables or {}).items():
        out.append(f'{name}="${{{name}:-$({_join(cmd)})}}"')
    by_name = {s.name: s for s in steps}  # a step's ``within``: the parent whose removal takes it along
    if keep_going:
        out += ["FAILED=()", "KEPT=()",
                'failed_() { local d; for d in "$@"; do [[ " ${FAILED[*]:-} " == *" $d "* ]] && return 0; done; return 1; }']
    for s in steps:
        out += ["", f"# --- {s.name}: {s.what}"]
        out += _keep_going_step(s, by_name.get(s.within or "")) if keep_going else _step(s)
    if keep_going:
        out += _report(steps, by_name)
    return "\n".join(out) + "\n"


def _step(s: Step) -> list[str]:
    body = s.script or s.command_str
    if s.refresh or not s.check:
        return [body]
    test = "done_" if not s.absent else "gone_"
    word = "already gone" if s.absent else "already done"
    # the body is not indented: a heredoc's EOF must start its line
    return [f"if {_set(s)}; {test} {_join(s.check)}; then {sh_echo(f'skip {s.name}: {word}')}; else", body, "fi"]


def _keep_going_step(s: Step, parent: Step | None) -> list[str]:
    lines = []
    first = "if"
    if s.after:
        deps = " ".join(_quote(a) for a in s.after)
        why = f"skip {s.name}: needs {', '.join(s.after)}, which did not complete"
        lines.append(f"if failed_ {deps}; then {sh_echo(why)}; "
                     f"FAILED+=({_quote(s.name)})")
        first = "elif"
    if parent is not None and parent.check:
        lines.append(f"{first} {_set(parent)}; gone_ {_join(parent.check)}; then {sh_echo(f'skip {s.name}: gone with {parent.name}')}")
        first = "elif"
    if s.check:
        lines.append(f"{first} {_set(s)}; gone_ {_join(s.check)}; then {sh_echo(f'skip {s.name}: already gone')}")
        first = "elif"
    body = s.script or s.command_str
    if s.keep_if_refused:  # refused on purpose (a bucket that holds objects): kept, reported, not a failure
        hint = f" ({s.hint})" if s.hint else ""
        lines.append(f"{first} ! ( {body} ); then {sh_echo(f'kept {s.name}: refused, so it stays{hint}')}; "
                     f"KEPT+=({_quote(s.name)})")
    else:
        lines.append(f"{first} ! ( {body} ); then {sh_echo(f'FAILED {s.name}', stderr=True)}; FAILED+=({_quote(s.name)})")
    lines.append("fi")
    return lines


def _report(steps: Sequence[Step], by_name: Mapping[str, Step]) -> list[str]:
    out = ["", "# --- what is still there (one list check per resource)", "LEFT=0",
           'still_() { echo "still there (or not checkable): $1"; LEFT=1; }']
    for s in steps:
        if not s.check:
            continue
        label = _quote(f"{s.name} ({s.what})")
        parent = by_name.get(s.within or "")
        cond = f"{_set(s)}; gone_ {_join(s.check)}"
        if parent is not None and parent.check:
            cond = f"{{ {_set(parent)}; gone_ {_join(parent.check)}; }} || {{ {cond}; }}"
        if s.keep_if_refused:
            cond = f'[[ " ${{KEPT[*]:-}} " == *" {s.name} "* ]] || {{ {cond}; }}'
        out.append(f"{cond} || still_ {label}")
    out += [
        'if (( ${#FAILED[@]} )); then echo "did not complete: ${FAILED[*]}" >&2; fi',
        'if (( ${#KEPT[@]} )); then echo "kept on purpose: ${KEPT[*]}"; fi',
        'if (( ${#FAILED[@]} || LEFT )); then exit 1; fi',
        "echo 'everything in this plan is gone'",
    ]
    return out
