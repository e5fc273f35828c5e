"""The dimension-generic patch core: where patches are drawn, how they are cut, what is predicted.

- :mod:`partnd.patches.sampling`: :class:`~partnd.patches.sampling.OffGridSampler` (PART's random
  boxes), :class:`~partnd.patches.sampling.GridSampler` (fixed tiles) and
  :func:`~partnd.patches.sampling.crop_and_resize`.
- :mod:`partnd.patches.targets`: the relative targets (Δ position, optional Δ scale) and pair
  draws.
- :mod:`partnd.patches.resampling`, :mod:`partnd.patches.integer_box_resize` and
  :mod:`partnd.patches.box_taps_kernel`: the anti-aliased resize of scaled boxes.

Nothing here knows about sleep, images or the training engine.
"""

__all__: list[str] = []
