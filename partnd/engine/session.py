"""What every entry point does around the training loop: resolve the config, check the run
directory, join the process group, then (rank 0) create the directory and record the run.

The order matters under torchrun: every rank validates the directory *before* rank 0 creates or
clears it, and the ranks meet at a barrier in between. Use the session as a context manager::

    with open_session(PretrainConfig, config, overrides, out_dir=out, resume=r, overwrite=o) as s:
        ...  # adapt the data, build the model and the trainer
        s.start(resolved, data={"dataset": data_fingerprint(train_set)})
        trainer.fit(resume_from=s.resume_from)

On leaving it the process group is closed; when the run failed before writing its first checkpoint
(nothing to resume), what :meth:`Session.start` created is removed, so a failed command leaves no
half-made run directory behind.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from partnd._validation import InputError, check
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


def _records_change(before: list[str], after: list[str]) -> str:
    removed = [r for r in before if r not in after]
    added = [r for r in after if r not in before]

    def listed(names: list[str]) -> str:
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    parts = [f"{len(removed)} left out ({listed(removed)})"] if removed else []
    parts += [f"{len(added)} added ({listed(added)})"] if added else []
    return "records: " + ("; ".join(parts) if parts else "another order")


def _data_change(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """What differs between two fingerprints (:func:`partnd.datasets.adapters.data_fingerprint`)."""
    if before is None or after is None:
        return "none before" if before is None else "none now"
    changes = []
    for key in dict.fromkeys([*before, *after]):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if key == "records" and isinstance(old, list) and isinstance(new, list):
            changes.append(_records_change(old, new))
        elif key == "items_sha256":
            changes.append("other item values")
        elif key == "subset_sha256":
            changes.append("another selection of items (Subset indices)")
        else:
            changes.append(f"{key}: {old} -> {new}")
    return "; ".join(changes)


@dataclass
class Session(Generic[ConfigT]):
    """A resolved run: config, run directory and distributed context (a context manager).

    Attributes:
        config: The resolved configuration.
        run_dir: The run directory (validated, not yet created).
        context: Rank, world size and device.
        resume: Whether the run continues the one in ``run_dir``: from its last checkpoint, or
            from step 0 with its stored configuration when it stopped before writing one.
        overwrite: Whether the directory is cleared on :meth:`start`.
    """

    config: ConfigT
    run_dir: RunDir
    context: DistributedContext
    resume: bool
    overwrite: bool
    _started: bool = field(default=False, init=False, repr=False)
    _created_root: bool = field(default=False, init=False, repr=False)

    @property
    def resume_from(self) -> Path | None:
        """Checkpoint to resume from, or ``None`` for a run that starts at step 0."""
        return self.run_dir.last_checkpoint if self.resume and self.run_dir.resumable else None

    def check_data(self, data: Mapping[str, dict[str, Any] | None]) -> None:
        """On resume, refuse data other than the interrupted run's (``meta.json``'s ``data``).

        Args:
            data: Data argument name -> fingerprint
            (:func:`partnd.datasets.adapters.data_fingerprint`), or
                ``None`` for an argument not given.

        Raises:
            InputError: Naming the first argument whose data differ, and how.
        """
        stored = self.run_dir.read_meta().get("data") if self.resume else None
        if not isinstance(stored, dict):  # a new run, or one from before fingerprints
            return
        for argument, fingerprint in data.items():
            before = stored.get(argument)
            if isinstance(before, dict) and fingerprint is not None:
                # a run recorded before a fingerprint key existed is compared on the keys it has
                fingerprint = {key: value for key, value in fingerprint.items() if key in before}
            if before != fingerprint:
                raise InputError(
                    f"{argument}: expected the data the interrupted run in {self.run_dir.root} "
                    f"was trained on when resume=True, got other data "
                    f"({_data_change(before, fingerprint)}); give the same data to resume, or "
                    "start a new run (another out_dir, or overwrite=True to replace this one)"
                )

    def start(
        self, resolved: dict[str, Any], data: Mapping[str, dict[str, Any] | None] | None = None
    ) -> None:
        """Check the data on resume, then create the directory and write ``config.json`` and
        ``meta.json`` (rank 0), then sync.

        A resumed run without a checkpoint (stopped before its first one) starts again from
        step 0 with its stored configuration: its partial logs are cleared.

        Args:
            resolved: Derived quantities recorded in ``meta.json`` (steps, lr, data shape, ...).
            data: Fingerprints of the data arguments (:meth:`check_data`), recorded in
                ``meta.json`` as ``data``.
        """
        if data is not None:
            self.check_data(data)
        restart = self.resume and not self.run_dir.resumable
        if self.context.is_main:
            self._created_root = not self.run_dir.root.exists()
            self.run_dir.create(clear=self.overwrite or restart)
            self.run_dir.write_config(self.config.to_dict())
            extra: dict[str, Any] = {"resolved": resolved}
            if data is not None:
                extra["data"] = dict(data)
            meta = run_metadata(world_size=self.context.world_size, extra=extra)
            self.run_dir.write_meta(meta, resumed=self.resume and not restart)
        self._started = True
        self.context.barrier()

    def __enter__(self) -> Session[ConfigT]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the process group; after a failure with no checkpoint written, remove what
        :meth:`start` created (the directory, or its contents when it existed before)."""
        try:
            failed_early = exc_type is not None and self._started and not self.run_dir.resumable
            if failed_early and self.context.is_main:
                if self._created_root:
                    shutil.rmtree(self.run_dir.root, ignore_errors=True)
                else:
                    self.run_dir.clear()
        finally:
            self.context.close()


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
        A :class:`Session`; use it as a context manager (it closes the process group, and cleans
        up after a run that failed before its first checkpoint).
    """
    run_dir = RunDir.check(out_dir, resume=resume, overwrite=overwrite)
    stored = run_dir.read_config() if resume else None
    resolved = resolve_config(config_cls, config, overrides, stored)
    context = setup_distributed(resolved.device)
    context.barrier()
    return Session(resolved, run_dir, context, resume, overwrite)
