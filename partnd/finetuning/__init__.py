"""Fine-tuning a pretrained encoder into a classifier, and evaluating it.

- :mod:`partnd.finetuning.training`: :func:`~partnd.finetuning.training.finetune` and
  :func:`~partnd.finetuning.training.evaluate` for the window, sequence and night set-ups, behind
  one shared data check.
- :mod:`partnd.finetuning.tasks`: the classification loss of a window classifier, which the
  sequence task extends.
- :mod:`partnd.finetuning.sequence`: the sequence and night classifiers' data, task and whole-night
  prediction.
- :mod:`partnd.finetuning.pretrained_parameters`: which parameters of a classifier came from its
  pretrained encoder (what ``FinetuneConfig.probe_steps`` holds fixed).
- :mod:`partnd.finetuning.pretrained_levels`: which levels of a sequence or night classifier
  start from the pretrained encoder (``FinetuneConfig.pretrained_levels``).
"""

__all__: list[str] = []
