"""``partnd.pretraining``: self-supervised pretraining of a ViT encoder on N-D signals.

PART by default; every objective of :mod:`partnd.objectives` (``method=...``) runs through the
same function and engine.

Example:
    >>> import numpy as np, partnd
    >>> windows = np.load("eeg_windows.npy", mmap_mode="r")  # [N, 6, 3000]
    >>> result = partnd.pretrain(windows, out_dir="runs/part", config=partnd.PretrainConfig.preset(
    ...     "eeg_sleep"), epochs=100)
    >>> encoder = result.encoder  # the EMA weights when ema_decay is set
    >>> result.history[-1]["nmse"]  # loss over the error of a content-free predictor (1 = none)

The run directory holds ``config.json``, ``meta.json``, ``metrics.jsonl``/``metrics.csv``
(loss, pretext diagnostics next to their content-free floors, optional kNN monitor), ``tb/``,
``checkpoints/`` and ``encoder.pt`` (reload with :func:`load_encoder`). PART across windows
(``method="part_windows"``) trains a window encoder and a temporal encoder on segments of
consecutive windows: ``encoder.pt`` is then the window encoder (every single-window tool reads
it) and ``temporal_encoder.pt`` the temporal one (reload both with
:func:`~partnd.models.serialization.load_hierarchical_encoder`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset

from partnd._validation import InputError
from partnd.datasets.adapters import as_signal_dataset, data_fingerprint
from partnd.engine.checkpoint import load_checkpoint
from partnd.engine.config import PretrainConfig
from partnd.engine.session import open_session
from partnd.engine.trainer import EpochEvaluator, Trainer
from partnd.models import ViTEncoder
from partnd.models.montage import channel_set_overrides, seen_signal
from partnd.models.serialization import (
    ENCODER_FILE,
    encoder_spec,
    encoder_state_from,
    load_encoder,
    save_encoder,
    save_hierarchical_encoder,
)
from partnd.objectives import CrossWindowPART, Objective, build_objective
from partnd.objectives.base import draws_first
from partnd.objectives.registry import registered

__all__ = [
    "ObjectiveTask",
    "PretrainResult",
    "load_encoder",
    "pretrain",
    "save_encoder",
]


@dataclass
class PretrainResult:
    """Outcome of :func:`pretrain`.

    Attributes:
        encoder: The pretrained encoder on the CPU in eval mode (EMA weights when EMA is on);
            for PART across windows the window encoder.
        model: The whole objective module (encoder plus head/decoder/sampler) it belongs to.
        history: Logged records (``phase`` "train" per ``log_every_steps``, "epoch" per epoch,
            "val" for the kNN monitor), each with ``loss``, ``lr`` and the objective's
            diagnostics (for PART ``nmse``, ``r2_<dim>``, ``mse_<dim>``/``mse_floor_<dim>``,
            ``euclid``/``euclid_floor``).
        run_dir: The run directory.
        config: The resolved configuration.
        temporal_encoder: PART across windows: the temporal encoder over window embeddings (CPU,
            eval mode, EMA weights when EMA is on); ``None`` for the other methods.
        selected: With ``select_metric``: the evaluation whose weights were kept (``step``,
            ``epoch``, the metric's ``value``), the steps trained (``steps``) and whether the
            run stopped early (``stopped_early``); ``None`` without a selection.
    """

    encoder: ViTEncoder
    model: Objective
    history: list[dict[str, Any]]
    run_dir: Path
    config: PretrainConfig
    temporal_encoder: ViTEncoder | None = None
    selected: dict[str, Any] | None = None


class ObjectiveTask:
    """Training task of every pretraining objective: its own loss and diagnostics."""

    def compute_loss(
        self, model: nn.Module, batch: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Draw the step's boxes, pairs and masks eagerly from ``generator``
        (:meth:`~partnd.objectives.base.Objective.draw`), then run the (compiled, DDP-wrapped)
        forward on them, which draws nothing and so compiles as one graph.

        Args: model: (DDP-wrapped) objective; batch: [B, C, *spatial]. Returns: loss, metrics."""
        wrapped = model.module if isinstance(model, DistributedDataParallel) else model
        objective = cast(Objective, wrapped)
        if not draws_first(objective):  # it draws inside its forward (breaks a compiled graph)
            output = model(batch, generator=generator)
        else:
            output = model(batch, draws=objective.draw(batch, generator))
        return output.loss, output.metrics


def _load_initial_weights(encoder: ViTEncoder, state: dict[str, torch.Tensor], source: Any) -> None:
    try:
        encoder.load_state_dict(state)
    except RuntimeError as error:
        raise InputError(
            f"init_weights: expected encoder weights matching the configured encoder, got "
            f"{source} ({error})"
        ) from None


def pretrain(
    dataset: Dataset[Any]
    | np.ndarray
    | torch.Tensor
    | str
    | Path
    | Sequence[str | Path | Dataset[Any]],
    *,
    out_dir: str | Path,
    config: PretrainConfig | None = None,
    resume: bool = False,
    overwrite: bool = False,
    init_weights: str | Path | None = None,
    monitor: EpochEvaluator | None = None,
    select_metric: str | None = None,
    select_mode: str = "min",
    **overrides: Any,
) -> PretrainResult:
    """Pretrain a ViT encoder with PART (or another objective, ``method=...``) on ``dataset``.

    Works unchanged under ``torchrun`` (DDP; see ``docs/distributed.md``).

    Args:
        dataset: A torch Dataset whose items are a tensor ``[C, *spatial]`` or a tuple whose first
            element is one (labels are ignored), or an array/tensor ``[N, C, *spatial]`` (numpy
            memory maps work). ``ndim = len(spatial)`` and ``in_chans = C`` are inferred. Values
            are used as given (normalise them first; the sleep store's datasets instance-normalise
            by default). For the objectives on segments (``method="part_windows"``, ``"rp"``,
            ``"ts"``): segments ``[C, S * T]`` of raw values (a
            :class:`~partnd.datasets.segments.SleepSegmentDataset` or an array
            ``[N, C, S * T]``); a store path, a ``SleepWindowDataset`` or an ``InMemoryWindows``
            is read as segments of ``config.segment_windows`` windows of the same records.
            A list of store paths and datasets (stores of different montages) is read as one
            :class:`~partnd.datasets.MontageUnion` on the union of their channels (each store's
            windows or segments normalised as a single store's are); its absent channels are NaN,
            which only a channel-set encoder (``channel_mode="set"``) reads: a fixed-channel
            configuration refuses stores that lack channels of the union, naming them.
        out_dir: Run directory; must be new or empty unless ``overwrite`` or ``resume``.
        config: Configuration (default :class:`PretrainConfig`; on resume, the stored one).
        resume: Continue the interrupted run in ``out_dir`` from ``checkpoints/last.pt``; the
            result is identical to an uninterrupted run (same hardware and world size).
        overwrite: Clear ``out_dir`` first.
        init_weights: Start the encoder from these weights: an ``encoder.pt``, a run directory, a
            training checkpoint or an encoder state dict.
        monitor: Called after every epoch with the objective (EMA weights when on) and the epoch;
            its metrics are logged as ``phase="val"`` (e.g.
            :class:`partnd.evaluation.probes.KNNMonitor`,
            :class:`partnd.evaluation.probes.PretextMonitor`).
        select_metric: A metric of ``monitor`` to choose the pretraining budget on: the weights
            of its best evaluation are returned and saved, and ``patience`` (a config field)
            stops the run once it stops improving (the configured steps are then a cap).
        select_mode: ``"min"`` (an error, e.g. ``"heldout_error"``) or ``"max"``.
        **overrides: :class:`PretrainConfig` field values (e.g. ``epochs=10``, ``method="part"``).

    Returns:
        A :class:`PretrainResult`.

    Raises:
        InputError: For an empty or ragged dataset, wrong rank, NaN/Inf values, items smaller than
            the patch, unknown config fields or a refused run directory.
        NonFiniteLossError: If the loss becomes NaN/Inf.
    """
    initial = None if init_weights is None else encoder_state_from(init_weights)
    with open_session(
        PretrainConfig, config, overrides, out_dir=out_dir, resume=resume, overwrite=overwrite
    ) as session:
        config = session.config
        entry = registered(config.method)
        on_segments = entry is not None and entry.data == "segments"
        from partnd.datasets.montage_union import as_union  # the store reader pulls zarr

        if on_segments:
            from partnd.datasets.segments import as_segment_dataset

            dataset = as_segment_dataset(
                dataset, config.segment_windows, config.window_samples, config.normalize
            )
        united = as_union(
            dataset,
            "dataset",
            expected=None if initial is None else initial[1],
            absent_channels=config.channel_mode == "set",
        )
        train_set, spec = as_signal_dataset(
            united,
            expected=None if initial is None else initial[1],
            same_shape=False,
            absent_channels=config.channel_mode == "set",
        )
        torch.manual_seed(config.seed)
        built = config
        if config.channel_mode == "set":
            overrides = channel_set_overrides(
                config.encoder_overrides,
                train_set.info.ch_names,
                config.channel_options,
                "PretrainConfig.channel_options",
            )
            built = dataclasses.replace(config, encoder_overrides=overrides)
        model = build_objective(built, spec)
        windows = model if isinstance(model, CrossWindowPART) else None
        encoder = model.encoder if windows is None else windows.hierarchical.window
        info = train_set.info
        if on_segments:  # the window encoder's signal: one window, not a segment
            info = dataclasses.replace(
                info, spatial_shape=(config.window_samples,), normalization=config.normalize
            )
        if initial is not None:
            _load_initial_weights(encoder, initial[0], init_weights)
        if encoder.channel_mode == "set":
            info = seen_signal(info, None if initial is None else initial[1])
        encoder.signal_info = info
        data_shape = {"in_chans": spec.in_chans, "spatial_shape": list(spec.spatial_shape)}
        trainer = Trainer(
            model,
            ObjectiveTask(),
            train_set,
            config,
            context=session.context,
            run_dir=session.run_dir,
            evaluate=monitor,
            select_metric=select_metric,
            select_mode=select_mode,
            checkpoint_extra={
                "data": data_shape,
                "encoder": encoder_spec(encoder),
                **({} if windows is None else {"encoder_prefix": "encoder.window."}),
                "signal": info.to_dict(),
            },
        )
        session.start(
            {**trainer.resolved, "data": data_shape, "num_items": len(train_set)},
            data={"dataset": data_fingerprint(train_set)},
        )
        history = trainer.fit(resume_from=session.resume_from)
        final_model = cast(Objective, copy.deepcopy(trainer.eval_model)).cpu().eval()
        selected = _selected(trainer, final_model, select_metric)
        final_encoder, temporal = final_model.encoder, None
        if isinstance(final_model, CrossWindowPART):
            final_encoder = final_model.hierarchical.window
            temporal = final_model.hierarchical.temporal
        if session.context.is_main:
            if isinstance(final_model, CrossWindowPART):
                save_hierarchical_encoder(final_model.hierarchical, session.run_dir.root)
            else:
                save_encoder(final_encoder, session.run_dir.root / ENCODER_FILE)
        session.context.barrier()
    return PretrainResult(
        encoder=final_encoder,
        model=final_model,
        history=history,
        run_dir=session.run_dir.root,
        config=config,
        temporal_encoder=temporal,
        selected=selected,
    )


def _selected(
    trainer: Trainer, final_model: Objective, select_metric: str | None
) -> dict[str, Any] | None:
    """Load the best evaluation's weights into ``final_model`` and describe the selection."""
    state = trainer.state
    if select_metric is None or state.best_step is None:
        return None
    if trainer.checkpoints is not None:
        best = load_checkpoint(trainer.checkpoints.best_path)["model"]
        final_model.load_state_dict(best)
    return {
        "metric": select_metric,
        "value": state.best_value,
        "step": state.best_step,
        "epoch": state.best_epoch,
        "steps": state.step,
        "stopped_early": trainer.stopped_before_budget,
    }
