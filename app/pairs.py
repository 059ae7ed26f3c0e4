"""Where a pair runs (no Qt): ``open_pair(config)`` is a ``PairRunner`` here, or with
``config.worker`` an ``app.remote.RemotePair``: the whole pair in the worker's process (its
machine), only step records coming back. Both answer the same calls (``Pair``)."""

from __future__ import annotations

from typing import Any, Protocol

from tapescope.app.runs import PairRunner, RunSpec, SessionConfig, StepResult

__all__ = ["Pair", "open_pair"]


class Pair(Protocol):
    """What the CLI, the report and the live worker use of a pair, wherever it runs."""

    config: SessionConfig
    ref_spec: RunSpec
    cand_spec: RunSpec
    nodes: tuple
    step_index: int
    inject: Any

    @property
    def plan(self) -> Any:
        """The fused side's plan (``to_json()``), or None."""

    @property
    def device_kind(self) -> str:
        """The device's kind."""

    def describe_device(self) -> str:
        """The device line."""

    def stats(self) -> dict | None:
        """The device program's launch and transfer counts."""

    def step(self, provenance: bool | None = None) -> StepResult:
        """One step of both runs, compared."""

    def compare_params(self) -> Any:
        """The parameters after the last update (a ``core.parity.ParityReport``)."""

    def arrays(self, node_id: Any) -> dict[str, Any]:
        """One node's arrays on both sides (``{"step", "ref": {...}, "cand": {...}}``)."""

    def close(self) -> None:
        """Let go of what the pair holds (a worker process)."""


def open_pair(config: SessionConfig, **kw: Any) -> Pair:
    """The pair of ``config``: here, or in ``config.worker`` (``PairRunner``'s keywords)."""
    if config.worker is not None:
        from tapescope.app.remote import RemotePair  # (a local run never loads the worker protocol)

        return RemotePair(config, **kw)
    return PairRunner(config, **kw)

