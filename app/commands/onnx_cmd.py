"""``tapescope onnx MODEL.onnx``: run an ONNX model, print its outputs, compare with expected ones.

Exit status: 0 when the run succeeded (and every expected output matched), 1 when an output
differs from its expected value, 2 when the model or an input is unusable (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace


def register(subparsers) -> None:
    """Add the ``onnx`` subcommand."""
    p = subparsers.add_parser(
        "onnx", help="run an ONNX model and compare its outputs",
        description="Run an ONNX model with the reference executor (the tape's rounding order). "
                    "Inputs come from .npy or TensorProto .pb files; with none, a deterministic "
                    "input is generated. Exit 0 = ok, 1 = outputs differ, 2 = bad model/input.")
    p.add_argument("model", nargs="?", help="the .onnx file (or --example)")
    from tapescope.resources import ONNX_EXAMPLES

    p.add_argument("--example", choices=ONNX_EXAMPLES, default=None,
                   help="a shipped model, with its shipped input and expected outputs")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                   help="a graph input from a .npy or .pb file (repeatable; NAME= may be "
                        "omitted for a .pb that carries its name, or for a single input)")
    p.add_argument("--expected", action="append", default=[], nargs="+", metavar="FILE",
                   help="expected outputs (.npy/.pb), in graph-output order or as NAME=FILE")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance for every output (default: by the output's type, "
                        "float32/float64 1e-4, float16 1e-3, bfloat16 8e-3)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance for every output (default: by the output's type, "
                        "float32/float64 1e-5, a half type its epsilon x the expected output's "
                        "largest magnitude)")
    p.add_argument("--mode", choices=("reference", "fast"), default="reference",
                   help="reference: the tape's order (default); fast: numpy/BLAS")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the generated input and of a training-mode Dropout's mask "
                        "(drawn as the tape's import draws step 0's: docs/models.md)")
    _limit_flags(p)
    p.set_defaults(func=run)


def _count(text: str) -> int:
    """A positive count, with an optional K/M/G suffix (powers of 1024): ``64M``."""
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower()
    try:
        n = int(t[:-1]) * mult[t[-1]] if t and t[-1] in mult else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (like 1000000 or 64M)") \
            from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return n


def help_defaults() -> SimpleNamespace:
    """``core.onnx.limits.Limits()``'s defaults as ``--help`` shows them, without importing it:
    building the parser imports no onnx and no numpy (issue 47 item 4). tests/app/
    test_cli_start.py holds them equal to ``Limits()``. max_bytes is the machine's, as
    ``limits.default_max_bytes()`` says: 1/32 of its memory, 512 MiB .. 2 GiB."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        memory = 0
    memory = int(memory) if memory > 0 else 8 << 30
    return SimpleNamespace(max_elements=1 << 27,
                           max_bytes=min(max(memory // 32, 512 << 20), 2 << 30),
                           max_loop_iterations=100_000, max_nodes=100_000,
                           max_work=25_000_000_000)


def _limit_flags(p) -> None:
    """The budgets of one run (core.onnx.Limits); defaults keep a hostile model small."""
    d = help_defaults()
    g = p.add_argument_group("limits", "what one run may take; raise them for a big model you "
                                       "trust (docs/security.md)")
    g.add_argument("--max-elements", type=_count, metavar="N",
                   help=f"elements in any one tensor (default {d.max_elements})")
    g.add_argument("--max-bytes", type=_count, metavar="N",
                   help=f"bytes held by one run's tensors, e.g. 4G (default {d.max_bytes}: "
                        "1/32 of this machine's memory, 512M..2G)")
    g.add_argument("--max-loop-iterations", type=_count, metavar="N",
                   help="Loop/Scan iterations of one run, all loops together "
                        f"(default {d.max_loop_iterations})")
    g.add_argument("--max-nodes", type=_count, metavar="N",
                   help=f"nodes once local functions are inlined (default {d.max_nodes})")
    g.add_argument("--max-work", type=_count, metavar="N",
                   help="estimated work of one run, in ~nanoseconds of the reference executor "
                        f"(default {d.max_work}, about 25 s)")


def limits_from(args: argparse.Namespace):
    """The core.onnx.Limits the command-line flags ask for."""
    from tapescope.core.onnx.limits import Limits

    return Limits().with_(max_elements=args.max_elements, max_bytes=args.max_bytes,
                          max_loop_iterations=args.max_loop_iterations,
                          max_nodes=args.max_nodes, max_work=args.max_work)


class _BadInput(Exception):
    pass


def _read_array(path: str, limits=None):
    """(name or None, array) from a .npy (no pickle, no memory map, its declared size checked
    against the file and ``limits`` first: core.arrayfile) or a serialized TensorProto (.pb)."""
    from onnx import TensorProto, numpy_helper

    from tapescope.core.arrayfile import ArrayFileError, read_npy

    if not os.path.isfile(path):
        why = "not a regular file" if os.path.exists(path) else "no such file"
        raise _BadInput(f"{path}: {why}")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as exc:
        raise _BadInput(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if path.endswith((".npy", ".npz")) or magic == b"\x93NUMPY" or magic[:2] == b"PK":
        try:
            return None, read_npy(path, max_bytes=getattr(limits, "max_bytes", None),
                                  max_elements=getattr(limits, "max_elements", None))
        except (ArrayFileError, OSError) as exc:
            raise _BadInput(f"{path}: not a readable .npy array ({exc})") from None
    try:
        t = TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return (t.name or None), numpy_helper.to_array(t)
    except Exception as exc:
        raise _BadInput(f"{path}: not a .npy file or a TensorProto ({exc})") from None


def _named(specs: list[str], names: list[str], what: str, sess=None) -> dict:
    """NAME=FILE or FILE specs resolved to {name: array} against the graph's ``names``, read
    within ``sess``'s budgets; a given input of another element type than the model declares is
    refused here, naming the input and the file."""
    from tapescope.core.names import shown

    out = {}
    for i, spec in enumerate(specs):
        name, path = (spec.split("=", 1) if "=" in spec and not os.path.isfile(spec)
                      else (None, spec))
        try:
            pb_name, arr = _read_array(path, sess.limits if sess is not None else None)
        except _BadInput as exc:
            guess = name or (names[i] if i < len(names) else None)
            if not guess:
                raise
            raise _BadInput(f"{what} '{shown(guess)}': {exc}") from None
        name = name or pb_name or (names[i] if i < len(names) else None)
        if name is None:
            raise _BadInput(f"{path}: cannot tell which {what} it is; write NAME={path}")
        if name not in names:
            raise _BadInput(f"{path}: {what} '{shown(name)}' is not one of the model's "
                            f"({', '.join(shown(n) for n in names)})")
        if sess is not None and what == "input":
            _check_dtype(sess, name, path, arr)
        out[name] = arr
    return out


def _check_dtype(sess, name: str, path: str, arr) -> None:
    """The given array's element type is the one the model declares for input ``name``."""
    from tapescope.core.names import shown
    from tapescope.core.onnx.loader import np_dtype

    for vi in sess.model.graph.input:
        if vi.name != name or not vi.type.HasField("tensor_type"):
            continue
        try:
            want = np_dtype(vi.type.tensor_type.elem_type)
        except Exception:  # an element type numpy does not know: the run says so
            return
        if arr.dtype != want:
            kind = {"U": " (strings)", "S": " (bytes)", "c": " (complex numbers)"}.get(
                arr.dtype.kind, "")
            raise _BadInput(f"input '{shown(name)}': {path}: dtype {arr.dtype}{kind}, the model "
                            f"declares {want}")


def _stats(a) -> str:
    import numpy as np

    if a.size == 0 or (a.dtype.kind not in "fiub" and str(a.dtype) != "bfloat16"):
        return ""  # (bfloat16 is ml_dtypes' kind V)
    f = a.astype(np.float64)
    return f"min {np.nanmin(f):.6g}  max {np.nanmax(f):.6g}  mean {np.nanmean(f):.6g}"


#: the default tolerance of a floating output by its type: (rtol, atol, atol scales with the
#: expected output's largest magnitude). A half type's rtol is about its epsilon (float16 2^-10,
#: bfloat16 2^-7): one rounding of the output. Its atol is that epsilon of the output's scale:
#: the reference rounds each node's output to the half type (core.onnx.half), onnxruntime
#: computes in float32 and rounds once at the end, and the two differ by up to ~0.6 float16
#: epsilon of the output's largest magnitude where an output cancels to near 0 (measured in
#: tests/core/onnx/test_half_executor.py). float32 and float64 keep 1e-4 / 1e-5.
HALF_TOLERANCE = {"float16": (1e-3, 2.0 ** -10), "bfloat16": (8e-3, 2.0 ** -7)}
WIDE_TOLERANCE = (1e-4, 1e-5)


def tolerance(got, want, rtol=None, atol=None) -> tuple[float, float, str]:
    """(rtol, atol, how it was chosen) for comparing ``got`` with ``want``: the given ones,
    else by the coarser floating type of the two (a half type: see HALF_TOLERANCE)."""
    import numpy as np

    names = {str(got.dtype), str(want.dtype)}
    half = next((t for t in HALF_TOLERANCE if t in names), None)
    if half is None:
        r, a = WIDE_TOLERANCE
        kind = next((t for t in ("float32", "float64") if t in names), str(got.dtype))
        how = f"{kind}: rtol {rtol if rtol is not None else r:g}, " \
              f"atol {atol if atol is not None else a:g}"
        return (rtol if rtol is not None else r), (atol if atol is not None else a), how
    r, eps = HALF_TOLERANCE[half]
    w = want.astype(np.float64)
    w = w[np.isfinite(w)]
    scale = float(np.abs(w).max()) if w.size else 0.0
    a = eps * scale
    rtol = r if rtol is None else rtol
    if atol is None:
        atol = a
        at = f"atol {a:.3g} = 2^{int(np.log2(eps))} x max|expected| {scale:.3g}"
    else:
        at = f"atol {atol:g}"
    return rtol, atol, f"{half}: rtol {rtol:g}, {at}"


def _compare(name, got, want, rtol=None, atol=None) -> tuple[bool, str]:
    import numpy as np

    from tapescope.core.names import shown

    name = shown(name)
    if got.shape != want.shape:
        return False, f"{name}: shape {got.shape}, expected {want.shape}"
    if got.dtype.kind in "fc" or want.dtype.kind in "fc" \
            or "bfloat16" in (str(got.dtype), str(want.dtype)):  # ml_dtypes' kind is V
        rtol, atol, how = tolerance(got, want, rtol, atol)
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        diff = np.abs(g - w)
        diff = diff[np.isfinite(diff)]
        mx = float(diff.max()) if diff.size else 0.0
        rel = np.abs(g - w) / np.maximum(np.abs(w), np.finfo(np.float64).tiny)
        rel = rel[np.isfinite(rel)]
        mr = float(rel.max()) if rel.size else 0.0
        n = int(bad.sum())
        verdict = "ok" if n == 0 else f"DIFFERS at {n} of {got.size}"
        at = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
        first = "" if n == 0 else f", first at {at}"
        return n == 0, f"{name}: {verdict} (max abs {mx:.3g}, max rel {mr:.3g}{first}; {how})"
    eq = np.array_equal(got, want)
    return eq, f"{name}: {'ok' if eq else 'DIFFERS'} (exact)"


def _ids_hint(args, feeds, exc) -> str:
    """What to give when generated integer ids indexed out of a table: their --input."""
    from tapescope.core.names import shown

    if args.input or not feeds or "index out of range" not in str(exc):
        return ""
    ints = [shown(k) for k, v in feeds.items() if getattr(v, "dtype", None) is not None
            and v.dtype.kind in "iu"]
    if not ints:
        return ""
    return (f"; the generated integer inputs ({', '.join(ints)}) were drawn in [0, 10) or the "
            "rows of the constant table they index: give ids within range with "
            + " ".join(f"--input {k}=FILE.npy" for k in ints))


def run(args: argparse.Namespace) -> int:
    """Run the model; 0 ok, 1 outputs differ, 2 bad model or input."""
    import numpy as np

    from tapescope.core.onnx import OnnxError, Session, default_inputs

    if args.example and args.model or not (args.example or args.model):
        print("tapescope onnx: give MODEL.onnx or --example NAME (one of them)", file=sys.stderr)
        return 2
    if args.example:  # the shipped model, and its input/expected files unless given
        from tapescope.resources import onnx_example

        model, inputs, expected = onnx_example(args.example)
        args.model = str(model)
        args.input = args.input or inputs
        args.expected = args.expected or [expected]
    from tapescope.core.progress import Ticks, file_label, progress

    try:
        # a terminal sees the load, then the nodes and loop iterations run (the executor's
        # cancel question, asked between them, counts them)
        with progress(file_label("loading", args.model)) as bar:
            sess = Session(args.model, mode=args.mode, limits=limits_from(args),
                           cancel=Ticks(bar))
        feeds = _named(args.input, sess.input_names, "input", sess) if args.input \
            else default_inputs(sess, args.seed)
        generated = not args.input
        expected_specs = [s for group in args.expected for s in group]
        expected = _named(expected_specs, sess.output_names, "output", sess)
        with progress(f"running {os.path.basename(args.model)} (nodes and iterations)") as bar:
            # a training-mode Dropout draws step 0's mask of a training run with --seed
            outs = sess.run(feeds, cancel=Ticks(bar), seed=(args.seed, 0))
    except (OnnxError, _BadInput) as exc:
        if getattr(args, "debug", False):  # the one line stays last, as for every command
            import traceback

            traceback.print_exception(exc)
        print(f"tapescope onnx: {exc}{_ids_hint(args, locals().get('feeds'), exc)}",
              file=sys.stderr)
        return 2
    print(f"model   {args.model}  (opset {sess.lm.opset}, {len(sess.graph.steps)} nodes, "
          f"mode {args.mode})")
    from tapescope.core.names import shown  # names from the file: escaped and cut, never raw

    for name in sess.input_names:
        x = feeds[name]
        src = "generated" if generated else "given"
        print(f"input   {shown(name):20s} {str(x.dtype):8s} {str(tuple(x.shape)):20s} ({src})")
    for name, y in outs.items():
        y = np.asarray(y) if not isinstance(y, list) else y
        if isinstance(y, list):
            print(f"output  {shown(name):20s} sequence of {len(y)}")
            continue
        print(f"output  {shown(name):20s} {str(y.dtype):8s} {str(tuple(y.shape)):20s} "
              f"{_stats(y)}")
    if not expected:
        return 0
    ok_all = True
    for name, want in expected.items():
        ok, line = _compare(name, np.asarray(outs[name]), want, args.rtol, args.atol)
        ok_all &= ok
        print(f"check   {line}")
    if args.rtol is not None and args.atol is not None:
        used = f"rtol {args.rtol:g}, atol {args.atol:g}"
    else:  # each check line says its own
        used = "tolerance by each output's type, as each check line says"
    print(f"result  {'PASS' if ok_all else 'FAIL'} ({used})")
    return 0 if ok_all else 1
