"""Typed, validated run configurations and their presets.

:class:`TrainConfig` holds what every training run needs (optimiser, schedule, precision, logging,
checkpointing); :class:`PretrainConfig` adds the PART model and sampler, :class:`FinetuneConfig` the
classifier. Every field is checked against its annotation and its allowed range when a config is
built, so a typo or a wrong type fails before any data is touched. Configs round-trip through plain
dicts and JSON (:meth:`TrainConfig.to_dict`, :meth:`TrainConfig.from_dict`,
:meth:`TrainConfig.from_json`); ``--set key=value`` strings are parsed with
:meth:`TrainConfig.parse_value`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from partnd._validation import InputError, check
from partnd.engine.compilation import AUTO_ON_CUDA, AUTO_ON_CUDA_FINETUNING

__all__ = [
    "Compile",
    "FinetuneConfig",
    "LoaderDtype",
    "Precision",
    "PretrainConfig",
    "TrainConfig",
]

Precision = Literal["auto", "fp32", "bf16", "fp16"]
Compile = Literal["auto", "off", "default", "reduce-overhead"]
LoaderDtype = Literal["auto", "float32", "bfloat16"]
ConfigT = TypeVar("ConfigT", bound="TrainConfig")


def _type_name(annotation: Any) -> str:
    """Readable name of a type annotation for messages (``int | None``, ``tuple[float, ...]``)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"tuple[{_type_name(args[0])}, ...]"
        return f"tuple[{', '.join(_type_name(arg) for arg in args)}]"
    if origin is dict:
        return "dict"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _coerce(value: Any, annotation: Any) -> tuple[bool, Any]:
    """Check ``value`` against ``annotation``, converting JSON forms (list -> tuple, int -> float).

    Returns:
        ``(matches, converted_value)``.
    """
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            ok, converted = _coerce(value, arg)
            if ok:
                return True, converted
        return False, value
    if origin is Literal:
        return value in args, value
    if annotation is type(None):
        return value is None, value
    if annotation is Any:
        return True, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if annotation is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if annotation is str:
        return isinstance(value, str), value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return False, value
        item_types = [args[0]] * len(value) if args[1:] == (Ellipsis,) else list(args)
        if len(item_types) != len(value) or not value:
            return False, value
        converted_items = []
        for item, item_type in zip(value, item_types, strict=True):
            ok, converted = _coerce(item, item_type)
            if not ok:
                return False, value
            converted_items.append(converted)
        return True, tuple(converted_items)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value), value
    raise TypeError(f"unsupported config annotation {annotation!r}")


