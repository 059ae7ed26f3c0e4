"""An ONNX model as a workload: its weights are the parameters, one import per step is the
episode, a default loss makes an inference model trainable (docs/workloads.md).

Spec strings (``--workload``, ``SessionConfig.workload``): ``onnx:PATH`` or ``PATH.onnx`` trains
the model's own weights; ``onnx+reinit:PATH`` first replaces them with seeded He/Glorot values
(the onnx package's light models ship constant weights whose activations overflow).

The loss: a scalar first output is the model's own loss. Otherwise, when the first output is
``[N, K]`` logits (K > 1) — or a Softmax over them, whose input is then taken — the loss is the
cross-entropy against a seeded random class per row (an input leaf ``targets``, new each step);
anything else trains on the mean of the first output.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tapescope.core import ops, optim, precision
from tapescope.core.names import shown
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.limits import Limits
from tapescope.core.tape import Tape, Var
from tapescope.core.workload import Workload

PREFIX, PREFIX_REINIT = "onnx:", "onnx+reinit:"
# a model to train: the executor's budgets for elements (2**27: vgg19's 25088x4096 weight
# fits) and bytes (from the machine's memory), charged with what the import holds on the tape
# (its values and their gradients) before it records them; no practical cap on work (vgg19 is
# ~2e10 multiply-adds a step). A 111-byte file once made the tape hold a 2**28-element MatMul
# and the run peak at 7.4 GB (issue 49): --max-elements / --max-bytes raise them for a model
# you trust
TRAIN_LIMITS = Limits(max_work=1 << 50)


def is_model_spec(spec: str) -> bool:
    """Whether a workload spec names an ONNX model."""
    return spec.startswith((PREFIX, PREFIX_REINIT)) or spec.lower().endswith(".onnx")


def model_dtype(path: str) -> str | None:
    """The model's floating precision (``float32``, ``float64``, ``float16``, ``bfloat16``):
    its first floating graph input's, else its first floating initializer's; None when it has
    neither or the file cannot be read (the import then says why). Reads the file as data."""
    import onnx

    from tapescope.core.onnx.lowerings import model_precision

    try:
        m = onnx.load(path, load_external_data=False)
    except Exception:
        return None
    return model_precision(m.graph)


def model_spec(path: str, reinit: bool = False) -> str:
    """The workload spec of ``path`` (``onnx:PATH`` or ``onnx+reinit:PATH``)."""
    return (PREFIX_REINIT if reinit else PREFIX) + str(path)


def parse_spec(spec: str) -> tuple[str, bool]:
    """(path, reinit) of a model spec."""
    if spec.startswith(PREFIX_REINIT):
        return spec[len(PREFIX_REINIT):], True
    if spec.startswith(PREFIX):
        return spec[len(PREFIX):], False
    return spec, False


def logits_of(out: Var) -> Var:
    """The Var a classification loss should see: the input of a final Softmax (also through
    the reshapes of an opset < 13 Softmax), else ``out`` itself; ``[N, K, 1, 1]`` is reshaped
    to ``[N, K]`` (recorded)."""
    t = out.tape
    n = out.node
    if n.op == "reshape" and t.node(n.inputs[0]).op == "softmax":
        n = t.node(n.inputs[0])
    if n.op == "softmax" and n.attrs["axis"] % len(n.shape) == len(n.shape) - 1:
        out = t.var(n.inputs[0])
    if len(out.shape) > 2 and all(d == 1 for d in out.shape[2:]):  # [N, K, 1, 1]: pooled logits
        out = ops.reshape(out, out.shape[:2])
    return out


def loss_kind(out: Var, sequence: bool = False) -> tuple[str, int]:
    """("given" | "cross_entropy" | "mean", number of classes) for a model's first output:
    a scalar is the loss; [N, K] logits, or [B, T, V] ones of a model with an integer input
    (``sequence``: token ids), train on cross-entropy; anything else on its mean."""
    if out.node.size == 1:
        return "given", 0
    lg = logits_of(out)
    if len(lg.shape) == 2 and lg.shape[1] > 1:
        return "cross_entropy", lg.shape[1]
    if sequence and len(lg.shape) == 3 and lg.shape[2] > 1:
        return "cross_entropy", lg.shape[2]
    return "mean", 0


def _role(tape: Tape, pid: int, users: dict[int, list[tuple[int, int]]]) -> tuple[str, int]:
    """How parameter ``pid`` is used: (first real consumer's op, its input slot), following
    reshape/transpose chains."""
    i = pid
    while True:
        u = users.get(i, [])
        if not u:
            return "", 0
        j, k = u[0]
        node = tape.node(j)
        op = node.op
        if op in ("reshape", "transpose") or (op == "mul" and _is_ones(tape, node.inputs[1 - k])):
            i = j  # a view, or a broadcast (Expand's x * ones): the role is its user's
            continue
        if op == "layer_norm":  # the row op's scale (slot 1): a scale
            return ("mul", k) if k == 1 else (op, k)
        return op, k


def _is_ones(tape: Tape, i: int) -> bool:
    """Whether tape value ``i`` is a constant of ones (Expand's ``x * ones``)."""
    n = tape.node(i)
    return n.op == "const" and bool(np.all(np.asarray(tape.value(i)) == 1))


def merged_parameters_note(sess) -> list[str]:
    """One line naming the parameters a torch.export (dynamo) file lists but does not hold,
    not even folded, and the import cannot split out again (``exported_merges`` splits fresh
    ones and zeros merged into one initializer): a tied weight, equal random values, a zero
    bias the optimizer dropped. They do not train on their own (docs/models.md, "What the
    import makes trainable")."""
    from tapescope.core.onnx.importer import exported_merges, exported_parameters
    from tapescope.core.onnx.state_dict import folded_batch_norms

    export = exported_parameters(sess.model.graph)
    if export is None:
        return []
    folded = {n for names in export[1].values() for n in names}
    split = {t for m in exported_merges(sess.model.graph, sess.graph.inits).values()
             for t in m.values()}
    gone = sorted(t for t in export[0]
                  if t not in sess.graph.inits and t not in folded and t not in split)
    bn = folded_batch_norms(sess.model.graph)

    def listed(names: list[str]) -> str:
        return ", ".join(repr(t[:120]) for t in names[:8]) + (" ..." if len(names) > 8 else "")

    notes = []
    if [t for t in gone if t in bn]:
        notes.append(f"parameters {listed([t for t in gone if t in bn])} are not in the file "
                     "(the exporter folded each BatchNorm into the Conv before it, as in eval "
                     "mode, even one in training mode: export with dynamo=False and "
                     "training=torch.onnx.TrainingMode.TRAINING to train it)")
    if [t for t in gone if t not in bn]:
        notes.append(f"parameters {listed([t for t in gone if t not in bn])} are not in the "
                     "file (the exporter merged each into an initializer of equal value, a "
                     "tied weight, or dropped a zero one): they do not train on their own")
    return notes


def reinit_values(tape: Tape, params: dict[str, Var], values: dict[str, Any], graph_steps,
                  seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Fresh parameter values by role, and the batch-norm statistics to override.

    conv2d (and conv_transpose2d) weights: He normal, std sqrt(2 / fan_in), fan_in = the
    product of the weight's dims past the first (C/group * kh * kw); matmul
    weights: Glorot uniform, limit sqrt(6 / (fan_in + fan_out)); what a ``mul`` or ``div``
    consumes (a scale, a LayerNormalization's scale): ones; what an ``add``/``sub`` consumes (a
    bias): zeros, a broadcast's (Expand) role is its user's; running means
    0 and variances 1 (the workload then calibrates them on batch 0). One generator seeded by
    ``seed`` draws in parameter order.
    """
    users: dict[int, list[tuple[int, int]]] = {}
    for n in tape.nodes:
        for k, j in enumerate(n.inputs):
            users.setdefault(j, []).append((n.id, k))
    rng = np.random.default_rng((seed, 0x5EED))
    fresh = {}
    for name, v in params.items():
        shape = v.shape
        op, _ = _role(tape, v.id, users)
        if op in ("conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d"):
            fan_in = int(np.prod(shape[1:]))
            fresh[name] = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif op in ("matmul", "bmm") or (len(shape) >= 2 and op not in ("mul", "div", "add",
                                                                          "sub")):
            rest = int(np.prod(shape[2:])) if len(shape) > 2 else 1
            fan_in, fan_out = shape[1] * rest, shape[0] * rest
            lim = np.sqrt(6.0 / (fan_in + fan_out))
            fresh[name] = rng.uniform(-lim, lim, shape)
        elif op in ("mul", "div"):
            fresh[name] = np.ones(shape)
        else:
            fresh[name] = np.zeros(shape)
    stats = {}
    for st in graph_steps:
        if st.node.op_type == "BatchNormalization":
            for k, fill in ((3, 0.0), (4, 1.0)):
                nm = st.node.input[k] if len(st.node.input) > k else ""
                if nm in values and isinstance(values[nm], np.ndarray):
                    stats[nm] = np.full(values[nm].shape, fill, values[nm].dtype)
    return fresh, stats


def _input_specs(sess, shapes: dict[str, tuple[int, ...]]):
    """{input: (shape, dtype)} at the declared shapes, ``shapes`` filling (or checking) the
    dims; and one note per input whose dynamic dims were chosen (1 unless --shape says)."""
    from tapescope.core.onnx.loader import np_dtype

    inits = set(sess.graph.inits)
    specs, notes = {}, []
    declared = [vi for vi in sess.model.graph.input if vi.name not in inits]
    names = {vi.name for vi in declared}
    for k in shapes:
        if k not in names:
            raise OnnxError(f"--shape {k}=...: the model has no input {k!r} (its inputs: "
                            f"{', '.join(sorted(names))})", file=sess.label)
    for vi in declared:
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim)
        want = shapes.get(vi.name)
        if want is not None and len(want) != len(dims):
            raise OnnxError(f"--shape {vi.name}={','.join(map(str, want))}: the input has rank "
                            f"{len(dims)}", file=sess.label)
        shape = []
        dynamic = []
        for i, d in enumerate(dims):
            if d.HasField("dim_value"):
                if want is not None and want[i] != d.dim_value:
                    raise OnnxError(f"--shape {vi.name}: axis {i} is fixed at {d.dim_value}, "
                                    f"not {want[i]}", file=sess.label)
                shape.append(d.dim_value)
            else:
                shape.append(want[i] if want is not None else 1)
                dynamic.append(f"{d.dim_param or f'axis {i}'}={shape[-1]}")
        if dynamic:
            notes.append(f"input {vi.name!r}: dynamic {', '.join(dynamic)}"
                         + ("" if want is not None else f" (give --shape {vi.name}=...)"))
        from tapescope.core.onnx.limits import check_shape

        check_shape(tuple(shape), f"input {vi.name!r}", sess.limits)
        specs[vi.name] = (tuple(shape), np_dtype(tt.elem_type))
    return specs, notes


def _given_input(name: str, path: str, specs, max_bytes: int | None = None,
                 shape: tuple[int, ...] | None = None, kinds: str = "biuf",
                 takes: str | None = None, steps: int | None = None
                 ) -> tuple[np.ndarray, bool]:
    """--input NAME=FILE.npy or NAME=DIR: (the array, whether it is a stack of per-step
    batches). A file of the input's shape is the same batch every step; one with a leading
    step axis (``[S, *shape]``) is a stack, step i taking slice i; a folder holds one ``.npy``
    per step, sorted by name. Read without pickle or a memory map, each header checked against
    the input's shape, its dtype and the file's size, and the whole against ``max_bytes``,
    before anything is allocated (core.arrayfile). ``shape``/``kinds``/``takes``: an input the
    model does not declare (the targets of the default loss). ``steps``: the run's step count,
    when known: a folder's files past it are not read (a dataset's folder, 5 steps of it)."""
    from tapescope.core.arrayfile import ArrayFileError, read_npy

    if shape is None:
        if name not in specs:
            raise OnnxError(f"--input {name}=...: the model has no input {name!r} (its inputs: "
                            f"{', '.join(sorted(specs))})", file=path)
        shape, dt = specs[name]
        takes = str(np.dtype(dt))
    else:
        dt = None
    folder = os.path.isdir(path)

    def check(got: tuple, dtype: np.dtype, where: str = "", stack_ok: bool = True) -> None:
        if dtype.kind not in kinds:  # strings, complex: no lossless cast to the model's type
            what = {"U": "strings", "S": "bytes", "c": "complex numbers", "f": "floats",
                    "b": "booleans"}.get(dtype.kind, "")
            raise OnnxError(f"--input {name}{where}: dtype {dtype}{f' ({what})' if what else ''}"
                            f", the model takes {takes}", file=path)
        if got == shape or (stack_ok and got[1:] == shape and len(got) == len(shape) + 1):
            return
        tail = (f" (give --shape {name}={','.join(map(str, got[-len(shape):]))} for dynamic "
                "axes)" if dt is not None and len(got) >= len(shape) and shape else "")
        also = (f", or a stack of per-step batches [steps, {', '.join(map(str, shape))}]"
                if stack_ok else " (a folder holds one batch per file)")
        raise OnnxError(f"--input {name}{where}: shape {got}, the model takes {shape}{also}"
                        f"{tail}", file=path)

    def read(f: str, where: str, budget: int | None, stack_ok: bool) -> np.ndarray:
        def checked(got: tuple, dtype: np.dtype) -> None:
            check(got, dtype, where, stack_ok)
            size = int(np.prod(got, dtype=np.int64)) * dtype.itemsize
            if budget is not None and size > budget:  # before it is allocated
                held = f" after {_human(max_bytes - budget)} of the files before it" \
                    if max_bytes is not None and budget < max_bytes else ""
                raise OnnxError(f"--input {name}{where}: {_human(size)} of data{held}, over "
                                f"the {_human(max_bytes)} the inputs may take (raise it with "
                                "--max-bytes)", file=path)

        try:
            return read_npy(f, check=checked)
        except ArrayFileError as exc:
            raise OnnxError(f"--input {name}{where}: not a readable .npy array ({exc})",
                            file=f) from None

    def cast(a: np.ndarray) -> np.ndarray:
        return a if dt is None else a.astype(dt)

    if not folder:
        a = read(path, "", max_bytes, True)
        if a.shape == shape:
            return cast(a), False
        if a.shape[0] == 0:
            raise OnnxError(f"--input {name}: a stack of 0 batches", file=path)
        return cast(a), True
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise OnnxError(f"--input {name}: cannot list the folder ({exc.strerror or exc})",
                        file=path) from None
    bad = [e for e in entries if not e.endswith(".npy")]
    if bad:
        raise OnnxError(f"--input {name}: {shown(bad[0])[:80]!r} is not a .npy file (a folder "
                        "holds one .npy batch per step, sorted by name)", file=path)
    if not entries:
        raise OnnxError(f"--input {name}: the folder holds no .npy file (one per step)",
                        file=path)
    out, left = [], max_bytes
    for e in entries[:steps]:
        a = read(os.path.join(path, e), f" ({e})", left, False)
        if left is not None:
            left -= a.nbytes
        out.append(cast(a))
    return np.stack(out), True


def _human(n: int | None) -> str:
    from tapescope.core.arrayfile import _human as human

    return human(int(n or 0))


def _check_steps(name: str, path: str, held: int, steps: int | None) -> None:
    """A stack of ``held`` batches covers steps 1..held: fewer than --steps is an error."""
    if steps is not None and held < steps:
        raise OnnxError(f"--input {name}: {held} per-step batch{'es' if held != 1 else ''}, "
                        f"--steps {steps} takes {steps} (give at least {steps}, or fewer "
                        "--steps)", file=path)


def _read_weights(path: str, current: dict[str, np.ndarray], sess
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """--weights FILE.safetensors: a state_dict (``safetensors.torch.save_file(
    model.state_dict(), F)``) or weights by initializer name (never pickle, never a memory
    map). The header's names are mapped onto the model first (``state_dict.map_state_dict``:
    exact names, a dynamo file's ``folded_from``, a TorchScript ``onnx::MatMul_N`` by its
    node's scope, transposed) and its shapes checked before any tensor is read; what cannot be
    mapped is one line naming it. Returns ({weight: value}, {constant initializer: value})."""
    from tapescope.core.arrayfile import ArrayFileError, read_safetensors, read_safetensors_header
    from tapescope.core.onnx.state_dict import map_state_dict

    consts = {k: tuple(v.shape) for k, v in sess.graph.inits.items()
              if k not in current and isinstance(v, np.ndarray) and precision.is_float(v.dtype)}
    params = {k: tuple(v.shape) for k, v in current.items()}
    try:
        header = read_safetensors_header(path)
        m = map_state_dict(sess.model.graph, header, params, consts)
        got = read_safetensors(path, m.shapes(params, consts), skip=m.skipped)
    except (ArrayFileError, ValueError) as exc:
        raise OnnxError(f"--weights: {exc}", file=path) from None
    except OSError as exc:
        raise OnnxError(f"--weights: cannot read it ({exc})", file=path) from None
    weights = {k: (np.ascontiguousarray(got[n].T) if t else got[n])
               for n, (k, t) in m.weights.items()}
    return weights, {k: got[n] for n, k in m.constants.items()}


class OnnxWorkload(Workload):
    """An ONNX model trained on the tape: one import per step, the weights as parameters."""

    name = "onnx"

    def __init__(self, path: str | os.PathLike, reinit: bool = False, dtype=np.float64,
                 math: str = "refmath", seed: int = 0, limits: Limits | None = None,
                 inputs: dict[str, str] | None = None,
                 shapes: dict[str, tuple[int, ...]] | None = None,
                 weights: str | None = None, steps: int | None = None) -> None:
        self.path = str(path)
        self.reinit = reinit
        # --input NAME=FILE.npy (one batch every step, or a stack of per-step batches: a
        # leading step axis or a folder), --shape NAME=d0,d1 (dynamic axes), --weights
        # FILE.safetensors (trained weights by initializer name); ``steps``: how many steps
        # the run takes (a stack must hold as many)
        self.given_files = dict(inputs or {})
        self.steps = steps
        self.given_shapes = dict(shapes or {})
        self.weights_file = weights
        if weights and reinit:
            raise OnnxError("give --weights or --reinit, not both", file=self.path)
        self.limits = limits or TRAIN_LIMITS
        self.name = model_spec(os.path.basename(self.path), reinit)
        super().__init__(dtype=dtype, math=math, seed=seed)

    def build(self) -> None:
        from tapescope.core.onnx.executor import Session
        from tapescope.core.onnx.importer import import_to_tape, leaf_name

        if not os.path.isfile(self.path):
            raise OnnxError("no such model file", file=self.path)
        from tapescope.core.onnx.loader import load
        from tapescope.core.onnx.state_dict import restore_dropped_biases

        lm = load(self.path, limits=self.limits)
        # a zero bias dynamo's optimizer dropped is the module's parameter: back, to train
        self.restored_biases = restore_dropped_biases(lm.model)
        # fold=True: the weights (ConstantOfShape in the light models) are computed once, here
        self.sess = Session(lm, fold=True, limits=self.limits)
        self.input_specs, self.input_notes = _input_specs(self.sess, self.given_shapes)
        self.input_notes += merged_parameters_note(self.sess)
        # the default loss's targets are given by their leaf's name (``targets``), read once
        # the loss is known; every other name is one of the model's inputs
        self.target_name = "targets"
        while self.target_name in self.input_specs:
            self.target_name += "_"
        self.given: dict[str, np.ndarray] = {}
        self.given_steps: dict[str, int] = {}  # a stack's name -> how many batches it holds
        budget = self.limits.max_bytes
        for k, f in self.given_files.items():
            if k == self.target_name:
                continue
            self.given[k], stacked = _given_input(k, f, self.input_specs, budget,
                                                  steps=self.steps)
            budget = max(0, budget - self.given[k].nbytes)
            if stacked:
                self.given_steps[k] = len(self.given[k])
                _check_steps(k, f, len(self.given[k]), self.steps)
        # a first import on a scratch tape finds the weights that reach tape ops, their roles
        # and the output; the workload's own tape gets the params first (before the mark)
        scratch = Tape(dtype=self.tape.dtype, math=self.tape.math)
        self.index_bounds: dict[str, int] = {}
        first = import_to_tape(self.sess, scratch, self.batch_inputs(0), limits=self.limits,
                               step_seed=(self.seed, 0), probe=True)
        if first.index_bounds:  # token ids, labels: draw them within the rows, the classes
            self.index_bounds = first.index_bounds
            first = import_to_tape(self.sess, Tape(dtype=self.tape.dtype, math=self.tape.math),
                                   self.batch_inputs(0), limits=self.limits,
                                   step_seed=(self.seed, 0))
            scratch = first.outputs[next(iter(first.outputs))].tape
        # batch norm in training mode: the running statistics after each step (ONNX spec)
        self.running: dict[int, dict[str, np.ndarray]] = {}
        self._step = 0
        values = {k: v.value for k, v in first.params.items()}
        if self.weights_file:
            given, buffers = _read_weights(self.weights_file, values, self.sess)
            values.update(given)
        self.overrides: dict[str, np.ndarray] = {}
        if self.weights_file:  # a state_dict's buffers (running statistics) replace the file's
            self.overrides.update({k: v.astype(self.sess.graph.inits[k].dtype)
                                   for k, v in buffers.items()})
        if self.reinit:
            values, self.overrides = reinit_values(scratch, first.params, first.values,
                                                   self.sess.graph.steps, self.seed)
            if self.overrides:  # batch norm: running statistics from batch 0 with the new weights
                tmp = Tape(dtype=self.tape.dtype, math=self.tape.math)
                fresh = {k: tmp.param(values[k]) for k in first.params}
                calib: dict[str, np.ndarray] = {}
                import_to_tape(self.sess, tmp, self.batch_inputs(0), params=fresh,
                               limits=self.limits, overrides=self.overrides, calibrate=calib)
                self.overrides.update(calib)
        # each weight sits in the scope of its first consumer: grouped with its layer, under
        # PyTorch's name where the exporter renamed it (val_12, onnx::MatMul_135 ->
        # qkv.weight.T: the graph and the JSON show the name the module has)
        from tapescope.core.onnx.state_dict import torch_names

        self.torch_names = torch_names(self.sess.model.graph,
                                       {k: tuple(v.shape) for k, v in first.params.items()})
        users: dict[int, int] = {}
        for n in scratch.nodes:
            for j in n.inputs:
                users.setdefault(j, n.id)
        self.weights = {}
        for k, v in first.params.items():
            user = scratch.node(users[v.id]).name if v.id in users else None
            scope = user.rsplit("/", 1)[0] if user and "/" in user else ""
            name = leaf_name(self.torch_names.get(k, k))
            if scope:
                with self.tape.scope(scope):
                    self.weights[k] = self.tape.param(values[k], name=name)
            else:
                self.weights[k] = self.tape.param(values[k], name=name)
        self.onnx_nodes: list[dict] = []
        self.output_name, out = next(iter(first.outputs.items()))
        has_ids = any(dt.kind in "iu" for _, dt in self.input_specs.values())
        self.loss_kind, self.n_classes = loss_kind(out, sequence=has_ids)
        self.target_shape = logits_of(out).shape[:-1] if self.loss_kind == "cross_entropy" \
            else ()
        if self.target_name in self.given_files:
            self._given_targets(self.given_files[self.target_name], budget)
        self._check_given_ids()

    def _given_targets(self, path: str, budget: int) -> None:
        """--input targets=FILE.npy: the class of each row (position) of the default
        cross-entropy, integers in [0, classes), one array or a stack per step."""
        name = self.target_name
        if self.loss_kind != "cross_entropy":
            raise OnnxError(f"--input {name}=...: the loss is the {self.describe_loss()}, "
                            "which takes no targets (they go with [N, K] or, for token ids, "
                            "[B, T, V] logits)", file=path)
        a, stacked = _given_input(name, path, {}, budget, shape=tuple(self.target_shape),
                                  kinds="iu", takes=f"integer classes in [0, {self.n_classes})",
                                  steps=self.steps)
        if a.size and (a.min() < 0 or a.max() >= self.n_classes):
            raise OnnxError(f"--input {name}: classes span [{a.min()}, {a.max()}], the "
                            f"logits have {self.n_classes} (give values in [0, "
                            f"{self.n_classes}))", file=path)
        self.given[name] = a
        if stacked:
            self.given_steps[name] = len(a)
            _check_steps(name, path, len(a), self.steps)

    def _check_given_ids(self) -> None:
        """Every step of a given integer input within the table it indexes (a stack's later
        steps too, before any step runs)."""
        for k, n in self.index_bounds.items():
            a = self.given.get(k)
            if a is None or k not in self.given_steps or not a.size:
                continue
            bad = np.flatnonzero((a.reshape(len(a), -1) >= n).any(1)
                                 | (a.reshape(len(a), -1) < 0).any(1))
            if bad.size:
                s = a[bad[0]]
                raise OnnxError(f"--input {k}: step {bad[0] + 1}'s ids span [{s.min()}, "
                                f"{s.max()}], the table they index has {n} rows (give values "
                                f"in [0, {n}))", file=self.given_files[k])

    def describe_loss(self) -> str:
        """One line: what the loss is."""
        if self.loss_kind == "given":
            return f"the model's scalar output {self.output_name!r}"
        if self.loss_kind == "cross_entropy":
            return (f"cross-entropy of {self.output_name!r}'s logits against a seeded random "
                    f"class per position ({self.n_classes} classes, targets "
                    f"{list(self.target_shape)})")
        return f"mean of output {self.output_name!r}"

    def batch_inputs(self, step: int) -> dict[str, np.ndarray]:
        """The model's inputs of minibatch ``step``: standard normal floats, integers 0..9."""
        rng = self.step_rng(step)
        out = {}
        for k, (shape, dt) in self.input_specs.items():
            if k in getattr(self, "given", {}):
                out[k] = self._given_at(k, step)
            elif precision.is_float(dt):
                out[k] = rng.standard_normal(shape).astype(dt)
            else:  # ids within the rows of the Gather they index (else 0..9)
                out[k] = rng.integers(0, self.index_bounds.get(k, 10), size=shape).astype(dt)
        return out

    def _given_at(self, name: str, step: int) -> np.ndarray:
        """Given input ``name`` at ``step`` (from 1; 0, the episode before any, as step 1): a
        stack's slice ``step - 1``, else the one array."""
        a = self.given[name]
        held = self.given_steps.get(name)
        if held is None:
            return a
        i = max(step, 1) - 1
        if i >= held:
            raise OnnxError(f"--input {name}: step {step} needs batch {i + 1}, the stack holds "
                            f"{held} (give at least as many as the steps run)",
                            file=self.given_files[name])
        return a[i]

    def batch(self, step: int) -> dict[str, np.ndarray]:
        data = self.batch_inputs(step)
        if self.loss_kind == "cross_entropy":
            if self.target_name in self.given:
                data[self.target_name] = self._given_at(self.target_name, step).astype(
                    np.float64)
            else:
                rng = self.step_rng(step, 1)
                data[self.target_name] = rng.integers(0, self.n_classes,
                                                      self.target_shape).astype(np.float64)
        return data

    def record(self, step: int = 0, batch: dict[str, np.ndarray] | None = None) -> Var:
        self._step = step  # the episode's dropout masks and running statistics are per step
        return super().record(step, batch)

    def episode(self, data: dict[str, Var]) -> Var:
        from tapescope.core.onnx.importer import import_to_tape

        feeds = {k: v for k, v in data.items() if k in self.input_specs}
        step = self._step
        over = {**self.overrides, **self.running.get(step - 1, {})}
        imp = import_to_tape(self.sess, self.tape, feeds, params=self.weights,
                             limits=self.limits, overrides=over, step_seed=(self.seed, step))
        if imp.running:
            self.running[step] = imp.running
            self.running.pop(step - 2, None)
        # what the import folded from this step's data (ids' views, masks, dropout masks) is
        # data too: a device replay uploads every data leaf each step
        for k, v in imp.data_leaves.items():
            data[f"onnx:{k}"] = v
        self.onnx_nodes = imp.onnx_nodes
        out = imp.outputs[self.output_name]
        if self.loss_kind == "given":
            return ops.reshape(out, (), name="loss") if out.shape != () else out
        if self.loss_kind == "cross_entropy":
            return ops.cross_entropy(logits_of(out), data[self.target_name], name="loss")
        return ops.mean(out, name="loss")

    def make_optimizer(self) -> optim.Optimizer:
        # NOTE: lr 1e-4: batch norm here is inference-mode (frozen statistics), so Adam's
        # sign-coherent first step of 1e-3 on every weight took resnet50's loss from 9 to 1.8e4;
        # at 1e-4 every light model stays within 6..16 over its first steps
        opt = optim.Adam(self.tape, lr=1e-4)
        opt.add_all()
        return opt


def load_model(spec: str, **kwargs: Any) -> OnnxWorkload:
    """The workload of a model spec (``onnx:PATH``, ``onnx+reinit:PATH``, ``PATH.onnx``, each
    optionally followed by ``OPTIONS``: see ``with_options``)."""
    spec, opts = split_options(spec)
    path, reinit = parse_spec(spec)
    return OnnxWorkload(path, reinit=reinit, **opts, **kwargs)


OPTIONS = "::"  # separates a model spec's options: onnx:PATH::input=x=/a/x.npy::shape=x=2,3


def with_options(spec: str, inputs: dict[str, str] | None = None,
                 shapes: dict[str, tuple[int, ...]] | None = None,
                 weights: str | None = None, limits: dict[str, int] | None = None,
                 steps: int | None = None) -> str:
    """``spec`` carrying --input / --shape / --weights (and --max-elements / --max-bytes as
    ``limits``; the run's --steps, which a stack of per-step inputs must cover), so PairRunner
    and the live worker, which take a spec string, build the same workload."""
    parts = [spec]
    parts += [f"input={k}={v}" for k, v in (inputs or {}).items()]
    parts += [f"shape={k}={','.join(map(str, v))}" for k, v in (shapes or {}).items()]
    if weights:
        parts.append(f"weights={weights}")
    if steps and inputs:
        parts.append(f"steps={int(steps)}")
    parts += [f"{k}={int(v)}" for k, v in (limits or {}).items()]
    return OPTIONS.join(parts)


def split_options(spec: str) -> tuple[str, dict]:
    """(the spec, OnnxWorkload's keyword options) of a spec made by ``with_options``."""
    head, *rest = spec.split(OPTIONS)
    inputs: dict[str, str] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    weights = None
    limits: dict[str, int] = {}
    steps = None
    for r in rest:
        kind, _, val = r.partition("=")
        if kind == "input":
            k, _, f = val.partition("=")
            inputs[k] = f
        elif kind == "shape":
            k, _, dims = val.partition("=")
            shapes[k] = parse_dims(dims, k)
        elif kind == "weights":
            weights = val
        elif kind in ("max_elements", "max_bytes") and val.isdigit() and int(val) > 0:
            limits[kind] = int(val)
        elif kind == "steps" and val.isdigit() and int(val) > 0:
            steps = int(val)
        else:
            raise OnnxError(f"unknown model option {kind!r}", file=head)
    opts = {"inputs": inputs, "shapes": shapes, "weights": weights,
            "limits": TRAIN_LIMITS.with_(**limits) if limits else None, "steps": steps}
    return head, {k: v for k, v in opts.items() if v}


def parse_dims(text: str, name: str = "") -> tuple[int, ...]:
    """``2,3,224`` -> (2, 3, 224); each a positive integer, else ValueError naming it."""
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"--shape {name}={text}: give positive integers, e.g. {name}=2,3")
    return dims
