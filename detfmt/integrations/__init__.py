"""Training-framework integrations: detfmt batches in the formats other trainers expect.

Each submodule imports its framework only when used, so ``import detfmt.integrations`` costs
nothing and needs none of them:

- `detfmt.integrations.torchvision`: `to_torchvision` (images + target dicts, the real extent).
- `detfmt.integrations.transformers`: `to_hf_detection`, `HFDetectionCollator` (DETR, RT-DETR,
  Deformable DETR targets).
- `detfmt.integrations.lightning`: `DetfmtDataModule` (a ``LightningDataModule``).
- `detfmt.integrations.ultralytics`: `DetfmtTrainer`, `DetfmtValidator` (YOLO training and
  validation from detfmt datasets).
- `detfmt.integrations.pipeline`: `AugmentedBatches`, the loader + augmentation + converter
  iterator they share (augmentation and conversion in the loader's threads, overlapping the
  training step).

See docs/integrations.md.
"""
