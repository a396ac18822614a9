"""Weighted mixtures and repeat-factor sampling through the Loader (SPEC O-9 .. O-13): batches
equal the mixture's gather, proportions hold over an epoch, resume works on another world size,
class names must agree (or be mapped), and repeat factors on a real dataset (coco128)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.errors import ClassNamesMismatchError, UsageError
from detfmt.order import SubsetOrder, repeat_factors
from detfmt.reading.mixture import Mixture
from detfmt.torch import Delivery, Loader, Sampling
from tests.datasets import make_dataset, make_sharded_root, sample_labels, varied_shapes

SHARED = Path(os.environ.get("DETFMT_SHARED_DATA",
                             Path(__file__).resolve().parents[2].parent / "shared" / "data"))


@pytest.fixture
def sources(tmp_path):
    """A 1.0 directory of 30 samples and a sharded root of 11 (the same class names)."""
    a = make_dataset(tmp_path / "a", varied_shapes(30, seed=1))
    b = make_sharded_root(tmp_path / "b", varied_shapes(11, seed=2))
    return a, b


def write_named(path, n, classes, seed=0):
    samples = []
    for i, (h, w) in enumerate(varied_shapes(n, seed)):
        boxes, ids = sample_labels(i, h, w, 3)
        samples.append({"image": np.full((h, w, 3), i, np.uint8), "boxes": boxes,
                        "classes": ids % len(classes)})
    detfmt.write(samples, path, classes=classes)
    return detfmt.open(path)


def test_mixture_batches_are_the_sources_samples(sources):
    a, b = sources
    loader = Loader(
        [a, b],
        5,
        seed=3,
        delivery=Delivery(num_threads=2),
        weights=[0.5, 0.5],
        epoch_length=40,
    )
    mix = loader.ds
    assert isinstance(mix, Mixture) and len(mix) == 41 and loader.order == "mixture"
    batches = list(loader)
    indices = np.concatenate([bt.indices.numpy() for bt in batches])
    assert indices.tolist() == loader.epoch_order().tolist()
    source, local = mix.locate(indices)
    assert np.bincount(source, minlength=2).tolist() == [20, 20]
    for batch in batches:
        want = mix.batch(batch.indices.numpy())
        np.testing.assert_array_equal(batch.images.permute(0, 2, 3, 1).numpy(), want.images)
        np.testing.assert_array_equal(batch.classes.numpy(), want.classes)
        for j, i in enumerate(batch.indices.tolist()):  # the right source's sample, each field
            k, li = (0, i) if i < 30 else (1, i - 30)
            sample = (a, b)[k][li]
            h, w = sample.image.shape[:2]
            np.testing.assert_array_equal(batch.images[j].permute(1, 2, 0)[:h, :w].numpy(),
                                          sample.image)
            n = len(sample.boxes)
            np.testing.assert_array_equal(batch.boxes[j, :n].numpy(), sample.boxes)
    assert set(local[source == 1].tolist()) == set(range(11))  # 20 of 11: whole passes


def test_ring_data_loader_reads_a_mixture_like_the_loader(tmp_path, sources):
    """A Mixture reaches DataLoader worker processes (pickled as its sources and options,
    re-opened there, class names mapped by name) and gives the Loader's batches."""
    import pickle

    from detfmt.torch import RingDataLoader

    a, _ = sources
    c = write_named(tmp_path / "c", 9, ["zebra", *a.class_names], seed=5)
    mix = Mixture([a, c], weights=[0.6, 0.4], epoch_length=24,
                  class_names=[*a.class_names, "zebra"])
    again = pickle.loads(pickle.dumps(mix))
    assert again.class_names == mix.class_names and len(again) == len(mix)
    np.testing.assert_array_equal(again.batch([0, 31, 35]).classes, mix.batch([0, 31, 35]).classes)
    again.close()
    want = list(Loader(mix, 4, seed=7, delivery=Delivery(num_threads=1)))
    ring = RingDataLoader(mix, 4, num_workers=2, seed=7)
    got = list(ring)
    assert len(got) == len(want) == 6
    for g, w in zip(got, want, strict=True):
        assert g.indices.tolist() == w.indices.tolist()
        np.testing.assert_array_equal(g.images.numpy(), w.images.numpy())
        np.testing.assert_array_equal(g.classes.numpy(), w.classes.numpy())
        np.testing.assert_array_equal(g.boxes.numpy(), w.boxes.numpy())
    mapped = np.concatenate([g.classes[g.mask].numpy() for g in got])
    assert (mapped >= 0).all() and (mapped < len(mix.class_names)).all()


