"""MontageUnion: datasets of different montages laid out on the union of their derivations (absent
channels NaN), what the adapters accept of it, and mixed-montage pretraining."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, Subset

from partnd._validation import InputError
from partnd.datasets import MontageUnion, SleepWindowDataset
from partnd.datasets.adapters import as_labelled_dataset, as_signal_dataset
from partnd.datasets.montage_union import as_union
from partnd.datasets.segments import SleepSegmentDataset
from tests.staged_stores import write_staged_store

pytestmark = pytest.mark.usefixtures("one_thread")

THREE = ["F3-M2", "C4-M1", "O2-M1"]
TWO = ["O2-M1", "Fpz-Cz"]
UNION = ["F3-M2", "C4-M1", "O2-M1", "Fpz-Cz"]


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path]:
    """A three-channel store of 2 records and a two-channel one of 2 records (one shared
    derivation, O2-M1), 48 windows of 300 samples at 10 Hz each."""
    return (
        write_staged_store(tmp_path / "three.zarr", THREE, records=2),
        write_staged_store(tmp_path / "two.zarr", TWO, seed=1, records=2),
    )


class Named(Dataset[torch.Tensor]):
    """Items ``[C, T]`` of ones with named channels, a rate and a length of one's choosing."""

    def __init__(self, ch_names: list[str] | None, sfreq: float = 10.0, n_times: int = 300):
        self.ch_names, self.sfreq, self.n_times = ch_names, sfreq, n_times

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.ones(len(self.ch_names or [0]), self.n_times)


def expected_item(signal: torch.Tensor, names: list[str], layout: list[str]) -> torch.Tensor:
    """``signal`` of channels ``names`` placed by name on ``layout`` (NaN elsewhere)."""
    out = torch.full((len(layout), signal.shape[-1]), float("nan"))
    for position, name in enumerate(names):
        if name in layout:
            out[layout.index(name)] = signal[position]
    return out


def test_items_are_each_parts_items_with_channels_placed_by_name(stores) -> None:
    three, two = stores
    parts = [SleepWindowDataset(three), SleepWindowDataset(two, records=["r1"])]
    union = MontageUnion(parts)
    assert union.ch_names == UNION and union.n_chans == 4
    assert len(union) == 96 + 48 and list(union.offsets) == [0, 96, 144]
    assert union.sfreq == 10.0 and union.n_times == 300 and union.normalize == "window"
    for index in [0, 47, 95, 96, 120, 143, -1]:
        part, inner = union.part_of(index)
        x, label = union[index]
        source, source_label = parts[part][inner]
        names = THREE if part == 0 else TWO
        torch.testing.assert_close(x, expected_item(source, names, UNION), equal_nan=True)
        assert label == source_label
    assert union.part_of(96) == (1, 0) and union.part_of(-1) == (1, 47)
    # the absent channels are NaN throughout, the present ones finite
    assert union[0][0][3].isnan().all() and union[0][0][:3].isfinite().all()
    assert union[96][0][:2].isnan().all() and union[96][0][2:].isfinite().all()


def test_a_batch_reads_each_part_once_and_equals_the_items_one_by_one(stores, monkeypatch) -> None:
    three, two = stores
    parts = [SleepWindowDataset(three), SleepWindowDataset(two)]
    union = MontageUnion(parts)
    calls: list[tuple[int, list[int]]] = []
    for position, part in enumerate(parts):
        fetch = part.__getitems__

        def counting(indices, _fetch=fetch, _position=position):
            calls.append((_position, list(indices)))
            return _fetch(indices)

        monkeypatch.setattr(part, "__getitems__", counting)
    indices = [130, 3, 96, 3, 191, 50]
    batch = union.__getitems__(indices)
    assert sorted(calls) == [(0, [3, 3, 50]), (1, [34, 0, 95])]
    for index, (x, label) in zip(indices, batch, strict=True):
        one, one_label = union[index]
        torch.testing.assert_close(x, one, equal_nan=True)
        assert label == one_label


