"""The window front-end benchmark's ``spectra`` reference: what the spectral tokens carry,
summarised per window."""

from __future__ import annotations

import numpy as np
import torch

from partnd.recipes import bench_support as bench


def test_patch_spectra_peaks_at_the_tone_and_varies_only_where_the_window_changes() -> None:
    t = torch.arange(3000) / 100.0
    steady = torch.sin(2 * torch.pi * 10 * t)  # 10 Hz for all 30 s
    switching = torch.where(
        t < 15, torch.sin(2 * torch.pi * 4 * t), torch.sin(2 * torch.pi * 20 * t)
    )
    windows = torch.stack([torch.stack([steady, switching]), torch.stack([switching, steady])])
    features = bench.patch_spectra(windows)  # [N=2, 2 * C=2 * 31]
    assert features.shape == (2, 2 * 2 * 31)
    mean, std = features[:, : 2 * 31].reshape(2, 2, 31), features[:, 2 * 31 :].reshape(2, 2, 31)
    assert mean[0, 0].argmax() == 10 and mean[1, 1].argmax() == 10
    assert std[0, 0, 10] < 1e-3  # the same tone in every 1 s patch
    # half the patches at 4 Hz, half at 20 Hz: both bins high on the mean, spread over patches
    switched = mean[0, 1]
    assert set(np.argsort(switched)[-2:].tolist()) == {4, 20}
    assert std[0, 1, 4] > 1.0 and std[0, 1, 20] > 1.0
    assert np.array_equal(features[0, :31], features[1, 31:62])  # channels keep their order
