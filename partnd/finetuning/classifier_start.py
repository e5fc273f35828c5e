"""Fine-tuning that starts from a trained sequence or night classifier, whole.

A night classifier trained on the labelled nights of one montage (the source) is adapted to
another (the target) by training it further on a few labelled target nights. Starting from its
encoders alone (``encoder.pt`` and ``temporal_encoder.pt``) would drop what the classifier learnt
on top of them: the stage head, a night classifier's time-of-night embedding and its attention
half-lives. :func:`trained_classifier` reads a classifier given as ``finetune``'s ``encoder`` (the
object, its run directory or its ``classifier.pt``), and :func:`start_from_classifier` gives the
classifier ``finetune`` built on its encoder every one of its weights back.

With ``TrainConfig.evaluate_start`` the starting classifier is also a candidate of the checkpoint
selection, so that validation keeps it when no step on the target's labels does better.

A channel-set classifier reads the target's montage as it is (its channel layout is set by the
data, not stored in its weights); a fixed-channel one needs the target's channels to be its own.
"""

from __future__ import annotations

import copy
from pathlib import Path

from partnd._validation import check
from partnd.models.night import ContextClassifier, NightClassifier
from partnd.models.sequence import SequenceClassifier
from partnd.models.serialization import CLASSIFIER_FILE, load_classifier

__all__ = ["start_from_classifier", "trained_classifier"]


def _classifier_file(encoder: str | Path) -> Path | None:
    """The ``classifier.pt`` that ``encoder`` names (itself or inside its run directory), if
    any."""
    path = Path(encoder)
    if path.is_dir():
        path = path / CLASSIFIER_FILE
    return path if path.name == CLASSIFIER_FILE and path.is_file() else None


def trained_classifier(encoder: object) -> ContextClassifier | None:
    """The trained sequence or night classifier that ``finetune``'s ``encoder`` names.

    Args:
        encoder: What was passed as ``finetune``'s encoder: a :class:`SequenceClassifier` or
            :class:`NightClassifier` (copied), the run directory of one or its
            ``classifier.pt``; anything else (an encoder, a pretrain run directory, a preset
            name, ``None``) names none.

    Returns:
        A copy of the classifier on the CPU, or ``None``. A window classifier's or a braindecode
        stager's run directory names none: ``finetune`` reads its window encoder, as before.
    """
    model: object = None
    if isinstance(encoder, SequenceClassifier | NightClassifier):
        model = copy.deepcopy(encoder).cpu()
    elif isinstance(encoder, str | Path) and (path := _classifier_file(encoder)) is not None:
        model = load_classifier(path)
    if not isinstance(model, SequenceClassifier | NightClassifier):
        return None
    model.encoder.window.signal_info = model.signal_info  # the data are checked against it
    return model


def start_from_classifier(
    model: ContextClassifier,
    start: ContextClassifier,
    *,
    num_classes: int,
    pretrained_levels: str,
) -> None:
    """Give ``model`` (built on ``start``'s encoder) every weight of ``start``, in place.

    Args:
        model: The classifier ``finetune`` built for the configuration and the data.
        start: The trained classifier it starts from.
        num_classes: The classes of the fine-tuning (K).
        pretrained_levels: ``FinetuneConfig.pretrained_levels``.

    Raises:
        InputError: Naming ``encoder`` or the configuration field: a classifier of another kind
            than ``FinetuneConfig.context`` asks for (a night classifier for ``"night"``, a
            sequence classifier of the same context otherwise), another number of classes, or
            ``pretrained_levels`` other than ``"all"`` (a trained classifier starts whole).
    """
    check(
        pretrained_levels == "all",
        "FinetuneConfig.pretrained_levels",
        "'all' when starting from a trained classifier (it starts whole: head and both levels)",
        repr(pretrained_levels),
    )
    if isinstance(model, NightClassifier):
        check(
            isinstance(start, NightClassifier),
            "encoder",
            "a trained night classifier to start a night classifier (FinetuneConfig.context="
            "'night') from",
            f"a {type(start).__name__}",
        )
    else:
        same = isinstance(start, SequenceClassifier) and start.context == model.context
        check(
            same,
            "encoder",
            f"a trained sequence classifier of context {model.context} (FinetuneConfig.context) "
            "to start from",
            f"a {type(start).__name__}"
            + (f" of context {start.context}" if isinstance(start, SequenceClassifier) else ""),
        )
    check(
        start.num_classes == num_classes,
        "num_classes",
        f"the {start.num_classes} classes of the classifier it starts from",
        str(num_classes),
    )
    model.load_state_dict(start.state_dict())