def test_a_given_layout_orders_and_drops_channels(stores) -> None:
    three, two = stores
    parts = [SleepWindowDataset(three, normalize=False), SleepWindowDataset(two, normalize=False)]
    layout = ["Fpz-Cz", "O2-M1", "C4-M1"]
    union = MontageUnion(parts, channels=layout)
    assert union.ch_names == layout
    torch.testing.assert_close(
        union[5][0], expected_item(parts[0][5][0], THREE, layout), equal_nan=True
    )
    fpz, o2 = parts[1][4][0][1], parts[1][4][0][0]
    torch.testing.assert_close(union[100][0][:2], torch.stack([fpz, o2]))
    assert union[100][0].shape == (3, 300) and union[100][0][2].isnan().all()
    with pytest.raises(InputError, match=r"channels: expected a layout holding at least one"):
        MontageUnion(parts, channels=["F3-M2"])


def test_labels_subjects_records_and_locations_are_the_parts_in_order(stores) -> None:
    three, two = stores
    parts = [
        SleepWindowDataset(three, labelled_only=True),
        SleepWindowDataset(two, records=["r1", "r0"]),
    ]
    union = MontageUnion(parts)
    np.testing.assert_array_equal(union.labels, np.concatenate([parts[0].labels, parts[1].labels]))
    assert union.subjects == ["s0-0", "s0-1", "s1-0", "s1-1"]
    assert union.records == ("r0", "r1", "r1", "r0")
    assert union.record_subjects == ("s0-0", "s0-1", "s1-1", "s1-0")
    assert union.locate(96) == parts[1].locate(0) == ("r1", 0)
    assert union.record_of(50) == parts[0].record_of(50)
    assert union.stage_names == parts[0].stage_names and union.dtype == torch.float32
    # a part without exposed labels (segments) leaves the union without them
    assert MontageUnion([Named(["C4-M1"]), parts[1]]).labels is None


def test_chunk_ids_keep_each_parts_chunks_and_never_collide(stores) -> None:
    three, two = stores
    parts = [SleepWindowDataset(three), Subset(SleepWindowDataset(two), [90, 3, 4, 70])]
    union = MontageUnion([*parts, Named(["Pz-Oz"])])
    ids = union.chunk_ids
    assert ids.shape == (len(union),) and ids.dtype == np.int64
    first, second, third = ids[:96], ids[96:100], ids[100:]
    assert np.array_equal(first, parts[0].chunk_ids)  # its own chunks, from 0
    source = parts[1].dataset.chunk_ids[[90, 3, 4, 70]]  # a Subset's chunks are its source's
    assert np.array_equal(second == second[1], source == source[1])
    assert len({*first} & {*second}) == 0 and len({*second} & {*third}) == 0
    assert len(set(third)) == 3  # an item of a part without chunks is its own chunk


def test_segment_datasets_are_laid_out_alike(stores) -> None:
    three, two = stores
    parts = [
        SleepSegmentDataset(three, segment_windows=4),
        SleepSegmentDataset(two, segment_windows=4, records=["r0"]),
    ]
    union = MontageUnion(parts)
    assert union.on_segments and union.n_times == 1200 and union.segment_windows == 4
    x = union[len(parts[0])]
    torch.testing.assert_close(x, expected_item(parts[1][0], TWO, UNION), equal_nan=True)
    batch = union.__getitems__([0, len(union) - 1])
    torch.testing.assert_close(batch[0], expected_item(parts[0][0], THREE, UNION), equal_nan=True)


def test_refusals_name_the_argument(stores) -> None:
    three, two = stores
    windows = SleepWindowDataset(two)
    with pytest.raises(InputError, match=r"datasets: expected a non-empty list"):
        MontageUnion([])
    with pytest.raises(InputError, match=r"datasets: expected datasets of one sampling rate"):
        MontageUnion([windows, Named(["Pz-Oz"], sfreq=100.0)])
    with pytest.raises(InputError, match=r"datasets: expected datasets of one item length"):
        MontageUnion([windows, Named(["Pz-Oz"], n_times=3000)])
    with pytest.raises(InputError, match=r"datasets\[1\]: expected a dataset with named channels"):
        MontageUnion([windows, Named(None)])
    with pytest.raises(InputError, match=r"datasets\[1\]: expected a dataset with named channels"):
        MontageUnion([windows, torch.utils.data.TensorDataset(torch.zeros(3, 2, 300))])
    with pytest.raises(InputError, match=r"datasets: expected all window datasets or all segment"):
        MontageUnion([windows, SleepSegmentDataset(three, segment_windows=4)])
    with pytest.raises(InputError, match=r"datasets: expected datasets normalised alike"):
        MontageUnion([windows, SleepWindowDataset(three, normalize="record")])
    with pytest.raises(InputError, match=r"datasets\[0\]: expected a dataset with return_index"):
        MontageUnion([SleepWindowDataset(three, return_index=True)])
    with pytest.raises(InputError, match=r"channels: expected distinct names"):
        MontageUnion([windows], channels=["O2-M1", "O2-M1"])


