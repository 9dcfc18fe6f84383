"""The write cache half (dlog.bookie.write_cache) against a plain model:
entries kept in blocks of ids must behave as one map per ledger."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dlog.bookie.write_cache import BLOCK, ENTRY_OVERHEAD, WriteCache

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.integers(1, 3),
            # ids around block boundaries, far apart and repeated
            st.one_of(st.integers(0, 3 * BLOCK), st.sampled_from([BLOCK - 1, BLOCK, 10**12])),
            st.binary(min_size=0, max_size=40),
        ),
        st.tuples(st.just("delete"), st.integers(1, 3), st.just(0), st.just(b"")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(200, 4000))
def test_write_cache_matches_a_map_per_ledger(script, limit: int) -> None:
    cache = WriteCache(limit)
    model: dict[int, dict[int, bytes]] = {}
    for op, lid, eid, data in script:
        if op == "put":
            entries = model.get(lid, {})
            old = entries.get(eid)
            size = sum(len(d) + ENTRY_OVERHEAD for e in model.values() for d in e.values())
            freed = len(old) + ENTRY_OVERHEAD if old is not None else 0
            fits = size - freed + len(data) + ENTRY_OVERHEAD <= limit or not any(model.values())
            assert cache.put(lid, eid, data) is fits
            if fits:
                model.setdefault(lid, {})[eid] = data
        else:
            cache.delete_ledger(lid)
            model.pop(lid, None)
        model = {k: v for k, v in model.items() if v}
        assert cache.count == len(cache) == sum(len(e) for e in model.values())
        assert cache.size == sum(
            len(d) + ENTRY_OVERHEAD for e in model.values() for d in e.values()
        )
    for lid in range(1, 4):
        entries = model.get(lid, {})
        ids, datas = cache.sorted_ledger(lid)
        assert ids == sorted(entries)
        assert datas == [entries[e] for e in ids]
        # A flush takes them a block at a time: the same, in pieces of
        # consecutive ids within one block each.
        blocks = list(cache.sorted_blocks(lid))
        assert [e for keys, _ in blocks for e in keys] == ids
        assert [d for _, ds in blocks for d in ds] == datas
        for keys, ds in blocks:
            assert keys and len(keys) == len(ds) <= BLOCK
            assert keys[0] // BLOCK == keys[-1] // BLOCK
        assert sorted(cache.entry_ids(lid)) == sorted(entries)
        assert cache.has_ledger(lid) is bool(entries)
        for eid, data in entries.items():
            assert cache.get(lid, eid) == data
        if entries:
            assert cache.last_entry_id(lid) >= max(entries)
        assert cache.get(lid, 10**12 + 1) is None
    assert [(lid, eid) for lid, eid, _ in cache.sorted_entries()] == [
        (lid, eid) for lid in sorted(model) for eid in sorted(model[lid])
    ]
    paused = []
    cache.release(chunk=3, pause=lambda: paused.append(1))
    assert cache.count == cache.size == 0 and cache.get(1, 0) is None
    assert len(paused) >= sum(len(e) for e in model.values()) // 3 - 3 * 4
