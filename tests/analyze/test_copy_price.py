"""Layout copies priced by bytes and pattern (advisor.analyze.framework.copy_price) from the collector's probe."""

from __future__ import annotations

import pytest

from advisor.analyze.framework.copy_price import copy_pattern, price_us
from advisor.collect.copy_costs import PATTERNS, SIZES, measure_copy_costs


@pytest.mark.parametrize(("dims", "strides", "pattern"), [
    ([256, 64, 16], [1024, 1, 64], "gather"),         # x.transpose(1, 2) of (256, 16, 64): innermost strided
    ([2, 8, 128, 64], [65536, 64, 512, 1], "rows"),   # (batch, heads, tokens, head_dim) from (b, tokens, heads, d)
    ([256, 16, 64], [1024, 64, 1], None),             # dense already: .contiguous() copies nothing
    ([1, 16, 64], [7, 64, 1], None),                  # a size-1 dimension's stride says nothing
    ([64, 1, 16], [1, 99, 64], "gather"),
    ([4, 4], [4], None),                              # dims and strides that do not fit together
])
def test_pattern_from_dims_and_strides(dims, strides, pattern) -> None:
    assert copy_pattern(dims, strides) == pattern


POINTS = [[16384, 4.0], [262144, 40.0], [1048576, 160.0], [4194304, 640.0]]


def test_price_at_between_below_and_beyond_the_probes_sizes() -> None:
    assert price_us(1048576, POINTS) == pytest.approx(160.0)
    # halfway in log size between 256 KiB and 1 MiB: halfway in log time
    assert price_us(524288, POINTS) == pytest.approx((40.0 * 160.0) ** 0.5)
    assert price_us(100, POINTS) == 4.0  # the call's own cost, which the smallest size is made of
    assert price_us(16 * 4194304, POINTS) == pytest.approx(16 * 640.0)  # the largest's cost per byte
    assert price_us(1000, [[0, 5.0], [100, -1.0]]) is None


def test_the_probe_times_both_patterns_at_every_size() -> None:
    probe = measure_copy_costs(budget_s=60.0)  # a machine busy with other tests may take longer than the default
    assert set(probe) == set(PATTERNS)
    for pattern, points in probe.items():
        assert [b for b, _ in points] == list(SIZES), pattern
        assert all(us > 0 for _, us in points), points
        assert points[-1][1] > points[0][1], points  # 256 times the bytes cost more than the smallest copy


def test_a_probe_over_its_budget_keeps_the_sizes_it_measured() -> None:
    """Where the cores are oversubscribed every parallel copy waits: the probe stops instead of holding the script."""
    probe = measure_copy_costs(budget_s=0.0)
    assert [[b for b, _ in points] for points in probe.values()] == [[SIZES[0]], [SIZES[0]]]
