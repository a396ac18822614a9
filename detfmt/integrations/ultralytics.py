"""Ultralytics YOLO from detfmt datasets: Ultralytics' own trainer and validator, detfmt data.

    from ultralytics import YOLO
    from detfmt.integrations.ultralytics import DetfmtTrainer

    YOLO("yolov8n.yaml").train(data="chess", trainer=DetfmtTrainer, epochs=10, imgsz=640)

``data`` is a split root holding detfmt datasets ``train/`` and ``val/`` (``test/`` optional), a
single detfmt dataset (used for both), a dict, or an Ultralytics data YAML whose ``train``/``val``
point at detfmt datasets (``names`` may be left out: they come from the dataset). Everything
else is Ultralytics': its trainer loop, loss, optimizer, EMA, ``close_mosaic``, validator,
metrics, plots, checkpoints and DDP. Only the data path differs: `detfmt.torch.Loader` gathers
the batches (threads, the spec-defined order, each rank its share of every global batch) and
`detfmt.augment.presets.yolo_train` reproduces Ultralytics' default augmentation from the run's
hyperparameters (mosaic, mixup, degrees, translate, scale, shear, perspective, flipud, fliplr,
hsv_h/s/v), in the loader's own threads so it overlaps the training step. The batches are
Ultralytics' collated dicts (``img`` uint8, ``cls``, ``bboxes`` normalised xywh, ``batch_idx``,
``im_file``, ``ori_shape``, ``resized_shape``, ``ratio_pad``).

Tested with the Ultralytics versions of the ``ultralytics`` extra (see pyproject.toml).
"""

from __future__ import annotations

import math
import os
from copy import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

try:
    from ultralytics.models.yolo.detect import DetectionTrainer, DetectionValidator
    from ultralytics.utils import LOGGER, YAML
    from ultralytics.utils.torch_utils import unwrap_model
except ImportError as error:  # pragma: no cover - exercised only without ultralytics
    raise ImportError(
        "detfmt.integrations.ultralytics needs Ultralytics: pip install 'detfmt[ultralytics]'"
    ) from error

from detfmt.augment.compose import to_memory_format
from detfmt.augment.presets import YoloValLetterbox, yolo_rect_batches, yolo_train, yolo_val
from detfmt.augment.targets import to_ultralytics
from detfmt.errors import UsageError
from detfmt.integrations._objects import crowd_flags
from detfmt.integrations.pipeline import AugmentedBatches
from detfmt.order import SubsetOrder
from detfmt.reading.opener import open_dataset
from detfmt.torch.batch import Batch
from detfmt.torch.loader import Loader
from detfmt.torch.settings import Delivery, Sampling

SPLITS = ("train", "val", "test")
DATA_YAML = "detfmt_data.yaml"


def _is_detfmt(path: Path) -> bool:
    """Whether ``path`` opens as a detfmt dataset (1.0 directory or sharded root)."""
    if not path.is_dir():
        return False
    try:
        ds = open_dataset(path)
    except Exception:  # any reason it does not open: not a detfmt dataset for our purpose
        return False
    close = getattr(ds, "close", None)
    if close is not None:
        close()
    return True


def _class_names(path: str | os.PathLike[str]) -> list[str]:
    ds = open_dataset(path)
    try:
        return list(ds.class_names)
    finally:
        close = getattr(ds, "close", None)
        if close is not None:
            close()