def test_it_pickles_for_dataloader_workers(stores) -> None:
    three, two = stores
    union = MontageUnion([SleepWindowDataset(three), SleepWindowDataset(two)])
    union.__getitems__([0, 100])  # opened stores and filled caches do not travel
    copy = pickle.loads(pickle.dumps(union))
    for index in (7, 150):
        torch.testing.assert_close(copy[index][0], union[index][0], equal_nan=True)
    loader = torch.utils.data.DataLoader(union, batch_size=4, num_workers=1)
    x, labels = next(iter(loader))
    assert x.shape == (4, 4, 300) and x[:, 3].isnan().all() and labels.dtype == torch.int64


def test_the_adapters_accept_absent_channels_only_for_a_channel_set_model(stores) -> None:
    three, two = stores
    union = MontageUnion([SleepWindowDataset(three), SleepWindowDataset(two)])
    fixed, _ = as_signal_dataset(union)
    with pytest.raises(InputError, match=r"dataset\[0\]: expected only finite values"):
        fixed.batch([0, 100])
    with pytest.raises(InputError, match=r"data: expected datasets holding every channel"):
        as_union(union, "data")  # what the training functions do first: refused before a batch
    assert as_union(union, "data", absent_channels=True) is union
    signals, spec = as_signal_dataset(union, absent_channels=True)
    assert spec.in_chans == 4 and signals.info.ch_names == tuple(UNION)
    batch = signals.batch([0, 100, 101])
    assert batch.shape == (3, 4, 300) and batch[0, 3].isnan().all() and batch[1, :2].isnan().all()
    assert signals[100][:2].isnan().all()
    pairs, _ = as_labelled_dataset(union, absent_channels=True)
    assert pairs.label(100) == int(union.labels[100]) and pairs[100][0][2:].isfinite().all()


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (
            lambda x: x[:, 1, 5].fill_(float("nan")),
            r"got 1 NaN/Inf value\(s\) in channel\(s\) \[1\]",
        ),
        (lambda x: x[:, 0].fill_(float("inf")), r"got 50 NaN/Inf value\(s\) in channel\(s\) \[0\]"),
        (lambda x: x.fill_(float("nan")), r"expected at least one present channel"),
        (  # an absent channel holding an Inf value is no absent channel
            lambda x: x[:, 2, 7].fill_(-float("inf")),
            r"got 50 NaN/Inf value\(s\) in channel\(s\) \[2\]",
        ),
    ],
)
def test_other_non_finite_values_are_still_refused(corrupt, message) -> None:
    data = torch.randn(4, 3, 50)
    data[:, 2] = float("nan")  # an absent channel: accepted
    signals, _ = as_signal_dataset(data, absent_channels=True)
    assert signals.batch([0, 1]).shape == (2, 3, 50)
    corrupt(data[2:3])
    with pytest.raises(InputError, match=r"dataset\[2\]: expected") as refused:
        signals.batch([1, 2, 3])
    assert refused.match(message)
    with pytest.raises(InputError, match=message):
        signals[2]
    huge = torch.full((2, 2, 50), 3e38)  # finite values whose sum overflows pass
    assert as_signal_dataset(huge, absent_channels=True)[0].batch([0, 1]).shape == (2, 2, 50)


SPECTRAL = {"frontend": "spectral", "frontend_options": {"standardize": True}}
SEGMENTS = {"window_samples": 300, "segment_windows": 4, "patch_size": 30}
METHODS = {
    "part": {"patch_size": 30, "num_patches": 10},
    "part_windows": {**SEGMENTS, "num_windows": 3, "temporal_encoder": "temporal_test"},
    "rp": {**SEGMENTS, "num_windows": 6, "tau_pos_windows": 1, "tau_neg_windows": 2},
}


