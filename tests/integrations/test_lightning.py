"""Lightning: the DataModule's recipe trains and the loss falls; its state resumes the order."""

from __future__ import annotations

import time

import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("torchvision")

from detfmt.integrations.lightning import DetfmtDataModule
from detfmt.integrations.torchvision import to_torchvision
from detfmt.torch import Loader

from ._recipes import falling, run_recipe


def test_recipe_trains_and_the_loss_falls(chess_train):
    torch.manual_seed(0)
    losses = run_recipe("lightning", train_path=chess_train, STEPS=3)["losses"]
    assert len(losses) == 6
    assert falling(losses), losses


def test_targets_are_the_loader_batches(chess_train):
    """Without augmentation the module's batches are the Loader's, converted exactly."""
    data = DetfmtDataModule(chess_train, batch_size=3, seed=9, convert=to_torchvision)
    reference = Loader(chess_train, batch_size=3, seed=9)
    for (images, targets), batch in zip(data.train_dataloader(), reference, strict=True):
        for i, target in enumerate(targets):
            keep = batch.mask[i]
            assert torch.equal(target["boxes"], batch.boxes[i][keep])
            h, w = batch.sizes[i].tolist()
            assert images[i].shape == (3, h, w)


def test_state_dict_resumes_the_order(chess_train):
    """The state counts batches the model received, not those prefetched behind them."""
    data = DetfmtDataModule(chess_train, batch_size=2, seed=3, prefetch=2)
    batches = iter(data.train_dataloader())
    next(batches)
    time.sleep(1.0)  # the producer fills its queue meanwhile (loader 3 batches ahead)
    state = data.state_dict()
    rest = [b.indices.tolist() for b in batches]
    resumed = DetfmtDataModule(chess_train, batch_size=2, seed=3)
    resumed.load_state_dict(state)
    assert [b.indices.tolist() for b in resumed.train_dataloader()] == rest