@dataclass(frozen=True)
class TrainConfig:
    """Settings shared by every training run (optimiser, schedule, precision, I/O).

    Attributes:
        epochs: Passes over the training set; the learning-rate schedule spans all of them.
        batch_size: Examples per optimiser step *per process* (the global batch is
            ``batch_size * world_size``).
        lr: Peak learning rate, or the rate at ``lr_reference_batch`` when that is set.
        lr_reference_batch: If set, the peak rate is ``lr * global_batch / lr_reference_batch``
            (linear scaling, as "lr 5e-4 at batch 512").
        min_lr: Final learning rate of the cosine decay.
        weight_decay: AdamW decoupled weight decay, applied to weight matrices only.
        betas: AdamW betas.
        warmup_epochs: Linear warm-up length in epochs (fractions allowed).
        warmup_steps: Warm-up length in optimiser steps; overrides ``warmup_epochs`` when set.
        grad_clip: Maximum global gradient L2 norm, ``None`` for no clipping.
        ema_decay: Decay of an exponential moving average of the weights, ``None`` for no EMA.
            With EMA on, the averaged weights are the ones returned and evaluated.
        precision: ``"auto"`` (bf16 where the device runs it fast: a GPU with bf16, a CPU with
            AVX-512/AMX bf16 kernels; fp32 elsewhere, see :mod:`partnd.engine.precision`),
            ``"fp32"``, ``"bf16"`` (autocast on CPU and GPU) or ``"fp16"`` (autocast with a
            gradient scaler, GPU only). The run's ``meta.json`` records what it resolved to.
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:K"``.
        compile: Compile the trained model's forward and backward with ``torch.compile``
            (:mod:`partnd.engine.compilation`): ``"auto"`` (on CUDA, where a small model's step
            is bound by kernel launches: ``"reduce-overhead"`` for pretraining, ``"default"``
            for fine-tuning, see :attr:`auto_compile_on_cuda`; off on a CPU), ``"off"``,
            ``"default"`` (fused kernels) or ``"reduce-overhead"`` (fused kernels replayed as
            CUDA graphs; ``"default"`` off CUDA). The same losses and gradients within float
            rounding, the same random draws (drawn before the compiled forward, which is one
            graph); the first steps include the compilation. The run's ``meta.json`` records
            what it resolved to.
        num_workers: DataLoader worker processes (0 loads in the main process).
        loader_dtype: Dtype in which the loader ships input batches to the training process,
            for datasets read a batch at a time (pretraining's,
            :meth:`~partnd.datasets.adapters.SignalDataset.batch`): ``"auto"`` (``"bfloat16"`` when
            the step runs in bf16 on CUDA fed by
            worker processes, else ``"float32"``), ``"float32"`` or ``"bfloat16"``. bf16 halves
            the bytes the training process receives, pins and copies to the GPU per batch; the
            batch is cast back to float32 on the device, so the model sees the float32 inputs
            rounded to bf16: nothing changes where the first operation on them is a bf16 matrix
            product (the patch embedding under bf16 autocast: PART's whole-sample fixed-size
            patches, PART-grid, MP3, DropPos), and float32 computations on the inputs (MAE's
            pixel targets, resampled scale boxes) see them rounded by at most 2^-9 (relative).
        seed: Seed of model initialisation, data order and patch sampling.
        log_every_steps: Write a training record every this many optimiser steps.
        checkpoint_every_epochs: Write an epoch checkpoint every this many epochs (the last epoch
            is always written).
        checkpoint_every_steps: Also refresh ``last.pt`` every this many steps (mid-epoch resume).
        keep_checkpoints: Number of most recent ``epoch_XXXX.pt`` files kept.
        progress: Show a tqdm progress bar (rank 0 only).
        max_steps: Stop after this many optimiser steps in total; the schedule still spans
            ``epochs``, so a stopped run resumes onto the same trajectory.
        min_steps: Train for at least this many optimiser steps: the run is lengthened to
            ``ceil(min_steps / steps_per_epoch)`` epochs when ``epochs`` would give fewer (a
            labelled set of 200 examples gives 4 steps an epoch at batch 64). ``None``: no minimum.
        eval_every_steps: Run the per-epoch evaluation (validation, monitor) only at the end of
            an epoch reached at least this many steps after the previous evaluation, and after
            the last epoch; ``None`` evaluates after every epoch. With a small labelled set an
            epoch is a few steps: this bounds the cost and the number of candidate checkpoints
            the selection chooses among.
        evaluate_start: Also evaluate the starting weights, before the first step, as a
            candidate of the checkpoint selection (logged as epoch -1, step 0). A run that starts
            from a trained model (a classifier trained on another montage, fine-tuned on a few
            labelled nights of this one) then keeps it when no step of the new training does
            better on validation. Needs an evaluation (a validation set); ignored on resume.
        patience: Stop early once the metric the run selects its checkpoint on (validation
            kappa, a held-out pretext error) has not improved for this many evaluations in a
            row; the run then counts as finished and the best evaluation's weights are its
            result. ``None``: train the whole budget (the budget is then a cap).
        patience_start: Count ``patience`` only once the selected metric has been better than
            this value (below it for a minimised metric, above it for a maximised one). A
            held-out pretext error sits at its content-free floor (1.0) until the objective
            starts to read content, which can take hundreds of steps: with ``0.98`` a run that
            has not yet left its floor trains on to its budget instead of stopping on a plateau
            of no learning and calling a step at the floor its choice. ``None``: from the first
            evaluation. Needs ``patience``.
    """

    epochs: int = 100
    batch_size: int = 256
    lr: float = 5e-4
    lr_reference_batch: int | None = None
    min_lr: float = 1e-6
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_epochs: float = 0.0
    warmup_steps: int | None = None
    grad_clip: float | None = 1.0
    ema_decay: float | None = None
    precision: Precision = "fp32"
    device: str = "auto"
    compile: Compile = "auto"
    num_workers: int = 0
    loader_dtype: LoaderDtype = "auto"
    seed: int = 0
    log_every_steps: int = 10
    checkpoint_every_epochs: int = 1
    checkpoint_every_steps: int | None = None
    keep_checkpoints: int = 3
    progress: bool = True
    max_steps: int | None = None
    min_steps: int | None = None
    eval_every_steps: int | None = None
    evaluate_start: bool = False
    patience: int | None = None
    patience_start: float | None = None

    #: Fields that may differ between an interrupted run and its resumption.
    RESUMABLE_CHANGES: ClassVar[frozenset[str]] = frozenset(
        {
            "epochs",
            "max_steps",
            "progress",
            "num_workers",
            "device",
            "compile",
            "log_every_steps",
            "checkpoint_every_epochs",
            "checkpoint_every_steps",
            "keep_checkpoints",
        }
    )

    _PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}

    #: What ``compile="auto"`` resolves to on CUDA for this kind of run: fused kernels without
    #: CUDA graphs, since a trained model is returned to the caller and run on batches of any
    #: size (:data:`~partnd.engine.compilation.AUTO_ON_CUDA_FINETUNING`).
    auto_compile_on_cuda: ClassVar[str] = AUTO_ON_CUDA_FINETUNING

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            ok, converted = _coerce(value, hints[spec.name])
            check(ok, self._arg(spec.name), _type_name(hints[spec.name]), repr(value))
            object.__setattr__(self, spec.name, converted)
        self._validate()

    def _arg(self, name: str) -> str:
        return f"{type(self).__name__}.{name}"

    def _positive(self, name: str, *, allow_none: bool = False, strict: bool = True) -> None:
        value = getattr(self, name)
        if value is None and allow_none:
            return
        ok = value is not None and (value > 0 if strict else value >= 0) and math.isfinite(value)
        expected = "a number > 0" if strict else "a number >= 0"
        if value is not None and not math.isfinite(value):
            expected = f"a finite {expected[2:]}"
        check(ok, self._arg(name), expected, repr(value))

    def _check_channel_options(self, options: dict[str, Any]) -> None:
        """Refuse unknown channel-set ``options`` and values no front-end accepts (e.g.
        ``channel_pool``) when the config is made, naming the field ``channel_options``."""
        from partnd.models.channel_set import check_channel_options  # no import cycle

        check_channel_options(options, self._arg("channel_options"))

    def _check_encoder_preset(self, name: str) -> None:
        """Refuse an unknown ``encoder`` preset ``name`` when the config is made, not when the
        encoder is built (after the run directory was claimed and the data read)."""
        from partnd.models.registry import list_encoders  # a leaf module: no import cycle

        presets = list_encoders()
        check(name in presets, self._arg("encoder"), f"one of {presets}", repr(name))

    def _validate(self) -> None:
        for name in ("epochs", "batch_size", "lr", "log_every_steps", "checkpoint_every_epochs"):
            self._positive(name)
        for name in ("keep_checkpoints",):
            self._positive(name)
        for name in (
            "lr_reference_batch",
            "warmup_steps",
            "checkpoint_every_steps",
            "max_steps",
            "min_steps",
            "eval_every_steps",
            "patience",
        ):
            self._positive(name, allow_none=True)
        self._positive("grad_clip", allow_none=True)
        check(
            self.patience_start is None or math.isfinite(self.patience_start),
            self._arg("patience_start"),
            "None or a finite number (the metric's value patience starts counting after)",
            repr(self.patience_start),
        )
        check(
            self.patience_start is None or self.patience is not None,
            self._arg("patience_start"),
            "None unless patience is set (it says when patience starts counting)",
            repr(self.patience_start),
        )
        for name in ("min_lr", "weight_decay", "warmup_epochs", "num_workers", "seed"):
            self._positive(name, strict=False)
        check(self.min_lr <= self.lr, self._arg("min_lr"), f"<= lr={self.lr}", repr(self.min_lr))
        check(
            all(0.0 <= beta < 1.0 for beta in self.betas),
            self._arg("betas"),
            "two numbers in [0, 1)",
            repr(self.betas),
        )
        check(
            self.ema_decay is None or 0.0 < self.ema_decay < 1.0,
            self._arg("ema_decay"),
            "None or a number in (0, 1)",
            repr(self.ema_decay),
        )
        device_ok = self.device in ("auto", "cpu", "cuda") or (
            self.device.startswith("cuda:") and self.device[5:].isdigit()
        )
        check(device_ok, self._arg("device"), "'auto', 'cpu', 'cuda' or 'cuda:K'", self.device)

    @classmethod
    def field_names(cls) -> list[str]:
        """Names of all configurable fields, in declaration order."""
        return [spec.name for spec in dataclasses.fields(cls)]

    @classmethod
    def field_docs(cls) -> dict[str, str]:
        """One-paragraph description of every field, from the ``Attributes:`` docstring sections."""
        docs: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            lines = (klass.__doc__ or "").splitlines()
            inside, current = False, None
            for line in lines:
                stripped = line.strip()
                if stripped == "Attributes:":
                    inside = True
                    continue
                if not inside or not stripped:
                    continue
                name, _, text = stripped.partition(":")
                indent = len(line) - len(line.lstrip())
                if indent == 8 and text and name.isidentifier():
                    current = name
                    docs[name] = text.strip()
                elif indent > 8 and current is not None:
                    docs[current] += " " + stripped
        return {name: docs.get(name, "") for name in cls.field_names()}

    @classmethod
    def field_types(cls) -> dict[str, str]:
        """Readable type of every field, e.g. ``{"lr": "float", "max_steps": "int | None"}``."""
        hints = typing.get_type_hints(cls)
        return {name: _type_name(hints[name]) for name in cls.field_names()}

    @classmethod
    def check_field_names(cls, names: typing.Iterable[str], argument: str = "overrides") -> None:
        """Raise :class:`InputError` naming the valid fields if any of ``names`` is unknown.

        The fields are listed quoted, as written in ``--set KEY=VALUE`` and a config file (a
        command line never renames them to options).
        """
        valid = cls.field_names()
        unknown = sorted(set(names) - set(valid))
        check(
            not unknown,
            argument,
            f"{cls.__name__} field names ({', '.join(map(repr, valid))})",
            f"unknown name(s) {', '.join(map(repr, unknown))}",
        )

    def replace(self: ConfigT, **overrides: Any) -> ConfigT:
        """Return a copy with ``overrides`` applied (unknown names raise :class:`InputError`)."""
        self.check_field_names(overrides)
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-serialisable dict (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls: type[ConfigT], values: dict[str, Any]) -> ConfigT:
        """Build from a dict of field values (missing fields keep their defaults)."""
        check(isinstance(values, dict), "config", "a dict of field values", values)
        cls.check_field_names(values, "config")
        return cls(**values)

    def to_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as indented JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read_json(cls, path: str | Path) -> dict[str, Any]:
        """The field values stored in a JSON file (validated by :meth:`from_dict` later)."""
        try:
            values = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise InputError(
                f"config: expected a readable JSON file, got {path} ({error})"
            ) from None
        check(isinstance(values, dict), "config", "a JSON object of field values", str(path))
        return dict(values)

    @classmethod
    def from_json(cls: type[ConfigT], path: str | Path) -> ConfigT:
        """Read a config written by :meth:`to_json` (or any JSON object of field values)."""
        return cls.from_dict(cls.read_json(path))

    @classmethod
    def parse_value(cls, name: str, text: str) -> Any:
        """Parse a command-line value for field ``name``: JSON if it parses, else the plain string.

        ``"1e-3"`` -> ``0.001``, ``"none"``/``"null"`` -> ``None``, ``"[0.5, 2]"`` -> a list (turned
        into a tuple by validation), ``"bf16"`` -> ``"bf16"``.
        """
        cls.check_field_names([name], "--set")
        if text.strip().lower() in ("none", "null"):
            return None
        if text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    @classmethod
    def list_presets(cls) -> list[str]:
        """Names accepted by :meth:`preset`."""
        return sorted(cls._PRESETS)

    @classmethod
    def preset(cls: type[ConfigT], name: str, **overrides: Any) -> ConfigT:
        """A named preset with optional field overrides.

        Args:
            name: One of :meth:`list_presets`.
            **overrides: Field values replacing the preset's.
        """
        check(name in cls._PRESETS, "preset", f"one of {cls.list_presets()}", repr(name))
        cls.check_field_names(overrides)
        return cls(**{**cls._PRESETS[name], **overrides})


