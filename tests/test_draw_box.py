"""``partnd.evaluation.capabilities.draw_box``: a (row, column) box outlined on an image axis."""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from partnd.evaluation.capabilities import draw_box


def test_a_box_is_drawn_at_its_column_and_row_with_its_width_and_height() -> None:
    figure, ax = plt.subplots()
    draw_box(ax, torch.tensor([2.0, 5.0]), torch.tensor([3.0, 7.0]), "red", 1.5)
    (box,) = ax.patches
    assert isinstance(box, Rectangle) and not box.get_fill()
    assert box.get_xy() == (5.0, 2.0)  # x = column, y = row
    assert (box.get_width(), box.get_height()) == (7.0, 3.0)
    assert box.get_linewidth() == 1.5
    plt.close(figure)
