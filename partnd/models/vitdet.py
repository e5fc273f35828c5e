"""ViTDet-style backbone: a partnd ViT encoder as the feature pyramid of torchvision's Mask R-CNN.

The paper evaluates detection transfer with "Mask R-CNN ... 1x schedule (12 epochs) and 1024x1024
resolution ... the configuration of ViTDet [Li et al., 2022] ... ViT-B/16" (appendix,
"Object detection"). ViTDet keeps the plain, single-scale ViT and builds the pyramid from its last
feature map alone (the *simple feature pyramid*); this module does the same on a
:class:`~partnd.models.ViTEncoder` and plugs into ``torchvision.models.detection.MaskRCNN``:

* the image is tiled into P x P patches (:class:`~partnd.patches.sampling.GridSampler`), embedded
by the
  encoder's own patch projection, given a position embedding (the encoder's, interpolated to the
  image's grid, or a fresh one for encoders pretrained without: PART, MP3) and run through the
  encoder's blocks, windowed or global as in ViTDet; [CLS] and the final norm are not used
  (detectron2's ViT backbone has neither);
* the last block's patch tokens, a stride-P map ``[B, D, H/P, W/P]``, become four maps of strides
  P/4, P/2, P and 2P (4, 8, 16, 32 for P=16) by two transposed convolutions (with LayerNorm and
  GELU between), one transposed convolution, the identity and a 2x2 max-pool, each followed by a
  1x1 and a 3x3 convolution with LayerNorm to ``out_channels`` (256), plus a stride-4P level
  max-pooled from the last (detectron2's ``LastLevelMaxPool``);
* the maps are returned as an ``OrderedDict`` with torchvision's FPN names ``"0"``-``"3"`` and
  ``"pool"``, which ``MaskRCNN``'s default anchor generator (5 levels) and RoI poolers
  (``"0"``-``"3"``) expect; the backbone exposes ``out_channels``.

Sources: detectron2 ``modeling/backbone/vit.py`` (``SimpleFeaturePyramid``, ``ViT``,
``get_abs_pos``, ``window_partition``) and
``projects/ViTDet/configs/COCO/mask_rcnn_vitdet_b_100ep.py`` (scale factors ``(4, 2, 1, 0.5)``,
``LastLevelMaxPool``, norm "LN", window size 14, global blocks 2, 5, 8, 11, drop path 0.1, 2-conv
RPN head, 4-conv + 1-fc box head and 4-conv mask head with LN).
Not reproduced: ViTDet's relative position biases (``use_rel_pos``; new zero-initialised
parameters that the pretrained encoders do not have).

Example:
    >>> encoder = partnd.load_encoder("runs/in1k/pretrain/part")   # a 2D ViT, P = 16
    >>> model = build_vitdet_mask_rcnn(encoder, num_classes=81)    # 80 classes + background
    >>> losses = model(images, targets)                             # torchvision's contract
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from partnd._validation import InputError, check
from partnd.models.vit import DropPath, ViTEncoder
from partnd.patches.sampling import GridSampler

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "SimpleFeaturePyramid",
    "ViTDetBackbone",
    "build_vitdet_mask_rcnn",
    "default_global_blocks",
    "interpolate_position_embedding",
]

#: Normalisation of the images the encoders were pretrained on (torchvision/timm ImageNet values).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: ViTDet's level names are p2..p6; torchvision's FPN (and MaskRCNN's defaults) use these.
FEATURE_NAMES = ("0", "1", "2", "3")
POOL_NAME = "pool"


def _layer_norm_2d(channels: int) -> nn.Module:
    """detectron2's "LN" for ``[B, C, H, W]`` maps: LayerNorm over channels (torchvision's)."""
    from torchvision.models.convnext import LayerNorm2d

    return LayerNorm2d(channels, eps=1e-6)


def default_global_blocks(depth: int) -> tuple[int, ...]:
    """Blocks with global attention when the others attend within windows (ViTDet's rule).

    ViTDet-B (12 blocks) attends globally in blocks 2, 5, 8 and 11: the last block of each quarter
    of the network. Other depths keep that rule, ``round((k + 1) * depth / 4) - 1`` for
    ``k = 0..3``; fewer than 4 blocks are all global.

    Args:
        depth: Number of transformer blocks.

    Returns:
        The sorted 0-based indices of the global blocks.
    """
    if depth < 4:
        return tuple(range(depth))
    return tuple(sorted({round((k + 1) * depth / 4) - 1 for k in range(4)}))


def interpolate_position_embedding(pos_embed: Tensor, grid: Sequence[int]) -> Tensor:
    """Resize a 2D position-embedding map to another grid (bicubic, as ViTDet's ``get_abs_pos``).

    Args:
        pos_embed: ``[1, D, h0, w0]`` embedding map.
        grid: Target grid ``(h, w)`` of patches.

    Returns:
        ``[1, D, h, w]``; ``pos_embed`` itself when the grid already matches.
    """
    check(
        pos_embed.dim() == 4 and pos_embed.shape[0] == 1,
        "pos_embed",
        "a 2D position-embedding map [1, D, h, w]",
        pos_embed,
    )
    size = (int(grid[0]), int(grid[1]))
    if tuple(pos_embed.shape[2:]) == size:
        return pos_embed
    return F.interpolate(pos_embed, size=size, mode="bicubic", align_corners=False)


def _window_partition(x: Tensor, window: int) -> tuple[Tensor, tuple[int, int]]:
    """``[B, h, w, D]`` -> ``[B * nW, window * window, D]`` windows, zero-padding h, w to multiples
    of ``window`` (detectron2's ``window_partition``); also returns the padded grid."""
    batch, height, width, dim = x.shape
    pad_h = (window - height % window) % window
    pad_w = (window - width % window) % window
    if pad_h or pad_w:
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
    padded_h, padded_w = height + pad_h, width + pad_w
    x = x.view(batch, padded_h // window, window, padded_w // window, window, dim)
    windows = x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, dim)
    return windows, (padded_h, padded_w)


def _window_unpartition(
    windows: Tensor, window: int, padded: tuple[int, int], grid: tuple[int, int]
) -> Tensor:
    """Inverse of :func:`_window_partition`: windows -> ``[B, h, w, D]`` without the padding."""
    padded_h, padded_w = padded
    dim = windows.shape[-1]
    batch = windows.shape[0] // ((padded_h // window) * (padded_w // window))
    x = windows.view(batch, padded_h // window, padded_w // window, window, window, dim)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(batch, padded_h, padded_w, dim)
    return x[:, : grid[0], : grid[1]].contiguous()


class SimpleFeaturePyramid(nn.Module):
    """ViTDet's simple feature pyramid over one stride-``P`` map (detectron2's module).

    For each scale factor: 4.0 -> ``ConvTranspose2d(D, D/2, 2, 2)``, LN, GELU,
    ``ConvTranspose2d(D/2, D/4, 2, 2)``; 2.0 -> ``ConvTranspose2d(D, D/2, 2, 2)``; 1.0 -> identity;
    0.5 -> ``MaxPool2d(2, 2)``; then ``Conv 1x1 -> LN`` and ``Conv 3x3 -> LN`` to ``out_channels``
    (no bias, as with detectron2's norm). A last level max-pools the coarsest map (kernel 1,
    stride 2: ``LastLevelMaxPool``).

    Args:
        in_channels: Width D of the input map.
        out_channels: Width of every output map (256 in ViTDet).
        scale_factors: Up/down-sampling factors, finest first (ViTDet: ``(4, 2, 1, 0.5)``).
        top_block: Add the max-pooled last level.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int = 256,
        scale_factors: Sequence[float] = (4.0, 2.0, 1.0, 0.5),
        top_block: bool = True,
    ) -> None:
        super().__init__()
        from torchvision.ops.misc import Conv2dNormActivation

        supported = (4.0, 2.0, 1.0, 0.5)
        check(
            len(scale_factors) >= 1 and all(float(s) in supported for s in scale_factors),
            "scale_factors",
            f"factors from {supported}",
            repr(tuple(scale_factors)),
        )
        check(
            list(scale_factors) == sorted(scale_factors, reverse=True)
            and len(set(scale_factors)) == len(scale_factors),
            "scale_factors",
            "distinct factors, finest (largest) first",
            repr(tuple(scale_factors)),
        )
        check(
            in_channels % 4 == 0 or 4.0 not in scale_factors,
            "in_channels",
            "a multiple of 4 (the 4x level halves the width twice)",
            repr(in_channels),
        )
        self.scale_factors = tuple(float(s) for s in scale_factors)
        self.out_channels = out_channels
        self.top_block = top_block
        self.stages = nn.ModuleList()
        for scale in self.scale_factors:
            layers: list[nn.Module] = []
            width = in_channels
            if scale == 4.0:
                layers = [
                    nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2),
                    _layer_norm_2d(in_channels // 2),
                    nn.GELU(),
                    nn.ConvTranspose2d(in_channels // 2, in_channels // 4, kernel_size=2, stride=2),
                ]
                width = in_channels // 4
            elif scale == 2.0:
                layers = [
                    nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
                ]
                width = in_channels // 2
            elif scale == 0.5:
                layers = [nn.MaxPool2d(kernel_size=2, stride=2)]
            layers += [
                Conv2dNormActivation(
                    width,
                    out_channels,
                    kernel_size=1,
                    norm_layer=_layer_norm_2d,
                    activation_layer=None,
                ),
                Conv2dNormActivation(
                    out_channels,
                    out_channels,
                    kernel_size=3,
                    norm_layer=_layer_norm_2d,
                    activation_layer=None,
                ),
            ]
            self.stages.append(nn.Sequential(*layers))

    def forward(self, feature: Tensor) -> list[Tensor]:
        """Args: feature: [B, D, h, w]. Returns: one [B, out_channels, h * s, w * s] map per scale
        factor s (finest first), then the max-pooled last level when ``top_block``."""
        maps = [stage(feature) for stage in self.stages]
        if self.top_block:
            maps.append(F.max_pool2d(maps[-1], kernel_size=1, stride=2, padding=0))
        return maps


class ViTDetBackbone(nn.Module):
    """A 2D partnd ViT encoder as a multi-scale detection backbone (ViTDet; see the module doc).

    Args:
        encoder: A 2D :class:`ViTEncoder` with square patches (deep-copied; the original is not
            modified). Its patch projection and blocks are used; [CLS], the final norm and any
            classifier are not.
        out_channels: Width of every pyramid map (ViTDet: 256).
        scale_factors: Pyramid scale factors relative to the stride-P map (ViTDet: 4, 2, 1, 0.5).
        image_size: Side of the (padded) detection input the fresh position embedding is made
            for (ViTDet: 1024); other inputs interpolate it.
        pretrain_grid: ``(h0, w0)`` tile grid of the encoder's slot position embedding, when it has
            one; ``None`` takes the square root of its size (refused when it is not a square).
        window_size: Side (in patches) of the attention windows of the non-global blocks (ViTDet:
            14); ``None`` or 0 makes every block global.
        global_blocks: Indices of the blocks with global attention; ``None``:
            :func:`default_global_blocks` (2, 5, 8, 11 for 12 blocks).
        drop_path_rate: Stochastic depth of the last block, linearly increasing from 0 (ViTDet:
            0.1); ``None`` keeps the encoder's.

    Attributes:
        out_channels: Channels of every returned map (what ``MaskRCNN`` reads).
        strides: Stride of each returned map, in the order of :meth:`forward`'s keys.
    """

    def __init__(
        self,
        encoder: ViTEncoder,
        *,
        out_channels: int = 256,
        scale_factors: Sequence[float] = (4.0, 2.0, 1.0, 0.5),
        image_size: int = 1024,
        pretrain_grid: Sequence[int] | None = None,
        window_size: int | None = 14,
        global_blocks: Sequence[int] | None = None,
        drop_path_rate: float | None = 0.1,
    ) -> None:
        super().__init__()
        check(isinstance(encoder, ViTEncoder), "encoder", "a ViTEncoder", type(encoder).__name__)
        if encoder.ndim != 2:
            raise InputError(
                f"encoder: expected a 2D image encoder (ndim=2) for the ViTDet backbone, whose "
                f"feature pyramid and Mask R-CNN heads are 2D convolutions over the image plane; "
                f"got an encoder with ndim={encoder.ndim} (patch_size {encoder.patch_size})"
            )
        patch_h, patch_w = encoder.patch_size
        check(
            patch_h == patch_w,
            "encoder",
            "square patches (one stride for both image axes)",
            f"patch_size {encoder.patch_size}",
        )
        check(
            isinstance(image_size, int) and image_size >= patch_h and image_size % patch_h == 0,
            "image_size",
            f"a multiple of the patch size {patch_h}",
            repr(image_size),
        )
        encoder = copy.deepcopy(encoder)
        self.patch_size = patch_h
        self.in_chans = encoder.in_chans
        self.embed_dim = encoder.embed_dim
        self.patch_embed = encoder.patch_embed
        self.blocks = encoder.blocks
        depth = len(self.blocks)
        if drop_path_rate is not None:
            check(
                0.0 <= drop_path_rate < 1.0,
                "drop_path_rate",
                "a rate in [0, 1)",
                repr(drop_path_rate),
            )
            for block, rate in zip(
                self.blocks, torch.linspace(0.0, drop_path_rate, depth).tolist(), strict=True
            ):
                block.drop_path = DropPath(rate)
        self.window_size = int(window_size or 0)
        check(self.window_size >= 0, "window_size", "None or a size >= 0", repr(window_size))
        chosen = default_global_blocks(depth) if global_blocks is None else tuple(global_blocks)
        check(
            all(0 <= index < depth for index in chosen),
            "global_blocks",
            f"block indices in [0, {depth})",
            repr(chosen),
        )
        self.global_blocks = frozenset(chosen)
        self.image_grid = image_size // patch_h
        self.pos_embed = nn.Parameter(self._initial_position_embedding(encoder, pretrain_grid))
        self.pyramid = SimpleFeaturePyramid(self.embed_dim, out_channels, scale_factors)
        self.out_channels = out_channels
        self.strides = tuple(
            [int(self.patch_size / scale) for scale in self.pyramid.scale_factors]
            + [int(2 * self.patch_size / self.pyramid.scale_factors[-1])]
        )
        check(
            all(s > 0 and s & (s - 1) == 0 for s in self.strides[:-1]),
            "scale_factors",
            "factors giving power-of-two strides from the patch size",
            f"strides {self.strides[:-1]} for patch size {self.patch_size}",
        )

    def _initial_position_embedding(
        self, encoder: ViTEncoder, pretrain_grid: Sequence[int] | None
    ) -> Tensor:
        """``[1, D, h0, w0]``: the encoder's slot embedding laid out on its grid, or a fresh
        trunc-normal(0.02) one on the detection grid (the paper's protocol for PART encoders)."""
        table = encoder.pos_embed
        if table is None:
            fresh = torch.empty(1, self.embed_dim, self.image_grid, self.image_grid)
            nn.init.trunc_normal_(fresh, std=0.02)
            return fresh
        count = int(table.shape[0])
        if pretrain_grid is None:
            side = math.isqrt(count)
            check(
                side * side == count,
                "pretrain_grid",
                f"the (h, w) tile grid of the encoder's {count}-slot position embedding (it is "
                "not a square grid, so it cannot be inferred)",
                "None",
            )
            grid = (side, side)
        else:
            grid = (int(pretrain_grid[0]), int(pretrain_grid[1]))
            check(
                len(pretrain_grid) == 2 and grid[0] * grid[1] == count,
                "pretrain_grid",
                f"two ints (h, w) with h * w = {count} (the encoder's position-embedding size)",
                repr(tuple(pretrain_grid)),
            )
        # slots are row-major over the grid (GridSampler), last axis fastest
        layout = table.detach().reshape(grid[0], grid[1], self.embed_dim).permute(2, 0, 1)
        return layout.unsqueeze(0).clone()

    def no_weight_decay(self) -> set[str]:
        """Parameters without weight decay (timm convention): the position embedding."""
        return {"pos_embed"}

    def tokens(self, x: Tensor) -> Tensor:
        """The last block's patch tokens as a stride-P map.

        Args:
            x: [B, C, H, W] images with H and W multiples of the patch size.

        Returns:
            [B, D, H / P, W / P].
        """
        check(
            x.dim() == 4
            and x.shape[1] == self.in_chans
            and x.shape[2] % self.patch_size == 0
            and x.shape[3] % self.patch_size == 0,
            "x",
            f"images [B, {self.in_chans}, H, W] with H and W multiples of the patch size "
            f"{self.patch_size} (MaskRCNN pads to size_divisible)",
            x,
        )
        batch = int(x.shape[0])
        grid = (int(x.shape[2]) // self.patch_size, int(x.shape[3]) // self.patch_size)
        patches = GridSampler(2, self.patch_size)(x, validate=False).patches  # [B, N, C, P, P]
        tokens = self.patch_embed(patches)  # [B, N, D]
        pos = interpolate_position_embedding(self.pos_embed, grid)  # [1, D, h, w]
        tokens = tokens + pos.flatten(2).transpose(1, 2).to(tokens.dtype)
        hidden = tokens.view(batch, grid[0], grid[1], self.embed_dim)
        for index, block in enumerate(self.blocks):
            if self.window_size and index not in self.global_blocks:
                windows, padded = _window_partition(hidden, self.window_size)
                windows = block(windows)
                hidden = _window_unpartition(windows, self.window_size, padded, grid)
            else:
                flat = block(hidden.reshape(batch, grid[0] * grid[1], self.embed_dim))
                hidden = flat.view(batch, grid[0], grid[1], self.embed_dim)
        return hidden.permute(0, 3, 1, 2).contiguous()

    def forward(self, x: Tensor) -> OrderedDict[str, Tensor]:
        """Multi-scale features for torchvision's detection heads.

        Args:
            x: [B, C, H, W] normalised, padded images (H, W multiples of the patch size; for the
                2P-stride level to be exact, of twice the patch size).

        Returns:
            ``OrderedDict`` ``"0"``..``"3"``: ``[B, out_channels, H / s, W / s]`` for the strides
            :attr:`strides` (4, 8, 16, 32 for P = 16), then ``"pool"`` (stride 64).
        """
        maps = self.pyramid(self.tokens(x))
        names = [str(level) for level in range(len(maps) - 1)] + [POOL_NAME]
        return OrderedDict(zip(names, maps, strict=True))


def build_vitdet_mask_rcnn(
    encoder: ViTEncoder,
    num_classes: int,
    *,
    out_channels: int = 256,
    image_size: int = 1024,
    conv_dim: int | None = None,
    fc_dim: int = 1024,
    num_box_convs: int = 4,
    num_mask_convs: int = 4,
    anchor_sizes: Sequence[int] = (32, 64, 128, 256, 512),
    window_size: int | None = 14,
    global_blocks: Sequence[int] | None = None,
    drop_path_rate: float | None = 0.1,
    pretrain_grid: Sequence[int] | None = None,
    image_mean: Sequence[float] = IMAGENET_MEAN,
    image_std: Sequence[float] = IMAGENET_STD,
    **mask_rcnn_kwargs: object,
) -> nn.Module:
    """torchvision's ``MaskRCNN`` on a :class:`ViTDetBackbone`, with ViTDet's heads.

    RPN head with two 3x3 convolutions; box head of ``num_box_convs`` 3x3 convolutions and one
    fully connected layer (``FastRCNNConvFCHead``), mask head of ``num_mask_convs`` convolutions
    (``MaskRCNNHeads``), both with LayerNorm as ViTDet's; anchors of ``anchor_sizes`` (one per
    level) with aspect ratios 0.5, 1, 2. Images are resized so that their longer side is
    ``image_size`` (``min_size = max_size = image_size``; ViTDet pads them to a square of that
    side) and padded to a multiple of twice the patch size.

    Args:
        encoder: A 2D :class:`ViTEncoder` (e.g. ``partnd.load_encoder(run_dir)``); copied.
        num_classes: Object classes including the background (COCO: 80 + 1).
        out_channels: Pyramid width (256).
        image_size: Input side (1024 in the paper; small values for CPU demos).
        conv_dim: Width of the box- and mask-head convolutions (default ``out_channels``).
        fc_dim: Width of the box head's fully connected layer (1024).
        num_box_convs: Convolutions of the box head (4).
        num_mask_convs: Convolutions of the mask head (4).
        anchor_sizes: Anchor side per pyramid level (5 levels).
        window_size: See :class:`ViTDetBackbone`.
        global_blocks: See :class:`ViTDetBackbone`.
        drop_path_rate: See :class:`ViTDetBackbone`.
        pretrain_grid: See :class:`ViTDetBackbone`.
        image_mean: Per-channel mean the model subtracts (the pretraining normalisation).
        image_std: Per-channel standard deviation it divides by.
        **mask_rcnn_kwargs: Other ``MaskRCNN`` keywords (``box_detections_per_img``,
            ``box_score_thresh``, ``box_batch_size_per_image``...).

    Returns:
        The ``MaskRCNN`` module: ``model(images, targets)`` returns the loss dict in training
        mode, ``model(images)`` a list of ``{"boxes", "labels", "scores", "masks"}`` in eval mode.
    """
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNConvFCHead, FastRCNNPredictor
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.models.detection.rpn import RPNHead

    check(
        isinstance(num_classes, int) and num_classes >= 2,
        "num_classes",
        "an int >= 2 (object classes plus the background)",
        repr(num_classes),
    )
    backbone = ViTDetBackbone(
        encoder,
        out_channels=out_channels,
        image_size=image_size,
        pretrain_grid=pretrain_grid,
        window_size=window_size,
        global_blocks=global_blocks,
        drop_path_rate=drop_path_rate,
    )
    levels = len(backbone.strides)
    check(
        len(anchor_sizes) == levels,
        "anchor_sizes",
        f"{levels} sizes (one per pyramid level)",
        repr(tuple(anchor_sizes)),
    )
    width = conv_dim if conv_dim is not None else out_channels
    anchors = AnchorGenerator(
        sizes=tuple((int(size),) for size in anchor_sizes),
        aspect_ratios=((0.5, 1.0, 2.0),) * levels,
    )
    rpn_head = RPNHead(out_channels, anchors.num_anchors_per_location()[0], conv_depth=2)
    box_head = FastRCNNConvFCHead(
        (out_channels, 7, 7), [width] * num_box_convs, [fc_dim], norm_layer=_layer_norm_2d
    )
    mask_head = MaskRCNNHeads(out_channels, [width] * num_mask_convs, 1, norm_layer=_layer_norm_2d)
    kwargs: dict[str, object] = {"size_divisible": 2 * backbone.patch_size, **mask_rcnn_kwargs}
    return MaskRCNN(
        backbone,
        num_classes=None,
        min_size=image_size,
        max_size=image_size,
        image_mean=list(image_mean),
        image_std=list(image_std),
        rpn_anchor_generator=anchors,
        rpn_head=rpn_head,
        box_head=box_head,
        box_predictor=FastRCNNPredictor(fc_dim, num_classes),
        mask_head=mask_head,
        mask_predictor=MaskRCNNPredictor(width, width, num_classes),
        **kwargs,
    )