@dataclass(frozen=True)
class PretrainConfig(TrainConfig):
    """Self-supervised pretraining configuration (PART by default).

    The model fields default to the paper's EEG setup (12.9 M 1D ViT, 40 patches of 100 samples,
    cross-attention head); :meth:`preset` gives full recipes (``eeg_sleep``, ``images_cifar``,
    ``images_small``, ``images_imagenet``, ``test``). No objective gives PART a position embedding:
    off-grid patches carry their position only in their content (see ``docs/part.md``).

    Attributes:
        method: Pretraining objective, one of :func:`partnd.objectives.list_objectives` (checked
            when the config is built):
            ``"part"`` (off-grid PART), ``"part_grid"`` (PART on the on-grid tiles), the
            baselines, or ``"part_windows"`` (PART across windows: whole windows drawn from
            segments of consecutive windows, a window and a temporal encoder).
        encoder: Encoder preset name for :func:`partnd.models.create_encoder`.
        encoder_overrides: Keyword overrides of the encoder preset, e.g.
            ``{"drop_path_rate": 0.1}``.
        channel_mode: ``"fixed"`` (default): the encoder reads exactly the data's channels;
            ``"set"``: any named channel set (the configured front-end tokenises each channel,
            see :class:`partnd.models.channel_set.ChannelSetPatchEmbed`), so the encoder can be
            fine-tuned and applied on stores of other montages.
        channel_options: Options of the channel-set front-end (``channel_dropout``,
            ``subset_sampling``, ``frequencies``, ``channel_pool``: ``"mean"`` (default) or
            ``"attention"``, ``channel_pool_heads``).
        patch_size: ViT patch extent P (one int for all dimensions or one per dimension).
        num_patches: Patches drawn per example; ``None`` means ``prod(spatial / P)``.
        scale_range: If set, each box side is drawn in ``[lo * P, hi * P]`` (the scale/aspect
            extension); ``None`` draws boxes of exactly P (the paper's main setting).
        integer_boxes: Boxes start (and, with ``scale_range``, extend) at whole samples, as the
            authors' integer pixel boxes, so a fixed-size crop is an exact slice like a
            fine-tuning tile; ``False`` draws continuous positions (interpolated crops).
        antialias: Anti-alias when resizing crops to P.
        head: Relative-encoder head: ``"cross_attention"``, ``"pairwise_mlp"`` or ``"mlp"``.
        head_overrides: Keyword arguments of the head (e.g. ``{"num_heads": 2}`` for the
            projected multi-head cross-attention).
        num_pairs: (reference, target) pairs predicted per example.
        shared_pairs: Draw one set of pairs per batch (as the authors) instead of per example.
        pair_radius: Local pairs: draw only pairs of patches closer than this many reference-patch
            lengths in every dimension (1.0: overlapping patches); ``None`` (the paper) draws any
            pair. On stationary content (30 s EEG windows) only near pairs are learnable.
        scale_targets: Also predict ``s_tgt / s_ref`` per dimension (needs ``scale_range``).
        pos_embed: Anchored PART: give the encoder a slot position embedding and hide
            ``pos_mask_ratio`` of the slots per example (the paper's EEG "mask out 20% of the
            position embeddings"); loss and diagnostics use only pairs whose target's slot is
            hidden, so the answer cannot be read from the embedding. ``False``: no position
            embedding (the default for every ndim).
        pos_mask_ratio: Anchored PART: fraction of patches whose slot embedding is hidden.
        mask_ratio: Baselines: fraction of on-grid patches masked (MAE) or dropped (DropPos),
            or of tokens removed from the keys and values (MP3).
        position_mask_ratio: DropPos: fraction of the kept patches whose position embedding is
            replaced by the mask token.
        decoder_dim: MAE/DropPos decoder width; ``None`` derives it from the encoder (see
            ``docs/baselines.md``).
        decoder_depth: MAE/DropPos decoder blocks; ``None`` derives it from the encoder.
        norm_pix_loss: MAE: reconstruct per-patch normalised values (MAE's default).
        smoothing_sigma: DropPos: initial width (in grid cells) of the Gaussian position
            smoothing, decayed to 0 over training.
        window_samples: PART across windows (``part_windows``): samples T of one window (3000:
            30 s at 100 Hz); the window encoder tiles it into ``patch_size`` tiles.
        num_windows: PART across windows: windows N drawn at off-grid integer starts inside each
            segment (its "patches").
        segment_windows: PART across windows: windows S per segment (items are
            ``[C, S * window_samples]``); the temporal position embedding has S slots.
        temporal_encoder: PART across windows: preset of the temporal encoder over the window
            embeddings (:data:`partnd.models.sequence.TEMPORAL_PRESETS`); ``encoder``,
            ``encoder_overrides`` and ``patch_size`` configure the window encoder, ``pos_embed``
            and ``pos_mask_ratio`` the temporal level (anchored: ``1 - pos_mask_ratio`` of the
            windows keep their slot embedding).
        temporal_overrides: PART across windows: keyword overrides of the temporal preset.
        window_pool: PART across windows: a window's embedding is the window encoder's mean
            patch token (``"avg"``) or its [CLS] token (``"token"``); saved with the encoder.
            At initialisation the [CLS] outputs of different windows differ little (7% of their
            norm against 19% for the mean token), and plain PART across windows stayed at its
            floor from [CLS] where it learned from the mean token (``docs/results/part.md``).
        normalize: PART across windows: how drawn windows are normalised, as fine-tuning windows
            will be (``"window"``: instance normalisation; ``"record"``: by the night's channel
            scales, see :class:`partnd.datasets.SleepWindowDataset`). The same for relative
            positioning and temporal shuffling.
        tau_pos_windows: Relative positioning (``rp``) and temporal shuffling (``ts``): the
            positive context in stored windows (Banville et al.'s 1 min: 2 windows of 30 s).
        tau_neg_windows: ``rp`` and ``ts``: the negative context in stored windows (Banville et
            al.'s 15 min: 30 windows of 30 s).
        variance_weight: PART and PART across windows: weight of VICReg's variance term on the
            encoder's features (patch tokens; across windows, the window embeddings), an
            anti-collapse option (:mod:`partnd.objectives.anti_collapse`); 0 (the default) is off.
        covariance_weight: The same for VICReg's covariance term.
        within_weight: PART within and across windows (``part_joint``): weight of the
            within-window PART loss (off-grid patches of ``patch_size``, ``num_patches`` of
            them per drawn window; ``None`` patches: the window's tile count) added to the
            across-windows loss.
        within_pairs: ``part_joint``: within-window patch pairs per step (one set for the
            batch).
        trained_levels: PART across windows: which levels the pretext trains. ``"all"`` (the
            default) trains the window encoder and the temporal encoder; ``"temporal"`` holds
            the window encoder's weights at their seeded random initialisation (no gradient, no
            weight decay; a ``spectral_std`` front-end's running statistics still follow the
            data) and trains only the temporal level over its features. The run directory then
            holds a random window encoder and a temporal level trained on exactly its features,
            a consistent pair for the night classifier.
    """

    method: str = "part"
    encoder: str = "vit_eeg_12m"
    encoder_overrides: dict[str, Any] = field(default_factory=dict)
    channel_mode: Literal["fixed", "set"] = "fixed"
    channel_options: dict[str, Any] = field(default_factory=dict)
    patch_size: int | tuple[int, ...] = 100
    num_patches: int | None = 40
    scale_range: tuple[float, float] | None = None
    integer_boxes: bool = True
    antialias: bool = True
    head: str = "cross_attention"
    head_overrides: dict[str, Any] = field(default_factory=dict)
    num_pairs: int = 1024
    shared_pairs: bool = True
    pair_radius: float | None = None
    scale_targets: bool = False
    pos_embed: bool = False
    pos_mask_ratio: float = 0.2
    mask_ratio: float = 0.75
    position_mask_ratio: float = 0.75
    decoder_dim: int | None = None
    decoder_depth: int | None = None
    norm_pix_loss: bool = True
    smoothing_sigma: float = 1.0
    window_samples: int = 3000
    num_windows: int = 32
    segment_windows: int = 60
    temporal_encoder: str = "temporal_small"
    temporal_overrides: dict[str, Any] = field(default_factory=dict)
    window_pool: Literal["token", "avg"] = "avg"
    normalize: Literal["window", "record"] = "window"
    tau_pos_windows: int = 2
    tau_neg_windows: int = 30
    variance_weight: float = 0.0
    covariance_weight: float = 0.0
    within_weight: float = 1.0
    within_pairs: int = 256
    trained_levels: Literal["all", "temporal"] = "all"

    HEADS: ClassVar[tuple[str, ...]] = ("cross_attention", "pairwise_mlp", "mlp")
    #: The objectives whose window encoder ``trained_levels="temporal"`` can hold under a
    #: temporal level.
    HELD_LEVEL_METHODS: ClassVar[tuple[str, ...]] = ("part_windows",)

    #: A pretraining objective's step runs only inside the engine, at its fixed batch shape: CUDA
    #: graphs (:data:`~partnd.engine.compilation.AUTO_ON_CUDA`, measured to win there).
    auto_compile_on_cuda: ClassVar[str] = AUTO_ON_CUDA

    def _validate(self) -> None:
        super()._validate()
        # Imported here: the objectives import this module (registry.py itself is a leaf).
        from partnd.objectives.registry import list_objectives

        methods = list_objectives()
        check(self.method in methods, self._arg("method"), f"one of {methods}", repr(self.method))
        self._check_encoder_preset(self.encoder)
        check(
            self.channel_mode in ("fixed", "set"),
            self._arg("channel_mode"),
            "'fixed' or 'set'",
            repr(self.channel_mode),
        )
        self._check_channel_options(self.channel_options)
        sizes = (self.patch_size,) if isinstance(self.patch_size, int) else self.patch_size
        check(
            all(size > 0 for size in sizes),
            self._arg("patch_size"),
            "positive int(s)",
            repr(self.patch_size),
        )
        self._positive("num_patches", allow_none=True)
        self._positive("num_pairs")
        check(self.head in self.HEADS, self._arg("head"), f"one of {self.HEADS}", repr(self.head))
        if self.scale_range is not None:
            low, high = self.scale_range
            check(
                0.0 < low <= high,
                self._arg("scale_range"),
                "None or (low, high) with 0 < low <= high",
                repr(self.scale_range),
            )
        check(
            not self.scale_targets or self.scale_range is not None,
            self._arg("scale_targets"),
            "False unless scale_range is set (all boxes have size P otherwise)",
            repr(self.scale_targets),
        )
        for name in ("pos_mask_ratio", "mask_ratio", "position_mask_ratio"):
            value = getattr(self, name)
            check(0.0 < value < 1.0, self._arg(name), "a ratio in (0, 1)", repr(value))
        self._positive("pair_radius", allow_none=True)
        self._positive("decoder_dim", allow_none=True)
        self._positive("decoder_depth", allow_none=True)
        self._positive("smoothing_sigma", strict=False)
        self._positive("window_samples")
        for name in ("num_windows", "segment_windows"):
            value = getattr(self, name)
            check(value >= 2, self._arg(name), "an int >= 2", repr(value))
        self._positive("tau_pos_windows")
        self._positive("tau_neg_windows")
        self._positive("variance_weight", strict=False)
        self._positive("covariance_weight", strict=False)
        self._positive("within_weight")
        self._positive("within_pairs")
        self._check_trained_levels()

    def _check_trained_levels(self) -> None:
        if self.trained_levels == "all":  # its type check refuses values other than the two
            return
        check(
            self.method in self.HELD_LEVEL_METHODS,
            self._arg("trained_levels"),
            f"'all' unless method is one of {self.HELD_LEVEL_METHODS} (a temporal level over "
            "a window encoder it could hold)",
            f"{self.trained_levels!r} with method={self.method!r}",
        )
        check(
            self.variance_weight == 0 and self.covariance_weight == 0,
            self._arg("trained_levels"),
            "'all' when the anti-collapse term is on (it acts on the window encoder's "
            "features, which 'temporal' holds)",
            f"{self.trained_levels!r} with variance_weight={self.variance_weight}, "
            f"covariance_weight={self.covariance_weight}",
        )