def test_mixture_proportions_over_an_epoch(tmp_path):
    parts = [make_dataset(tmp_path / f"d{k}", [(8, 8)] * n) for k, n in enumerate((50, 20, 7))]
    weights = [0.6, 0.3, 0.1]
    loader = Loader(
        parts,
        10,
        seed=1,
        delivery=Delivery(num_threads=2),
        weights=weights,
        epoch_length=600,
    )
    source, _ = loader.ds.locate(np.concatenate([b.indices.numpy() for b in loader]))
    share = np.bincount(source, minlength=3) / len(source)
    np.testing.assert_allclose(share, weights, atol=1 / 600)
    halves = np.split(source, 2)  # and within any half of the epoch, within a few percent
    for half in halves:
        assert np.abs(np.bincount(half, minlength=3) / len(half) - weights).max() < 0.05


@pytest.mark.parametrize("sampling", ["mixture", "repeat_factor"])
def test_resume_on_another_world_size(sources, sampling):
    """Stop a 1-rank epoch after 3 batches, resume on 2 ranks with another batch size: every
    remaining position exactly once (S-19, S-20 on the epoch's own length)."""
    a, b = sources
    options = ({"weights": [0.7, 0.3], "epoch_length": 50} if sampling == "mixture"
               else {"sampling": Sampling(repeat_threshold=2.0)})
    data = [a, b] if sampling == "mixture" else a
    one = Loader(data, 4, seed=6, delivery=Delivery(num_threads=2), **options)
    one.set_epoch(1)
    order = one.epoch_order().tolist()
    it = iter(one)
    first = [i for _ in range(3) for i in next(it).indices.tolist()]
    state = one.state_dict()
    it.close()
    ranks = []
    for r in range(2):
        loader = Loader(data, 3, rank=r, world_size=2, drop_last=False,
                        delivery=Delivery(num_threads=1), **options)
        loader.load_state_dict(state)
        ranks.append([bt.indices.tolist() for bt in loader])
    rest = [i for t in range(len(ranks[0])) for r in range(2) for i in ranks[r][t]]
    assert first + rest[: len(order) - 12] == order
    assert len(ranks[0]) == len(ranks[1])
    if sampling == "repeat_factor":
        assert len(order) > len(a)  # rare classes repeated: the epoch is longer than N
    other = dict(options, **({"weights": [0.5, 0.5]} if sampling == "mixture"
                             else {"repeat_threshold": 1.0}))
    with pytest.raises(UsageError):
        Loader(data, 4, **other).load_state_dict(state)


def test_class_names_must_agree_or_be_mapped(tmp_path):
    animals = write_named(tmp_path / "x", 6, ["cat", "dog"])
    reversed_ = write_named(tmp_path / "y", 6, ["dog", "cat"], seed=1)
    renamed = write_named(tmp_path / "z", 6, ["kitty", "dog", "bird"], seed=2)
    with pytest.raises(ClassNamesMismatchError) as caught:
        Loader([animals, reversed_], 4)
    assert caught.value.source == 1 and caught.value.expected == ["cat", "dog"]
    with pytest.raises(ClassNamesMismatchError):  # "bird" has no place in the mixture
        Mixture([animals, renamed], class_names=["cat", "dog"], class_map={"kitty": "cat"})
    mix = Mixture([animals, reversed_, renamed], class_names=["cat", "dog", "bird"],
                  class_map=[None, None, {"kitty": "cat"}])
    assert mix.class_names == ["cat", "dog", "bird"]
    names = {0: animals.class_names, 1: reversed_.class_names, 2: renamed.class_names}
    loader = Loader(mix, 6, shuffle=True, seed=2, delivery=Delivery(num_threads=1))
    seen = 0
    for batch in loader:
        source, local = mix.locate(batch.indices.numpy())
        for j, (k, li) in enumerate(zip(source.tolist(), local.tolist(), strict=True)):
            stored = (animals, reversed_, renamed)[k][li].classes
            want = [mix.class_names.index({"kitty": "cat"}.get(names[k][c], names[k][c]))
                    for c in stored.tolist()]
            got = batch.classes[j][batch.mask[j]].tolist()
            assert got == want
            seen += len(want)
            assert mix[int(batch.indices[j])].classes.tolist() == want
    assert seen > 0


