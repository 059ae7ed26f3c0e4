"""An independent check of the kernel facts (gpu.kernel_facts): which kernels of a source may
run a run of threads in one call (host_prelude.h's "lanes"), read from the kernel text.

The host backend once decided lanes with this analyser; now the code generators state it and
the backend never reads the text for it. This stays as a test tool:
tests/gpu/test_kernel_facts.py holds every stated fact to what it reads here, so a hand-written
template that starts telling its threads apart, or a generator that starts writing threadIdx
into a lane loop, fails the suite instead of running wrong lanes.
"""

from __future__ import annotations

import re

from tapescope.gpu.device import DeviceError, header_paths

__all__ = ["LANE_LOOPS", "lane_kernels"]

# The loops host_prelude.h defines with lanes; a kernel source may define them only under
# `#ifndef NAME` (so the prelude's definition is the one used), never #undef them.
LANE_LOOPS = ("TS_GRID_STRIDE", "TS_BLOCK_STRIDE")
_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:[^\n]*\\\n)*[^\n]*)", re.M)
_KERNEL_HEAD_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{')
# what a lane kernel's body may not contain once its lane loops are taken out
_LANE_FORBIDDEN = re.compile(r"\b(threadIdx|__syncthreads|__shared__|return|break|goto|asm|"
                             r"__asm__|setjmp|longjmp)\b")


def _block(text: str, open_brace: int) -> int:
    """The index just past the brace that closes the one at open_brace."""
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise DeviceError("compile: unbalanced braces in the kernel source")


def _strip_call(body: str, name: str) -> str | None:
    """body with every `name(...)` invocation removed (None if one is not closed)."""
    out, at = [], 0
    for m in re.finditer(rf"\b{name}\s*\(", body):
        if m.start() < at:
            continue
        depth, i = 0, m.end() - 1
        while i < len(body):
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            if depth == 0:
                break
            i += 1
        else:
            return None
        out.append(body[at:m.start()])
        at = i + 1
    return "".join(out) + body[at:]


def _split_loops(body: str, loops: list[str]) -> tuple[str, list[str]] | None:
    """(the body without its lane loops, each lane loop's statement); None where a loop's
    extent is unclear (a bracket not closed, an `else` after a single statement) or one lane
    loop holds another."""
    pat = re.compile(r"\b(" + "|".join(loops) + r")\s*\(")
    outside, stmts, at = [], [], 0
    for m in pat.finditer(body):
        if m.start() < at:
            continue
        depth, i = 0, m.end() - 1
        while i < len(body):  # the macro's arguments
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            if depth == 0:
                break
            i += 1
        j = i + 1
        while j < len(body) and body[j].isspace():
            j += 1
        if j >= len(body):
            return None
        if body[j] == "{":
            try:
                end = _block(body, j)
            except DeviceError:
                return None
        else:  # one statement: up to its `;` outside brackets
            depth, end = 0, j
            while end < len(body) and not (body[end] == ";" and depth == 0):
                depth += {"(": 1, ")": -1, "[": 1, "]": -1, "{": 1, "}": -1}.get(body[end], 0)
                end += 1
            end += 1
            if re.match(r"\s*else\b", body[end:]):
                return None
        stmt = body[j:end]
        if pat.search(stmt):
            return None
        outside.append(body[at:m.start()])
        stmts.append(stmt)
        at = end
    outside.append(body[at:])
    return " ".join(outside), stmts


_NAME = r"(?<![\w.>])([A-Za-z_]\w*)"
_ASSIGN_OP = r"(?:<<=|>>=|[-+*/%&|^]?=)(?!=)"
_SCALAR_WRITE = re.compile(_NAME + r"\s*" + _ASSIGN_OP + r"|" + _NAME + r"\s*(?:\+\+|--)|"
                           r"(?:\+\+|--)\s*" + _NAME + r"|(?:^|[(,=?:]|return)\s*&\s*" + _NAME)
_ELEMENT_WRITE = re.compile(_NAME + r"\s*((?:\[[^\]]*\]|\.\w+|->\w+)+)\s*(?:" + _ASSIGN_OP
                            + r"|\+\+|--)")


def _carries_state(outside: str, stmts: list[str], params: str) -> bool:
    """Whether a lane loop writes a variable that outlives one iteration: a scalar parameter,
    or a local declared outside the loop (a thread's running count, an array), written,
    incremented or address-taken inside it. Run as lanes, the threads would share it. Writes
    through a pointer (a parameter, or a pointer local set outside the loop) are memory."""
    pointers = {m.group(1) for m in re.finditer(r"\*\s*(\w+)\s*(?:,|$)", params)}
    pointers |= {m.group(1) for m in re.finditer(r"\*\s*(\w+)\s*=", outside)}
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", outside + " " + params))
    for stmt in stmts:
        for m in _SCALAR_WRITE.finditer(stmt):
            if next(g for g in m.groups() if g) in names:
                return True
        for m in _ELEMENT_WRITE.finditer(stmt):
            base, path = m.group(1), m.group(2)
            through_pointer = base in pointers and path.startswith(("[", "->"))
            if base in names and not through_pointer:
                return True
            if base in pointers and re.search(rf"\b{base}\s*\[", outside):
                return True  # declared or indexed as an array outside: not plainly a pointer
    return False


def lane_kernels(source: str) -> frozenset[str]:
    """The kernels of `source` that run runs of threads in one call (host_prelude.h, "lanes").

    A kernel qualifies when every way its body can tell threads apart is a lane loop
    (LANE_LOOPS): its body uses one, and once they are taken out it names no threadIdx, no
    barrier, no __shared__, and has no return, break or goto (each would end the other lanes'
    work too); no macro of the source other than the lane loops, and no code outside the kernel
    bodies, mentions threadIdx; the source includes only the kernel headers (header_paths(),
    none of which names threadIdx: tests/gpu/test_host_lanes.py); and the lane loops are the
    prelude's (defined in the source only under their #ifndef, never #undef); and no lane loop
    writes a variable that outlives one iteration (`_carries_state`: a thread's running count
    would be shared by the lanes). Code outside a lane loop then cannot tell which thread runs
    it, so running it once per run of threads changes nothing, and each iteration is one
    thread's.
    """
    text = _COMMENT_RE.sub(" ", source)
    ours = header_paths()
    for inc in re.findall(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', text, re.M):
        if "/" in inc or inc not in ours:
            return frozenset()
    loops = []
    for name in LANE_LOOPS:
        if re.search(rf"#[ \t]*undef[ \t]+{name}\b", text):
            continue
        defs = [m.start() for m in _DEFINE_RE.finditer(text) if m.group(1) == name]
        if all(re.search(rf"#[ \t]*ifndef[ \t]+{name}[ \t]*\n[ \t]*$", text[:d]) for d in defs):
            loops.append(name)
    tainted = {m.group(1) for m in _DEFINE_RE.finditer(text)
               if "threadIdx" in m.group(2) and m.group(1) not in LANE_LOOPS}
    bodies, params, rest, at = {}, {}, [], 0
    for m in _KERNEL_HEAD_RE.finditer(text):
        if m.start() < at:
            continue
        end = _block(text, m.end() - 1)
        bodies[m.group(1)] = text[m.end():end - 1]
        params[m.group(1)] = m.group(2)
        rest.append(text[at:m.start()])
        at = end
    rest.append(text[at:])
    outside = _DEFINE_RE.sub(" ", "".join(rest))
    if "threadIdx" in outside or not loops:
        return frozenset()
    ok = set()
    for name, body in bodies.items():
        if not any(re.search(rf"\b{loop}\s*\(", body) for loop in loops):
            continue
        stripped = body
        for loop in loops:
            stripped = _strip_call(stripped, loop) if stripped is not None else None
        if stripped is None or _LANE_FORBIDDEN.search(stripped):
            continue
        if any(re.search(rf"\b{t}\b", stripped) for t in tainted):
            continue
        split = _split_loops(body, loops)
        if split is None or _carries_state(*split, params[name]):
            continue
        ok.add(name)
    return frozenset(ok)