@dataclass(frozen=True)
class FinetuneConfig(TrainConfig):
    """Supervised fine-tuning configuration (on-grid patches, new position embedding, [CLS] linear).

    Attributes:
        encoder: Encoder preset built when fine-tuning *from scratch* (the supervised baseline);
            ignored when a pretrained encoder is given.
        encoder_overrides: Keyword overrides of that preset.
        patch_size: Patch size of a from-scratch encoder (a given encoder brings its own).
        pos_embed: Add a fresh learnable slot position embedding.
        pos_mask_ratio: Fraction of slot embeddings masked in training.
        label_smoothing: Cross-entropy label smoothing.
        class_weights: ``"balanced"`` weighs class c by ``n / (K * n_c)``; ``None`` for none.
        layer_decay: Layer-wise learning-rate decay (``None`` for none): block i of L gets
            ``lr * layer_decay ** (L + 1 - (i + 1))``, the patch embedding
            ``lr * layer_decay ** (L + 1)``.
        eval_batch_size: Batch size of the per-epoch validation.
        augmentations: Batch augmentations applied in training, in order (see
            :mod:`partnd.engine.augment`): ``random_resized_crop``, ``hflip`` (images),
            ``time_shift``,
            ``amplitude_scale``, ``channel_dropout`` (signals); ``None`` (the paper) for none.
        global_pool: Classify the [CLS] token (``"token"``, the paper) or the mean patch token
            (``"avg"``, MAE's fine-tuning default).
        context: Windows per sequence L of a *sequence classifier*: each window is embedded by
            the encoder and a temporal transformer over L consecutive windows classifies every
            one of them (data: consecutive windows of a sleep store's records). ``"night"``: a
            *night classifier* (:class:`partnd.models.NightClassifier`), whose temporal
            transformer reads every window of the record with its time of night; it trains on
            crops of ``night_crop`` windows, ``batch_size`` crops a step, and predicts whole
            records. ``None`` (the paper): a single-window classifier.
        temporal_encoder: Preset of the temporal transformer of a sequence or night classifier
            trained without a pretrained one (see
            :data:`partnd.models.sequence.TEMPORAL_PRESETS`).
        temporal_overrides: Keyword overrides of that preset.
        channel_mode: ``"fixed"`` (default): a from-scratch encoder reads exactly the training
            data's channels; ``"set"``: it reads any named channel set
            (:class:`partnd.models.channel_set.ChannelSetPatchEmbed`: per-channel tokens of the
            configured front-end, embedded by electrode positions, averaged over channels), so
            the classifier also reads stores of another montage. A given encoder brings its own.
        channel_options: Options of the channel-set front-end (``channel_dropout``,
            ``subset_sampling``, ``frequencies``, ``channel_pool``: ``"mean"`` (default) or
            ``"attention"``, ``channel_pool_heads``).
        night_crop: Night classifier: consecutive windows of a record per training crop (a
            shorter record is one padded crop); prediction reads whole records whatever it is.
        stager: Train one of the field's deep stagers from braindecode instead of a ViT
            (:data:`partnd.models.braindecode_stagers.STAGERS`: ``"chambon2018"`` and
            ``"deepsleepnet"`` read one window, ``context=None``; ``"usleep"`` whole nights,
            ``context="night"``, on crops of ``night_crop`` windows); from scratch only, by the
            same engine, labels, augmentations and checkpoint selection.
        stager_overrides: Keyword arguments of the braindecode class (e.g. ``{"depth": 4}``).
        probe_steps: Linear probe, then fine-tune (LP-FT, Kumar et al. 2022): for the first this
            many optimiser steps the parameters that came from the pretrained encoder are held
            fixed (no gradient, no weight decay, no optimiser state) while the new ones train:
            the classifier, a fresh position embedding, a sequence or night classifier's fresh
            temporal transformer (a pretrained one, PART across windows', is held with the
            window encoder; only the levels ``pretrained_levels`` keeps are held). Then every
            parameter trains; the pretrained ones start their AdamW moments then. The
            learning-rate schedule is the run's, counted from step 0 (the encoder joins at the
            scheduled rate of step ``probe_steps``: a ``warmup_steps`` beyond ``probe_steps``
            lets it join on a rising rate). ``0`` (the default): every parameter trains from
            the first step. Needs a pretrained encoder (from scratch there is nothing
            pretrained to hold).
        pretrained_levels: Which levels of a sequence or night classifier start from the
            pretrained encoder: ``"all"`` (the default) every level it brings (a pretrained
            window encoder gets a fresh temporal transformer; PART across windows' hierarchical
            encoder brings both levels); ``"window"`` the window encoder only, under a fresh
            ``temporal_encoder``; ``"temporal"`` the temporal level only (its token
            projection, [CLS] token, blocks, norm and slot embeddings) over a freshly
            initialised window encoder of the pretrained one's architecture, drawn from
            ``seed``. Not ``"all"`` needs a pretrained encoder and a context; ``"temporal"`` a
            pretrained temporal level. ``probe_steps`` holds only the levels kept.
        decay_random_window: Apply ``layer_decay`` also to a window encoder without learned
            weights: the fresh one of ``pretrained_levels="temporal"``, or one its pretext held
            at its random start (``PretrainConfig.trained_levels="temporal"``). ``False`` (the
            default): such a window encoder trains at the full rate, as from scratch. In the
            sleep studies it also gives the rows trained from scratch the run's
            ``layer_decay``, so every random window encoder trains at the same rates. Needs a
            ``layer_decay``.
    """

    encoder: str = "vit_eeg_12m"
    encoder_overrides: dict[str, Any] = field(default_factory=dict)
    patch_size: int | tuple[int, ...] = 100
    pos_embed: bool = True
    pos_mask_ratio: float = 0.0
    label_smoothing: float = 0.0
    class_weights: Literal["balanced"] | None = None
    layer_decay: float | None = None
    eval_batch_size: int = 256
    augmentations: tuple[str, ...] | None = None
    global_pool: Literal["token", "avg"] = "token"
    context: int | Literal["night"] | None = None
    temporal_encoder: str = "temporal_small"
    temporal_overrides: dict[str, Any] = field(default_factory=dict)
    night_crop: int = 128
    stager: str | None = None
    stager_overrides: dict[str, Any] = field(default_factory=dict)
    channel_mode: Literal["fixed", "set"] = "fixed"
    channel_options: dict[str, Any] = field(default_factory=dict)
    probe_steps: int = 0
    pretrained_levels: Literal["all", "window", "temporal"] = "all"
    decay_random_window: bool = False

    def _validate(self) -> None:
        super()._validate()
        self._check_encoder_preset(self.encoder)
        check(
            not self.decay_random_window or self.layer_decay is not None,
            self._arg("decay_random_window"),
            "False without a layer_decay (there is no decay to apply)",
            f"True with layer_decay={self.layer_decay!r}",
        )
        self._positive("probe_steps", strict=False)
        check(
            self.pretrained_levels == "all" or (self.context is not None and self.stager is None),
            self._arg("pretrained_levels"),
            "'all' for a single-window classifier or a braindecode stager (only a sequence or "
            "night classifier has a window and a temporal level to choose from)",
            f"{self.pretrained_levels!r} with context={self.context!r}, stager={self.stager!r}",
        )
        check(
            self.stager is None or self.probe_steps == 0,
            self._arg("probe_steps"),
            "0 with a braindecode stager (it trains from scratch: nothing pretrained to hold)",
            f"{self.probe_steps} with stager={self.stager!r}",
        )
        if self.stager is not None:
            # a leaf module: braindecode itself is imported when a stager is built
            from partnd.models.braindecode_stagers import NIGHT_STAGERS, list_stagers

            stagers = list_stagers()
            check(
                self.stager in stagers, self._arg("stager"), f"one of {stagers}", repr(self.stager)
            )
            night = self.stager in NIGHT_STAGERS
            check(
                (self.context == "night") if night else self.context is None,
                self._arg("context"),
                "'night' for a stager that reads whole nights"
                if night
                else "None for a stager that reads one window",
                f"{self.context!r} with stager={self.stager!r}",
            )
        self._positive("eval_batch_size")
        self._positive("night_crop")
        check(
            self.channel_mode in ("fixed", "set"),
            self._arg("channel_mode"),
            "'fixed' or 'set'",
            repr(self.channel_mode),
        )
        self._check_channel_options(self.channel_options)
        check(
            0.0 <= self.label_smoothing < 1.0,
            self._arg("label_smoothing"),
            "a number in [0, 1)",
            repr(self.label_smoothing),
        )
        check(
            self.layer_decay is None or 0.0 < self.layer_decay <= 1.0,
            self._arg("layer_decay"),
            "None or a number in (0, 1]",
            repr(self.layer_decay),
        )
        check(
            0.0 <= self.pos_mask_ratio < 1.0 and (self.pos_embed or self.pos_mask_ratio == 0.0),
            self._arg("pos_mask_ratio"),
            "a ratio in [0, 1) (0.0 when pos_embed is False)",
            repr(self.pos_mask_ratio),
        )
        if self.context != "night":
            self._positive("context", allow_none=True)
        check(  # a setting a single-window or sequence classifier would ignore, yet record
            self.context == "night" or self.night_crop == 128,
            self._arg("night_crop"),
            "its default 128 unless context='night' (it sets the training crops of a night "
            f"classifier; context is {self.context!r})",
            repr(self.night_crop),
        )
        for name, default in (("temporal_encoder", "temporal_small"), ("temporal_overrides", {})):
            check(
                self.context is not None or getattr(self, name) == default,
                self._arg(name),
                f"its default {default!r} unless context is set (it builds the temporal "
                "transformer of a sequence or night classifier; context is None)",
                repr(getattr(self, name)),
            )
        if self.context is not None:
            from partnd.models.sequence import TEMPORAL_PRESETS

            check(
                self.temporal_encoder in TEMPORAL_PRESETS,
                self._arg("temporal_encoder"),
                f"one of {sorted(TEMPORAL_PRESETS)}",
                repr(self.temporal_encoder),
            )
            check(
                self.pos_embed,
                self._arg("pos_embed"),
                "True for a sequence classifier (its windows are tiled with tile positions)",
                repr(self.pos_embed),
            )