def test_mixture_checks_its_arguments(sources, tmp_path):
    a, b = sources
    for kwargs in ({"weights": [1.0]}, {"weights": [-1, 1]}, {"weights": [0, 0]},
                   {"weights": [1, math.nan]}, {"epoch_length": -3}):
        with pytest.raises(UsageError):
            Mixture([a, b], **kwargs)
    with pytest.raises(UsageError):
        Loader(a, 4, weights=[1.0])  # weights mix several datasets
    with pytest.raises(UsageError):
        Loader([a, b], 4, shuffle=False)  # a mixture is sampled by weight
    with pytest.raises(UsageError):
        Loader(a, 4, sampling=Sampling(order="quasi_random", repeat_threshold=0.1))
    with pytest.raises(UsageError):
        Mixture("not-a-list")
    fields = tmp_path / "f"
    detfmt.write([{"image": np.zeros((4, 4, 3), np.uint8), "boxes": np.zeros((0, 4)),
                   "classes": np.zeros(0, np.int32), "iscrowd": np.zeros(0, np.uint8)}],
                 fields, classes=["a", "b", "c"], box_fields={"iscrowd": "|u1"})
    with pytest.raises(UsageError, match="per-box fields"):
        Mixture([a, detfmt.open(fields)])


def test_subset_order_reads_each_rank_share_once(sources):
    a, _ = sources
    seen = []
    for rank in range(3):
        share = SubsetOrder.share(len(a), rank, 3)
        loader = Loader(
            a,
            4,
            rank=0,
            world_size=1,
            drop_last=False,
            sampling=Sampling(order=share),
        )
        seen += [i for bt in loader for i in bt.indices.tolist()]
    assert seen == list(range(len(a)))


def test_repeat_factors_match_labels(sources):
    a, _ = sources
    loader = Loader(
        a,
        4,
        seed=2,
        sampling=Sampling(repeat_threshold=0.5),
        delivery=Delivery(num_threads=1),
    )
    images = [i for i in range(len(a)) for _ in a[i].classes]
    classes = [c for i in range(len(a)) for c in a[i].classes.tolist()]
    np.testing.assert_array_equal(loader.schedule.spec.factors,
                                  repeat_factors(np.array(images), np.array(classes), len(a), 0.5))


@pytest.fixture(scope="module")
def coco128(tmp_path_factory):
    root = SHARED / "coco128-yolo"
    if not root.is_dir():
        pytest.skip(f"{root} not available")
    from detfmt.convert import from_yolo

    out = tmp_path_factory.mktemp("coco128") / "ds"
    from_yolo(root / "images", root / "object_detection" / "labels", out,
              names=root / "object_detection" / "config.yaml", max_side=32, workers=2)
    return detfmt.open(out)


def test_repeat_factor_sampling_on_coco128(coco128):
    """LVIS factors from coco128's labels: images of rare classes are visited about
    max(1, sqrt(t / f)) times per epoch, frequent-only images once."""
    ds = coco128
    t = 0.03  # classes in fewer than 3% of the images (4 of 128) are repeated
    presence = [set(ds[i].classes.tolist()) for i in range(len(ds))]
    having = {c: sum(c in s for s in presence) for s in presence for c in s}
    per_class = {c: max(1.0, math.sqrt(t / (k / len(ds)))) for c, k in having.items()}
    want = np.array([max((per_class[c] for c in s), default=1.0) for s in presence])
    loader = Loader(
        ds,
        16,
        seed=0,
        sampling=Sampling(repeat_threshold=t),
        delivery=Delivery(num_threads=2),
    )
    np.testing.assert_array_equal(loader.schedule.spec.factors, want)
    assert (want > 1).sum() > 20 and (want == 1).sum() > 20  # both kinds exist in coco128
    visits = np.zeros(len(ds))
    epochs = 40
    lengths = []
    for epoch in range(epochs):
        order = loader.schedule.epoch_order(epoch)
        lengths.append(len(order))
        visits += np.bincount(order, minlength=len(ds))
    np.testing.assert_allclose(visits / epochs, want, atol=0.25)  # stochastic rounding
    assert min(lengths) > len(ds) and len(set(lengths)) > 1
    batch = next(iter(loader))  # and the batches are real, checked samples
    assert batch.images.shape[0] == 16 and int(batch.mask.sum()) > 0
