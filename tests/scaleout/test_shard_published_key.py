"""S-13: a shard the published manifest names is rewritten with identical bytes only (a retry);
different content under a published name is refused, so committed data never changes under
its readers."""

from __future__ import annotations

import pytest
from shardkit import CLASSES, make_samples

import detfmt
from detfmt.errors import TargetExistsError
from detfmt.shard.write import commit, write_shard


def test_published_shard_is_never_rewritten_with_other_content(tmp_path):
    root = tmp_path / "root"
    first, second = make_samples(1, 4), make_samples(2, 3)
    metas = [write_shard(first, root, "a", classes=CLASSES),
             write_shard(second, root, "b", classes=CLASSES)]
    commit(root, metas)
    before = (root / metas[0].path).read_bytes()

    retry = write_shard(first, root, "a", classes=CLASSES)  # same samples: same bytes, allowed
    assert retry == metas[0]
    with pytest.raises(TargetExistsError) as caught:
        write_shard(make_samples(3, 4), root, "a", classes=CLASSES)
    assert caught.value.rule == "SHARD_PUBLISHED" and "new keys" in str(caught.value)
    assert (root / metas[0].path).read_bytes() == before  # the published file is untouched
    assert not list((root / "shards").glob(".tmp-*"))  # and no temporary is left behind
    detfmt.verify(root)

    fresh = write_shard(make_samples(3, 4), root, "c", classes=CLASSES)  # a new key is fine
    commit(root, [*metas, fresh])
    assert len(detfmt.open(root)) == 11


def test_unpublished_key_may_be_rewritten(tmp_path):
    """Before any commit (e.g. a failed attempt's leftover), a key may hold anything."""
    root = tmp_path / "root"
    write_shard(make_samples(1, 2), root, "a", classes=CLASSES)
    meta = write_shard(make_samples(2, 5), root, "a", classes=CLASSES)
    commit(root, [meta])
    assert len(detfmt.open(root)) == 5