_SHARED_TEST: dict[str, Any] = {
    "encoder": "vit_test",
    "epochs": 2,
    "batch_size": 8,
    "lr": 1e-3,
    "min_lr": 1e-5,
    "warmup_epochs": 0.0,
    "grad_clip": 1.0,
    "ema_decay": None,
    "precision": "fp32",
    "device": "cpu",
    "log_every_steps": 1,
    "keep_checkpoints": 2,
    "progress": False,
}

#: The authors' pretraining optimisation (AdamW, cosine, 20 warm-up epochs, lr 5e-4 at batch 512,
#: AMP, EMA), shared by the EEG and CIFAR-100 presets.
_PAPER_PRETRAINING: dict[str, Any] = {
    "epochs": 1000,
    "warmup_epochs": 20.0,
    "batch_size": 256,
    "lr": 5e-4,
    "lr_reference_batch": 512,
    "precision": "auto",
    "ema_decay": 0.9999,
}

PretrainConfig._PRESETS = {
    "eeg_sleep": {
        "encoder": "vit_eeg_12m",
        "patch_size": 100,
        "num_patches": 40,
        "head": "cross_attention",
        "num_pairs": 1024,
        # The paper's "mask out 20% of the position embeddings", leak-free (anchored PART: the
        # loss is on pairs whose target's slot is hidden; docs/part.md).
        "pos_embed": True,
        "pos_mask_ratio": 0.2,
        **_PAPER_PRETRAINING,
    },
    # PART across windows (docs/results/part.md, "PART across windows"): 30 min segments, 32 windows
    # drawn, half of them anchors; S, N and the anchor fraction chosen on validation subjects.
    # A step reads batch_size x num_windows windows, hence a smaller batch of segments.
    "eeg_sleep_windows": {
        "method": "part_windows",
        "encoder": "vit_eeg_12m",
        "patch_size": 100,
        "window_samples": 3000,
        "segment_windows": 120,
        "num_windows": 32,
        "temporal_encoder": "temporal_small",
        "window_pool": "avg",
        "head": "pairwise_mlp",
        "num_pairs": 512,
        "pos_embed": True,
        "pos_mask_ratio": 0.5,
        "normalize": "record",
        **_PAPER_PRETRAINING,
        "epochs": 100,
        "warmup_epochs": 5.0,
        "batch_size": 32,
        "lr_reference_batch": None,
    },
    "images_cifar": {
        "encoder": "vit_small",
        "patch_size": 4,
        "num_patches": 64,
        "num_pairs": 2048,
        **_PAPER_PRETRAINING,
    },
    "images_small": {
        "encoder": "vit_mini",
        "patch_size": 4,
        "num_patches": None,
        "num_pairs": 2048,
        "epochs": 25,
        "warmup_epochs": 1.0,
        "batch_size": 64,
        "lr": 1.5e-3,
        "precision": "fp32",
        "log_every_steps": 10,
    },
    "images_imagenet": {
        "encoder": "vit_base",
        "patch_size": 16,
        "num_patches": 196,
        "num_pairs": 4802,
        "epochs": 200,
        "warmup_epochs": 20.0,
        "batch_size": 128,
        "lr": 5e-4,
        "lr_reference_batch": 1024,
        "precision": "auto",
        "ema_decay": 0.9999,
    },
    "test": {
        **_SHARED_TEST,
        "patch_size": 4,
        "num_patches": None,
        "num_pairs": 32,
    },
}

