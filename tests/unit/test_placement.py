"""Ensemble placement: random among writable bookies, a recently failed one
only as a last resort, for ``bookieFailureHistoryExpirationMSec``."""

from __future__ import annotations

import time

import pytest

from dlog.conf.bookkeeper import ClientConfig
from dlog.errors import NotEnoughBookiesError
from dlog.ledger.client import BookKeeper
from dlog.ledger.placement import EnsemblePlacementPolicy

BOOKIES = [f"127.0.0.1:{3181 + i}" for i in range(5)]


def test_a_new_ensemble_is_distinct_writable_bookies() -> None:
    policy = EnsemblePlacementPolicy()
    seen: set[str] = set()
    for _ in range(50):
        ensemble = policy.new_ensemble(3, BOOKIES)
        assert len(ensemble) == len(set(ensemble)) == 3
        assert set(ensemble) <= set(BOOKIES)
        seen |= set(ensemble)
    assert seen == set(BOOKIES)  # random, not always the same three


def test_too_few_bookies_is_an_error_naming_the_counts() -> None:
    with pytest.raises(NotEnoughBookiesError, match="needed 3, found 2 writable") as info:
        EnsemblePlacementPolicy().new_ensemble(3, BOOKIES[:2])
    assert info.value.code == -6  # BookKeeper's NotEnoughBookiesException


def test_a_recently_failed_bookie_is_a_last_resort() -> None:
    policy = EnsemblePlacementPolicy(60.0)
    policy.record_failure(BOOKIES[0])
    for _ in range(50):
        assert BOOKIES[0] not in policy.new_ensemble(4, BOOKIES)
        assert policy.replace_bookie(BOOKIES[1:4], 0, BOOKIES) == BOOKIES[4]
    # Needed to fill the ensemble, it is taken all the same.
    assert sorted(policy.new_ensemble(5, BOOKIES)) == sorted(BOOKIES)
    assert policy.replace_bookie(BOOKIES[1:5], 0, BOOKIES) == BOOKIES[0]


def test_a_replacement_is_never_already_in_the_ensemble() -> None:
    policy = EnsemblePlacementPolicy()
    for _ in range(50):
        assert policy.replace_bookie(BOOKIES[:3], 1, BOOKIES) in BOOKIES[3:]
    with pytest.raises(NotEnoughBookiesError, match="no writable bookie outside the ensemble"):
        policy.replace_bookie(BOOKIES[:3], 1, BOOKIES[:3])


def test_a_failure_is_forgotten_after_the_configured_history() -> None:
    """The client's policy takes ``bookieFailureHistoryExpirationMSec``: with
    100 ms a failure is forgotten 0.3 s later (the default, 60 s, keeps it)."""
    conf = ClientConfig.load(
        metadataServiceUri="zk+hierarchical://127.0.0.1:2181/ledgers",
        bookieFailureHistoryExpirationMSec=100,
    )
    short = BookKeeper(conf=conf).placement
    default = BookKeeper("zk+hierarchical://127.0.0.1:2181/ledgers").placement
    for policy in (short, default):
        policy.record_failure(BOOKIES[0])
        assert policy.recently_failed(BOOKIES[0])
    time.sleep(0.3)
    assert not short.recently_failed(BOOKIES[0])
    assert default.recently_failed(BOOKIES[0])
    assert BOOKIES[0] in short.new_ensemble(5, BOOKIES)