def resolve_data(data: Any) -> dict[str, Any]:
    """Ultralytics' data dict (``path``, ``train``, ``val``, ``names``, ``nc``, ``channels``).

    Accepts a split root (``train/``, ``val/``, optional ``test/``), one detfmt dataset (train
    and val), a dict, or a YAML file with ``train``/``val`` (relative to ``path`` or the
    file's folder). Raises `UsageError` naming what is missing.
    """
    source = data
    if isinstance(data, (str, os.PathLike)):
        path = Path(data).expanduser()
        if path.suffix in (".yaml", ".yml") and path.is_file():
            loaded = YAML.load(path)
            root = Path(loaded.get("path") or path.parent)
            if not root.is_absolute():
                root = (path.parent / root).resolve()
            data = {**loaded, "path": root}
        elif _is_detfmt(path):
            # absolute: the splits are joined to ``path`` below only when relative (a YAML's)
            whole = path.resolve()
            data = {"path": whole.parent, "train": whole, "val": whole}
            LOGGER.warning(f"detfmt: {path} is one dataset, it is used for training and validation")
        elif path.is_dir():
            found = {s: (path / s).resolve() for s in SPLITS if _is_detfmt(path / s)}
            if "train" not in found or "val" not in found:
                raise UsageError(
                    f"{path} holds no detfmt datasets train/ and val/ (found {sorted(found)}); "
                    "pass a split root, a dataset, or a YAML with train: and val:"
                )
            data = {"path": path.resolve(), **found}
        else:
            raise UsageError(f"data {os.fspath(path)!r} is not a directory or a YAML file")
    if not isinstance(data, dict):
        raise UsageError(f"data must be a path or a dict, got {type(source).__name__}")
    root = Path(data.get("path") or ".")
    out: dict[str, Any] = {"path": str(root)}
    for split in SPLITS:
        value = data.get(split)
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            raise UsageError(f"{split}: one detfmt dataset per split, got a list ({value!r})")
        split_path = Path(value)
        split_path = split_path if split_path.is_absolute() else root / split_path
        if not _is_detfmt(split_path):
            raise UsageError(f"{split}: {os.fspath(split_path)!r} is not a detfmt dataset")
        out[split] = str(split_path.resolve())
    for split in ("train", "val"):
        if split not in out:
            raise UsageError(f"data has no {split!r} split: {source!r}")
    names = data.get("names")
    if names is None:
        names = _class_names(out["train"])
    if isinstance(names, dict):
        names = [names[k] for k in sorted(names)]
    out["names"] = {i: str(n) for i, n in enumerate(names)}
    out["nc"] = len(out["names"])
    out["channels"] = 3
    return out


def write_data_yaml(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Save a resolved data dict as an Ultralytics data YAML (absolute paths)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    YAML.save(
        target,
        {
            "path": str(data["path"]),
            **{s: str(data[s]) for s in SPLITS if data.get(s)},
            "names": dict(data["names"]),
        },
    )
    return target


class DetfmtYoloDataset(torch.utils.data.Dataset):
    """What Ultralytics' trainer reads from ``loader.dataset``: labels, files, the mosaic switch.

    Labels are read once from the dataset's box arrays (for ``plot_labels``, class weights and
    ``max_det``); samples are never fetched through ``__getitem__`` (the loader gathers whole
    batches), which raises.
    """

    def __init__(self, path: str | os.PathLike[str], *, augment: bool, hyp: Any) -> None:
        self.path = os.fspath(path)
        self.ds = open_dataset(self.path)
        self.augment = augment
        self.hyp = hyp
        self.mosaic = bool(augment and getattr(hyp, "mosaic", 0.0) > 0)
        # Ultralytics' single_cls: every label is class 0 (its datasets' update_labels)
        self.single_cls = bool(getattr(hyp, "single_cls", False))
        self.im_files = [self._file_name(i) for i in range(len(self.ds))]
        self.labels = self._labels()

    def _file_name(self, index: int) -> str:
        if "file_name" in self.ds.schema.image_fields:
            return os.path.join(self.path, self.ds.string_field("file_name", index))
        return os.path.join(self.path, f"{index:08d}")

    def _labels(self) -> list[dict[str, Any]]:
        """Ultralytics' label dicts, from the reader's checked labels (any kind of dataset)."""
        sizes = np.asarray(self.ds.sizes, dtype=np.float32)
        labels = []
        n = len(self.ds)
        for start in range(0, n, 4096):
            block = self.ds.labels(np.arange(start, min(n, start + 4096)))
            classes = np.zeros_like(block.classes) if self.single_cls else block.classes
            for row, i in enumerate(block.indices.tolist()):
                keep = block.mask[row]
                h, w = sizes[i]
                xyxy = block.boxes[row][keep].astype(np.float32)
                xywh = np.stack(
                    [
                        (xyxy[:, 0] + xyxy[:, 2]) / 2 / w,
                        (xyxy[:, 1] + xyxy[:, 3]) / 2 / h,
                        (xyxy[:, 2] - xyxy[:, 0]) / w,
                        (xyxy[:, 3] - xyxy[:, 1]) / h,
                    ],
                    axis=1,
                ).reshape(-1, 4)
                labels.append(
                    {
                        "im_file": self.im_files[i],
                        "shape": (int(h), int(w)),
                        "cls": classes[row][keep].astype(np.float32).reshape(-1, 1),
                        "bboxes": xywh,
                        "normalized": True,
                        "bbox_format": "xywh",
                    }
                )
        return labels

    def close_mosaic(self, hyp: Any) -> None:
        """Ultralytics' ``close_mosaic``: the loader's next pass builds the pipeline without it."""
        self.mosaic = False
        self.hyp = hyp

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, index: int) -> Any:
        raise UsageError("DetfmtYoloDataset is read in whole batches by DetfmtYoloLoader")


