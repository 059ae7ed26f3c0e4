"""The data tapescope ships (example tapes and models, a workload file, the style sheet), found
through the installed package with importlib.resources, never through a checkout's path: the
wheel carries this folder as the `resources` package (pyproject.toml's package-data)."""

from __future__ import annotations

import atexit
import contextlib
from importlib.resources import as_file, files
from pathlib import Path

# `tapescope gui --example NAME` and File > Open example: what each name opens
EXAMPLES: dict[str, str] = {
    "mlp": "tapes/mlp.tape",
    "transformer": "tapes/transformer.tape",
    "torch_cnn": "models/torch_cnn.onnx",
}
# `tapescope onnx --example NAME`: models/NAME.onnx with models/NAME.input.<input>.npy and
# models/NAME.expected.<output>.npy beside it
ONNX_EXAMPLES = ("tiny_mlp", "tiny_convnet", "torch_cnn")
_FILES = contextlib.ExitStack()  # extracted copies (a zipped install) live as long as the process
atexit.register(_FILES.close)


def resource_path(relative: str) -> Path:
    """A file on disk for ``relative`` (e.g. "style.qss", "models/tiny_mlp.onnx"); raises
    FileNotFoundError naming it when the install lacks it."""
    ref = files(__name__).joinpath(*relative.split("/"))
    if not ref.is_file():
        raise FileNotFoundError(f"tapescope's {relative} is not installed (resources/{relative} "
                                f"in the package)")
    return _FILES.enter_context(as_file(ref))


def example_path(name: str) -> Path:
    """The shipped example called ``name`` (one of EXAMPLES)."""
    if name not in EXAMPLES:
        raise KeyError(f"no example {name!r} (examples: {', '.join(EXAMPLES)})")
    return resource_path(EXAMPLES[name])


def onnx_example(name: str) -> tuple[Path, list[str], list[str]]:
    """(model, ["INPUT=FILE", ...], ["OUTPUT=FILE", ...]) of a shipped ONNX example."""
    if name not in ONNX_EXAMPLES:
        raise KeyError(f"no ONNX example {name!r} (examples: {', '.join(ONNX_EXAMPLES)})")
    model = resource_path(f"models/{name}.onnx")
    found: dict[str, list[str]] = {"input": [], "expected": []}
    for ref in sorted(files(__name__).joinpath("models").iterdir(), key=lambda r: r.name):
        parts = ref.name.split(".")
        if len(parts) == 4 and parts[0] == name and parts[1] in found and parts[3] == "npy":
            found[parts[1]].append(f"{parts[2]}={resource_path('models/' + ref.name)}")
    return model, found["input"], found["expected"]
