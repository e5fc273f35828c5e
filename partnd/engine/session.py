"""What every entry point does around the training loop: resolve the config, check the run
directory, join the process group, then (rank 0) create the directory and record the run.

The order matters under torchrun: every rank validates the directory *before* rank 0 creates or
clears it, and the ranks meet at a barrier in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from partnd._validation import check
from partnd.engine.config import TrainConfig
from partnd.engine.distributed import DistributedContext, setup_distributed
from partnd.engine.run_dir import RunDir, run_metadata

__all__ = ["Session", "open_session", "resolve_config"]

ConfigT = TypeVar("ConfigT", bound=TrainConfig)


def resolve_config(
    config_cls: type[ConfigT],
    config: ConfigT | None,
    overrides: dict[str, Any],
    stored: dict[str, Any] | None = None,
) -> ConfigT:
    """Apply ``overrides`` to ``config`` (or to the stored/default config) and check resumability.

    Args:
        config_cls: The config class (:class:`PretrainConfig`, :class:`FinetuneConfig`).
        config: An explicit config, or ``None``.
        overrides: Field values given as keyword arguments (unknown names raise).
        stored: ``config.json`` of the run being resumed, if any. With ``config=None`` it is the
            base; otherwise the resolved config may only differ from it in
            :attr:`TrainConfig.RESUMABLE_CHANGES`.

    Returns:
        The resolved, validated config.
    """
    config_cls.check_field_names(overrides)
    check(
        config is None or isinstance(config, config_cls),
        "config",
        f"None or a {config_cls.__name__}",
        type(config).__name__,
    )
    previous = config_cls.from_dict(stored) if stored is not None else None
    base = config if config is not None else (previous or config_cls())
    resolved = base.replace(**overrides)
    if previous is not None:
        before, after = previous.to_dict(), resolved.to_dict()
        changed = sorted(
            name
            for name in before
            if before[name] != after[name] and name not in config_cls.RESUMABLE_CHANGES
        )
        check(
            not changed,
            "config",
            "the interrupted run's configuration when resume=True (only "
            f"{', '.join(sorted(config_cls.RESUMABLE_CHANGES))} may change)",
            "changes to " + ", ".join(f"{n}: {before[n]!r} -> {after[n]!r}" for n in changed),
        )
    return resolved


@dataclass
class Session(Generic[ConfigT]):
    """A resolved run: config, run directory and distributed context.

    Attributes:
        config: The resolved configuration.
        run_dir: The run directory (validated, not yet created).
        context: Rank, world size and device.
        resume: Whether the run continues from ``run_dir.last_checkpoint``.
        overwrite: Whether the directory is cleared on :meth:`start`.
    """

    config: ConfigT
    run_dir: RunDir
    context: DistributedContext
    resume: bool
    overwrite: bool

    @property
    def resume_from(self) -> Path | None:
        """Checkpoint to resume from, or ``None`` for a fresh run."""
        return self.run_dir.last_checkpoint if self.resume else None

    def start(self, resolved: dict[str, Any]) -> None:
        """Create the directory and write ``config.json`` and ``meta.json`` (rank 0), then sync.

        Args:
            resolved: Derived quantities recorded in ``meta.json`` (steps, lr, data shape, ...).
        """
        if self.context.is_main:
            self.run_dir.create(clear=self.overwrite)
            self.run_dir.write_config(self.config.to_dict())
            meta = run_metadata(world_size=self.context.world_size, extra={"resolved": resolved})
            self.run_dir.write_meta(meta, resumed=self.resume)
        self.context.barrier()


def open_session(
    config_cls: type[ConfigT],
    config: ConfigT | None,
    overrides: dict[str, Any],
    *,
    out_dir: str | Path,
    resume: bool,
    overwrite: bool,
) -> Session[ConfigT]:
    """Validate the run directory, resolve the config and join the process group.

    Returns:
        A :class:`Session`; call ``session.context.close()`` when done.
    """
    run_dir = RunDir.check(out_dir, resume=resume, overwrite=overwrite)
    stored = run_dir.read_config() if resume else None
    resolved = resolve_config(config_cls, config, overrides, stored)
    context = setup_distributed(resolved.device)
    context.barrier()
    return Session(resolved, run_dir, context, resume, overwrite)