class _RankSampler:
    """What the trainer reads from ``loader.sampler``: its length and ``set_epoch``."""

    def __init__(self, loader: DetfmtYoloLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return self.loader.samples_per_rank

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


def _rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _validation_order(order: np.ndarray, batch_size: int) -> SubsetOrder:
    """Validation: this rank's share of ``order`` (all samples, each once), whole batches.

    Ultralytics validates on every rank and gathers the statistics on rank 0, so the shares
    must neither overlap nor repeat samples (a padded order would count some twice). The shares
    are its ``ContiguousDistributedSampler``'s: contiguous runs of whole batches, the first
    ranks one more where they do not divide, so each rect batch stays on one rank.
    """
    rank, world = _rank_and_world()
    n = len(order)
    unit = 1 if batch_size >= n else batch_size
    batches = math.ceil(n / unit) if n else 0
    base, extra = divmod(batches, world)
    first = rank * base + min(rank, extra)
    last = first + base + (1 if rank < extra else 0)
    return SubsetOrder(n, order[min(first * unit, n):min(last * unit, n)])


class DetfmtYoloLoader:
    """Ultralytics-format batches from a detfmt dataset (what ``get_dataloader`` returns).

    One `detfmt.torch.Loader` gathers, augments and converts each batch in its own threads
    (``threads`` of them, each with a pool of ``threads`` OpenCV-backend threads for the
    pixels, whatever Ultralytics set with ``torch.set_num_threads``, and one torch thread: the
    preset's torch ops are bookkeeping, where idle OpenMP threads only spin), in epoch order,
    overlapping the training step. Training:
    shuffled, each rank its share of every global batch (rank and world size from
    ``torch.distributed`` under Ultralytics' DDP), the `yolo_train` preset built from the run's
    hyperparameters (rebuilt by ``reset()`` after ``close_mosaic``), its parameters re-seeded
    per batch from (seed, epoch, position). Validation: each rank's contiguous share of whole
    batches, every sample once, through `yolo_val`: with ``rect`` (Ultralytics' default for
    validation) in its rect batches (`yolo_rect_batches`: sorted by aspect ratio, each batch
    on its own ``stride``-aligned canvas), else in dataset order on the ``imgsz`` square.
    ``rank``/``world_size`` override torch.distributed's for training (several ranks simulated
    in one machine).
    """

    def __init__(
        self,
        dataset: DetfmtYoloDataset,
        batch_size: int,
        *,
        imgsz: int,
        augment: bool,
        seed: int = 0,
        threads: int = 2,
        prefetch: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        rect: bool = False,
        stride: int = 32,
    ) -> None:
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.imgsz = int(imgsz)
        self.augment = augment
        self.rect = bool(rect) and not augment
        self.canvases: np.ndarray | None = None
        order = np.arange(len(dataset), dtype=np.int64)
        if self.rect:
            order, self.canvases = yolo_rect_batches(
                np.asarray(dataset.ds.sizes), self.batch_size, self.imgsz, stride=int(stride)
            )
        self.seed = int(seed)
        self.num_workers = int(threads)
        workers = max(1, self.num_workers)
        delivery = Delivery(num_threads=workers, prefetch=prefetch, transform_threads=workers,
                            torch_threads=1)
        if augment:
            self.loader = Loader(
                dataset.ds,
                self.batch_size,
                shuffle=True,
                seed=self.seed,
                rank=rank,
                world_size=world_size,
                delivery=delivery,
            )
        else:
            self.loader = Loader(
                dataset.ds,
                self.batch_size,
                rank=0,
                world_size=1,
                drop_last=False,
                sampling=Sampling(order=_validation_order(order, self.batch_size)),
                delivery=delivery,
            )
        self.drop_last = bool(self.loader.drop_last)
        self.sampler = _RankSampler(self)
        self.batches = AugmentedBatches(self.loader, None, self.to_batch_dict)
        self.reset()

    @property
    def samples_per_rank(self) -> int:
        if not self.augment:
            return self.loader.schedule.epoch_length()
        if self.loader.world_size == 1 and not self.drop_last:
            return len(self.dataset)  # the last batch may be short, as Ultralytics' own
        return len(self.loader) * self.batch_size

    def reset(self) -> None:
        """(Re)build the augmentation from the dataset's current state (after close_mosaic);
        the loader's next pass runs it."""
        if self.augment:
            hyp = self.dataset.hyp
            transform = yolo_train(
                self.imgsz,
                mosaic=float(hyp.mosaic) if self.dataset.mosaic else 0.0,
                mixup=float(getattr(hyp, "mixup", 0.0)),
                degrees=float(hyp.degrees),
                translate=float(hyp.translate),
                scale=float(hyp.scale),
                shear=float(hyp.shear),
                perspective=float(hyp.perspective),
                flipud=float(hyp.flipud),
                fliplr=float(hyp.fliplr),
                hsv_h=float(hyp.hsv_h),
                hsv_s=float(hyp.hsv_s),
                hsv_v=float(hyp.hsv_v),
                buffer_size=min(len(self.dataset), 8 * self.batch_size),
                generator=torch.Generator(),  # one generator, re-seeded by the loader per batch
                # Ultralytics' collate gives contiguous NCHW: written so by the warp, `_nchw`
                # then has nothing to copy.
                memory_format=torch.contiguous_format,
            )
        else:
            transform = yolo_val(self.imgsz, canvases=self.canvases)
        self.batches.transform = transform
        self.placement = YoloValLetterbox(self.imgsz)  # ratio_pad of the batches

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        return iter(self.batches)

    def state_dict(self) -> dict[str, Any]:
        return self.batches.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches.load_state_dict(state)

    def close(self) -> None:
        """Nothing to stop between passes (the trainer calls this before rebuilding)."""

    def to_batch_dict(self, batch: Batch) -> dict[str, Any]:
        """Ultralytics' collated batch from an augmented `Batch`. Crowd boxes (a per-box
        ``iscrowd`` field, as COCO conversions carry) are left out of the targets, as
        Ultralytics' own COCO conversion leaves them out of its label files."""
        targets = to_ultralytics(_without_crowd(batch))
        indices = batch.indices.tolist() if batch.indices is not None else [None] * len(batch)
        stored = np.asarray(self.dataset.ds.sizes)
        height, width = (int(v) for v in batch.images.shape[-2:])
        ori = [tuple(int(v) for v in stored[i]) if i is not None else (height, width)
               for i in indices]
        # Where the validation geometry put each image (Ultralytics' load_image resize, then its
        # LetterBox on the batch's canvas): ((h1 / h0, w1 / w0), (left, top)), as its datasets.
        place = self.placement.place(torch.tensor(ori, dtype=torch.int64).reshape(-1, 2),
                                     (height, width))
        ratio_pad = [
            ((h1 / h0, w1 / w0), (int(left), int(top)))
            for (h0, w0), h1, w1, left, top in zip(
                ori, place.height.tolist(), place.width.tolist(), place.left.tolist(),
                place.top.tolist(), strict=True)
        ]
        cls = targets["cls"]
        if self.dataset.single_cls:
            cls = torch.zeros_like(cls)
        return {
            "img": _nchw(batch.images),
            "cls": cls,
            "bboxes": targets["bboxes"],
            "batch_idx": targets["batch_idx"],
            "im_file": tuple(self.dataset.im_files[i] if i is not None else "" for i in indices),
            "ori_shape": tuple(ori),
            "resized_shape": tuple((height, width) for _ in indices),
            "ratio_pad": tuple(ratio_pad),
        }


def _without_crowd(batch: Batch) -> Batch:
    """``batch`` with its crowd boxes (``iscrowd`` != 0) masked out of the valid boxes."""
    flags = crowd_flags(batch)
    if flags is None:
        return batch
    crowd = flags.to(device=batch.mask.device) != 0
    return batch.replace(mask=batch.mask & ~crowd)


def _nchw(images: torch.Tensor) -> torch.Tensor:
    """A contiguous (B, 3, H, W) batch, as Ultralytics' collate makes it (the training preset
    already writes one; a channels_last batch is de-interleaved by OpenCV on the CPU)."""
    return to_memory_format(images, torch.contiguous_format)


def _threads(workers: int) -> int:
    return max(1, min(int(workers) or 1, os.cpu_count() or 1))


def _dataloader(
    args: Any, path: str, batch_size: int, mode: str, stride: int, *, rect: bool = False
) -> DetfmtYoloLoader:
    augment = mode == "train"
    dataset = DetfmtYoloDataset(path, augment=augment, hyp=copy(args))
    imgsz = int(math.ceil(int(args.imgsz) / stride) * stride)
    return DetfmtYoloLoader(
        dataset,
        batch_size,
        imgsz=imgsz,
        augment=augment,
        seed=int(args.seed),
        threads=_threads(args.workers),
        rect=rect,
        stride=stride,
    )


class DetfmtTrainer(DetectionTrainer):
    """Ultralytics' ``DetectionTrainer`` reading detfmt datasets (``trainer=DetfmtTrainer``)."""

    def get_dataset(self) -> dict[str, Any]:
        data = resolve_data(self.args.data)
        # The validator re-reads args.data with Ultralytics' own YAML check (final_eval, val):
        # hand it a YAML that points at the detfmt splits.
        self.args.data = str(write_data_yaml(data, Path(self.save_dir) / DATA_YAML))
        if self.args.single_cls:
            data["names"], data["nc"] = {0: "item"}, 1
        return data

    def build_dataset(self, img_path: str, mode: str = "train", batch: int | None = None):
        return DetfmtYoloDataset(img_path, augment=mode == "train", hyp=copy(self.args))

    def get_dataloader(
        self, dataset_path: str, batch_size: int = 16, rank: int = 0, mode: str = "train"
    ) -> DetfmtYoloLoader:
        if mode not in ("train", "val"):
            raise UsageError(f"mode must be 'train' or 'val', not {mode!r}")
        model = unwrap_model(self.model)  # DDP wraps it
        stride = max(int(model.stride.max()) if hasattr(model, "stride") else 32, 32)
        # Ultralytics' trainer validates on rect batches (its build_dataset: rect=mode == "val")
        return _dataloader(self.args, dataset_path, batch_size, mode, stride, rect=mode == "val")

    def get_validator(self) -> DetfmtValidator:
        return DetfmtValidator(
            self.test_loader,
            save_dir=self.save_dir,
            args=copy(self.args),
            _callbacks=self.callbacks,
        )


class DetfmtValidator(DetectionValidator):
    """Ultralytics' ``DetectionValidator`` on detfmt datasets (``validator=DetfmtValidator``)."""

    def __call__(self, trainer: Any = None, model: Any = None) -> Any:
        if trainer is None and not str(self.args.data).endswith((".yaml", ".yml")):
            data = resolve_data(self.args.data)
            self.args.data = str(write_data_yaml(data, Path(self.save_dir) / DATA_YAML))
        return super().__call__(trainer=trainer, model=model)

    def build_dataset(self, img_path: str, mode: str = "val", batch: int | None = None):
        return DetfmtYoloDataset(img_path, augment=False, hyp=copy(self.args))

    def get_dataloader(self, dataset_path: str, batch_size: int) -> DetfmtYoloLoader:
        stride = max(
            int(self.stride.max()) if hasattr(self.stride, "max") else int(self.stride), 32
        )
        # rect as Ultralytics' own validator: model.val() sets rect=True unless told otherwise
        return _dataloader(self.args, dataset_path, batch_size, "val", stride,
                           rect=bool(self.args.rect))