@pytest.mark.parametrize("method", list(METHODS))
def test_a_set_model_pretrains_on_a_list_of_stores_of_two_montages(
    stores, tmp_path: Path, method: str
) -> None:
    """Windows (PART) or segments (PART across windows, relative positioning) of two stores of
    different montages, read as one union: finite losses, and the encoder records the union."""
    from partnd.engine.config import PretrainConfig
    from partnd.pretraining import pretrain

    three, two = stores
    config = PretrainConfig.preset(
        "test",
        method=method,
        max_steps=2,
        batch_size=4,
        channel_mode="set",
        encoder_overrides=SPECTRAL,
        **METHODS[method],
    )
    result = pretrain([str(three), two], out_dir=tmp_path / "run", config=config)
    losses = [record["loss"] for record in result.history if record["phase"] == "train"]
    assert losses and np.isfinite(losses).all()
    info = result.encoder.signal_info
    assert info is not None and info.channel_mode == "set" and info.ch_names == tuple(UNION)
    if method == "part":  # a union given as a dataset is read alike
        union = MontageUnion([SleepWindowDataset(three), SleepWindowDataset(two)])
        again = pretrain(union, out_dir=tmp_path / "again", config=config)
        assert [r["loss"] for r in again.history if r["phase"] == "train"] == losses


def test_a_fixed_channel_run_refuses_stores_of_different_montages(stores, tmp_path: Path) -> None:
    from partnd.engine.config import PretrainConfig
    from partnd.pretraining import pretrain

    three, two = stores
    config = PretrainConfig.preset("test", patch_size=30, num_patches=10, max_steps=1)
    lacking = (
        r"dataset: expected datasets holding every channel of \['F3-M2', 'C4-M1', 'O2-M1', "
        r"'Fpz-Cz'\] for a model of fixed channels, got dataset\[0\] \(three.zarr\) lacking "
        r"\['Fpz-Cz'\]; dataset\[1\] \(two.zarr\) lacking \['F3-M2', 'C4-M1'\] "
        r"\(channel_mode='set' reads"
    )
    with pytest.raises(InputError, match=lacking):
        pretrain([three, two], out_dir=tmp_path / "fixed", config=config)
    with pytest.raises(InputError, match=lacking):  # a union given as a dataset too
        union = MontageUnion([SleepWindowDataset(three), SleepWindowDataset(two)])
        pretrain(union, out_dir=tmp_path / "fixed", config=config)
    # stores of one montage (in any channel order) are one fixed-channel dataset
    reordered = write_staged_store(tmp_path / "reordered.zarr", THREE[::-1], seed=2, records=1)
    result = pretrain([three, reordered], out_dir=tmp_path / "one", config=config)
    assert result.encoder.signal_info.ch_names == tuple(THREE)


def finetune_config(**overrides: object):
    from partnd.engine.config import FinetuneConfig

    values = {"patch_size": 30, "batch_size": 16, "max_steps": 3, "encoder_overrides": SPECTRAL}
    return FinetuneConfig.preset("test", **{**values, **overrides})


def test_a_set_classifier_is_fine_tuned_and_evaluated_on_lists_of_stores(
    stores, tmp_path: Path
) -> None:
    from partnd.finetuning.training import evaluate, finetune

    three, two = stores
    train = [three, SleepWindowDataset(two, records=["r0"], labelled_only=True)]
    val = SleepWindowDataset(two, records=["r1"])  # another layout: read on the training one
    result = finetune(
        None,
        train,
        val_dataset=val,
        num_classes=5,
        out_dir=tmp_path / "run",
        config=finetune_config(channel_mode="set"),
    )
    assert result.model.signal_info.ch_names == tuple(UNION)
    assert result.best_metrics is not None
    report = evaluate(result.model, [two, three], device="cpu")
    assert report.n == 2 * 48 + 2 * 48 and np.isfinite(report.loss)
    with pytest.raises(InputError, match=r"val_dataset: expected windows other than those"):
        finetune(
            None,
            train,
            val_dataset=[SleepWindowDataset(two, records=["r0"])],
            num_classes=5,
            out_dir=tmp_path / "leak",
            config=finetune_config(channel_mode="set"),
        )


