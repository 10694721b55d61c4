# Promises: P16
"""The renewal's retry budget (_common.try_bound, retry_at), no server:
a try that stalls (its backend paused, the network black-holed) is cut
at its bound and leaves the next try, on a new connection, at least a
sixth of the lease before the loss is declared.  With the back-off (a
ninth of the lease) counted from the cut, 0.17 s of a 3 s lease was left:
on a loaded machine the keepalive through a new connection came too late
(CI)."""
import pytest

from dlock import _common as c

LEASES = [0.3, 1.5, 3, 10, 30, 120, 3600]


@pytest.mark.parametrize("lease", LEASES)
def test_a_stalled_try_leaves_a_sixth_for_the_next(lease):
    valid_from = 1000.0
    loss_at = valid_from + lease - c.lost_margin(lease)
    t = valid_from + lease / 3                 # the renewal is due
    bound = c.try_bound(lease, valid_from, t)
    assert lease / 6 - 1e-9 <= bound <= loss_at - t
    t2 = max(c.retry_at(lease, t), t + bound)  # stalled until cut
    assert t2 == t + bound                     # then at once: no back-off
    nxt = c.try_bound(lease, valid_from, t2)
    assert nxt >= lease / 6 - 1e-9
    assert t2 + nxt <= loss_at + 1e-9


@pytest.mark.parametrize("lease", LEASES)
def test_a_fast_failure_backs_off_and_every_bound_ends_by_the_loss(lease):
    valid_from = 1000.0
    loss_at = valid_from + lease - c.lost_margin(lease)
    t, tries = valid_from + lease / 3, 0
    while loss_at - t > 0.01:                  # (a bound is 10 ms at least)
        bound = c.try_bound(lease, valid_from, t)
        assert 0 < bound and t + bound <= loss_at + 1e-9
        nxt = c.retry_at(lease, t)              # refused at once
        assert nxt - t == pytest.approx(max(0.05, min(1.0, lease / 9)))
        t, tries = nxt, tries + 1
    assert tries >= 3                           # several tries in the lease


@pytest.mark.parametrize("lease", LEASES)
def test_an_answer_after_a_slow_connection_gets_a_sixth(lease):
    valid_from = 1000.0
    loss_at = valid_from + lease - c.lost_margin(lease)
    t = valid_from + lease / 3                 # the renewal is due
    ends = t + c.try_bound(lease, valid_from, t)
    assert c.answer_bound(lease, valid_from, ends, t) == pytest.approx(ends - t)
    sent = ends - 0.001                        # the connection took the try
    assert c.answer_bound(lease, valid_from, ends, sent) == \
        pytest.approx(max(0.01, min(lease / 6, loss_at - sent)))
    assert c.answer_bound(lease, valid_from, ends, loss_at + 1) == 0.01
