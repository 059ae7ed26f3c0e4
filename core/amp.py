"""Mixed precision (``--amp float16|bfloat16``): float32 master weights and optimizer state, the
episode computed on a half tape, and for float16 a loss scale (docs/reference-order.md, "Mixed
precision"). Mirrors ``torch.amp.GradScaler``'s update rule; where we differ is written there.

Per step: the half tape's parameters hold the masters rounded once to the half type; backward
is seeded with the loss scale ``S`` (a power of two, exact in the half type); each parameter's
half gradient is widened to float32 and multiplied by ``float32(1 / S)`` (exact: a power of
two); if any unscaled gradient is inf or NaN the step is skipped (no update, Adam's ``t`` does
not advance) and ``S`` halves, else the float32 optimizer updates the masters and ``S`` doubles
after ``interval`` clean steps in a row; the tape's parameters are the masters rounded again.
bfloat16 has float32's exponent range: no scale (``S = 1``), nothing is skipped (as PyTorch,
whose GradScaler is for float16).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FLOAT16_MAX_SCALE", "LossScaler"]

# 2**16 (torch's default init_scale) is inf in float16: our loss is a float16 node, so its seed
# must be finite there (torch's autocast loss is float32); 2**15 is the largest power of two.
FLOAT16_MAX_SCALE = 2.0 ** 15


@dataclass
class LossScaler:
    """The loss scale and its update: dynamic (GradScaler's rule) or static (``dynamic=False``:
    the scale never changes; an overflowing step is still skipped)."""

    scale: float = FLOAT16_MAX_SCALE
    dynamic: bool = True
    growth: float = 2.0
    backoff: float = 0.5
    interval: int = 2000
    max_scale: float = FLOAT16_MAX_SCALE
    tracker: int = 0  # clean steps since the last change
    skips: bool = True  # False for bfloat16: no scale, nothing skipped

    @classmethod
    def for_dtype(cls, dtype: str, static: float | None = None) -> LossScaler:
        """The scaler of ``--amp dtype`` (``static``: a fixed scale, a power of two)."""
        if dtype == "bfloat16":
            return cls(scale=1.0, dynamic=False, skips=False, max_scale=1.0)
        if static is None:
            return cls()
        s = float(static)
        import math

        if not (0 < s <= FLOAT16_MAX_SCALE) or math.frexp(s)[0] != 0.5:
            raise ValueError(f"--loss-scale {static}: a power of two from 2**-24 to 2**15 "
                             "(the seed must be exact in float16)")
        return cls(scale=s, dynamic=False, max_scale=s)

    def update(self, found_inf: bool) -> None:
        """After a step: GradScaler.update's rule (capped at ``max_scale``)."""
        if not self.dynamic:
            return
        if found_inf:
            self.scale *= self.backoff
            self.tracker = 0
            return
        self.tracker += 1
        if self.tracker == self.interval:
            self.scale = min(self.scale * self.growth, self.max_scale)
            self.tracker = 0

    def state(self) -> dict:
        """scale, tracker (for the device optimizer and reports)."""
        return {"scale": self.scale, "tracker": self.tracker}