def test_a_fixed_classifier_evaluates_stores_holding_its_channels(stores, tmp_path: Path) -> None:
    from partnd.finetuning.training import evaluate, finetune

    three, two = stores
    narrow = write_staged_store(tmp_path / "narrow.zarr", ["O2-M1", "C4-M1"], seed=3, records=1)
    model = finetune(
        None, narrow, num_classes=5, out_dir=tmp_path / "run", config=finetune_config()
    ).model
    assert model.signal_info.channel_mode == "fixed"
    report = evaluate(model, [three, narrow], device="cpu")  # its two channels, picked by name
    assert report.n == 3 * 48
    with pytest.raises(
        InputError,
        match=r"dataset: expected datasets holding every channel of \['O2-M1', 'C4-M1'\] for a "
        r"model of fixed channels, got dataset\[1\] \(two.zarr\) lacking \['C4-M1'\]",
    ):
        evaluate(model, [three, two], device="cpu")


def test_the_command_line_pretrains_and_fine_tunes_on_several_stores(
    stores, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import json

    from partnd import cli
    from partnd.models.serialization import load_classifier, load_encoder

    three, two = stores
    common = ["--preset", "test", "--patch-size", "30", "--max-steps", "2", "--batch-size", "8"]
    common += ["--encoder-overrides", json.dumps(SPECTRAL)]
    pre = ["pretrain", "--data", str(three), str(two), "--out", str(tmp_path / "pre"), *common]
    assert cli.main(pre) == 2  # a fixed-channel encoder cannot read two montages
    error = capsys.readouterr().err
    assert "--data: expected datasets holding every channel of" in error
    assert "dataset[1] (two.zarr) lacking ['F3-M2', 'C4-M1']" in error
    assert "--channel-mode" in error and len(error.strip().splitlines()) == 1
    assert cli.main([*pre, "--channel-mode", "set"]) == 0
    assert load_encoder(tmp_path / "pre").signal_info.ch_names == tuple(UNION)
    selected = [*pre, "--channel-mode", "set", "--records", "r0", "--overwrite"]
    assert cli.main(selected) == 2
    assert "--records: expected one sleep store as --data" in capsys.readouterr().err
    val = write_staged_store(tmp_path / "val.zarr", ["Pz-Oz", "C4-M1"], seed=4, records=1)
    ft = ["finetune", "--data", str(three), str(two), "--init-weights", str(tmp_path / "pre")]
    ft += ["--val-data", str(val), "--out", str(tmp_path / "ft"), *common[:-2]]
    assert cli.main(ft) == 0
    model = load_classifier(tmp_path / "ft")
    assert model.signal_info.ch_names == tuple(UNION)
    assert model.class_names == ["W", "N1", "N2", "N3", "REM"]  # the stores' stage names
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert metrics["n"] == 48  # the validation store's windows


@pytest.mark.slow
def test_the_sample_profiles_pretrain_together_from_the_command_line(tmp_path: Path) -> None:
    """Sleep-EDF-, SHHS- and headband-like nights, generated and ingested as a user would, are
    pretrained on together: one encoder of the union of their five derivations."""
    from partnd import cli
    from partnd.models.serialization import load_encoder

    stores = []
    for profile in ("sleep_edf", "nsrr", "headband"):
        root = tmp_path / profile
        argv = ["cohort", "--profile", profile, "--out", str(root), "--records", "1"]
        assert cli.main([*argv, "--hours", "0.25"]) == 0
        assert cli.main(["ingest", str(root), "--out", str(tmp_path / f"{profile}.zarr")]) == 0
        stores.append(str(tmp_path / f"{profile}.zarr"))
    argv = ["pretrain", "--data", *stores, "--out", str(tmp_path / "run"), "--preset", "test"]
    argv += ["--patch-size", "100", "--max-steps", "2", "--batch-size", "8"]
    assert cli.main(argv) == 2  # five derivations, none in every store: a fixed encoder refuses
    assert cli.main([*argv, "--channel-mode", "set"]) == 0
    info = load_encoder(tmp_path / "run").signal_info
    assert info.ch_names == ("Fpz-Cz", "Pz-Oz", "C4-A1", "C3-A2", "AF7-Fpz")
    assert info.sfreq == 100.0 and info.spatial_shape == (3000,)
