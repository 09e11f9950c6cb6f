"""The pure parts of recovery: the overlap search and the spool line parser."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from hermes_repo.transcript.replay import longest_overlap
from hermes_repo.transcript.spool import RejectedLine, SpoolRecord, parse_spool


def naive_overlap(stored: list[tuple[int]], pending: list[tuple[int]]) -> int:
    for k in range(min(len(stored), len(pending)), 0, -1):
        if stored[len(stored) - k :] == pending[:k]:
            return k
    return 0


small = st.lists(st.integers(0, 2).map(lambda i: (i,)), max_size=12)


@given(small, small)
def test_longest_overlap_matches_the_naive_search(
    stored: list[tuple[int]], pending: list[tuple[int]]
) -> None:
    assert longest_overlap(stored, pending) == naive_overlap(stored, pending)


def test_longest_overlap_examples() -> None:
    a, b, c, d = [(x,) for x in "abcd"]
    assert longest_overlap([a, b, c], [b, c, d]) == 2
    assert longest_overlap([a, b, c], [a, b, c]) == 3
    assert longest_overlap([a, b, c], [d]) == 0
    assert longest_overlap([], [a]) == 0
    assert longest_overlap([a, a, a], [a, a, a, a]) == 3
    assert longest_overlap([a, b, a, b], [a, b, a, c]) == 2


def test_longest_overlap_is_linear_on_large_inputs() -> None:
    # 100k against 100k, worst case for a naive search (long runs of equal keys).
    stored = [(0,)] * 100_000
    pending = [(0,)] * 99_999 + [(1,)]
    assert longest_overlap(stored, pending) == 99_999


def test_parse_spool_keeps_torn_and_invalid_lines_with_reasons() -> None:
    data = (
        b'{"_fallback_timestamp": 1.5, "message": {"role": "user", "content": "a"}}\n'
        b"\n"
        b'{"role": "assistant", "content": "plain"}\n'
        b"[1, 2]\n"
        b'{"no": "role"}\n'
        b'{"_fallback_timestamp": 2, "message": "not an object"}\n'
        b'{"_fallback_timestamp": 3, "message": {"role": "us'  # torn: no newline
    )
    contents = parse_spool(data)
    assert [(r.line_no, r.fallback_timestamp) for r in contents.records] == [(1, 1.5), (3, None)]
    assert all(isinstance(r, SpoolRecord) for r in contents.records)
    assert [line.line_no for line in contents.rejected] == [4, 5, 6, 7]
    assert all(isinstance(line, RejectedLine) for line in contents.rejected)
    assert contents.rejected[-1].raw.endswith(b'"role": "us')
    assert "not valid JSON" in contents.rejected[-1].reason


def test_parse_spool_splits_on_newline_bytes_only() -> None:
    # U+2028 and U+0085 are line breaks for str.splitlines, not for JSON Lines.
    text = "a\u2028b\u0085c\u000bd"
    data = (json.dumps({"role": "user", "content": text}, ensure_ascii=False) + "\n").encode()
    assert "\u2028".encode() in data  # written raw, as the spool writer does
    contents = parse_spool(data)
    assert not contents.rejected
    assert contents.records[0].message["content"] == text


def test_a_complete_last_line_without_newline_is_a_record() -> None:
    contents = parse_spool(b'{"role": "user", "content": "x"}')
    assert len(contents.records) == 1 and not contents.rejected