#: Fine-tuning optimisation shared by the EEG and CIFAR-100 presets (lr 5e-4 at batch 512 as in the
#: paper; layer-wise decay and label smoothing as in the MAE/ViT fine-tuning recipes).
_PAPER_FINETUNING: dict[str, Any] = {
    "warmup_epochs": 5.0,
    "batch_size": 256,
    "lr": 5e-4,
    "lr_reference_batch": 512,
    "layer_decay": 0.75,
    "label_smoothing": 0.1,
    "precision": "auto",
}

FinetuneConfig._PRESETS = {
    "eeg_sleep": {
        "encoder": "vit_eeg_12m",
        "patch_size": 100,
        "pos_embed": True,
        "epochs": 100,
        **_PAPER_FINETUNING,
    },
    "images_cifar": {
        "encoder": "vit_small",
        "patch_size": 4,
        "pos_embed": True,
        "epochs": 400,
        **_PAPER_FINETUNING,
    },
    "images_small": {
        "encoder": "vit_mini",
        "patch_size": 4,
        "pos_embed": True,
        "epochs": 30,
        "min_steps": 300,
        "warmup_epochs": 2.0,
        "batch_size": 32,
        "lr": 5e-4,
        "layer_decay": 0.75,
        "label_smoothing": 0.1,
        "precision": "fp32",
        "log_every_steps": 10,
    },
    "test": {**_SHARED_TEST, "patch_size": 4, "pos_embed": True, "eval_batch_size": 64},
}
