"""Regenerate the example tapes: one recorded, backward-complete episode per built-in workload.

    python resources/tapes/make_tapes.py

Each file is step 0 of the workload with seed 0 after backward, so the app opens it with values
and gradients to inspect and the stepper has something to walk. tests/core/test_example_tapes.py
checks that these files still load and still equal a fresh recording bit for bit.
"""

from pathlib import Path

from tapescope.core import tapefile, workloads

HERE = Path(__file__).resolve().parent


def record(name: str):
    """The workload's first episode after backward, and the meta saved with it."""
    wl = workloads.get(name, seed=0)
    loss = wl.record(0)
    wl.tape.backward(loss)
    return wl.tape, {"workload": name, "step": 0, "seed": 0, "loss": loss.id}


def main() -> None:
    for name in ("mlp", "transformer"):
        tape, meta = record(name)
        path = tapefile.save(tape, HERE / f"{name}.tape", meta=meta)
        print(f"wrote {path} ({path.stat().st_size} bytes, {len(tape)} nodes)")


if __name__ == "__main__":
    main()
