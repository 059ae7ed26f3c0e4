"""Captures: the user's own PyTorch run, recorded below autograd (``app.capture``, which imports
torch) and judged here against the exact reference (numpy only; core imports no torch).

- ``core.capture.file``: the capture file (docs/capture.md): ``save`` / ``load`` with the tape
  file's care (no pickle, sizes checked before allocating, a digest of every array (XXH3-128,
  or SHA-256 in files before it) and a SHA-256 of the
  header, regular files only, one-line errors naming the file).
- ``core.capture.judge``: ``judge(capture)``: per op, per step, the op re-run by the reference on
  its own recorded inputs (*introduced*) and the whole step re-run from the step's recorded
  initial state, chaining the reference's outputs by value id (total = introduced + *inherited*).
- ``core.capture.aten_ref`` (another engineer's): the reference form of each aten op,
  ``reference(op, args, kwargs) -> list[np.ndarray]``, raising ``NoReference``.

An op's outputs (shared with ``aten_ref``): for a functional op, its returned tensors flattened in
order (tuples and lists flattened, None skipped); for an op that writes an argument (schema alias
info ``Tensor(a!)``: in-place, ``out=``, ``_foreach_*_``), the written arguments in argument order
(each tensor of a written list), then any returned tensor without alias info.
"""
