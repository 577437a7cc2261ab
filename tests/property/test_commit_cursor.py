"""CommitCursor against a plain model: whatever the order of hand-outs, commits, gaps and
rewinds, the committed offset never passes a handed-out record the application has not
committed, and it stands on the model's answer or on offsets that hold no record."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from marshal_py.client.lease import CommitCursor


class Model:
    """Handed-out offsets, which of them are done, and the fetch position."""

    def __init__(self, start: int) -> None:
        self.handed: set[int] = set()
        self.done: set[int] = set()
        self.position = start

    def committed(self) -> int:
        undone = self.handed - self.done
        return min(undone) if undone else self.position


operation = st.one_of(
    st.tuples(st.just("hand"), st.integers(1, 6), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("commit"), st.integers(0, 1000), st.just(0), st.just(False)),
    st.tuples(st.just("through"), st.integers(0, 1000), st.just(0), st.just(False)),
    st.tuples(st.just("rewind"), st.integers(0, 1000), st.just(0), st.just(False)),
)


@given(start=st.integers(0, 50), ops=st.lists(operation, max_size=60))
def test_the_committed_offset_never_passes_an_uncommitted_record(
        start: int, ops: list[tuple[str, int, int, bool]]) -> None:
    cursor = CommitCursor(start)
    model = Model(start)
    for kind, a, b, as_records in ops:
        if kind == "hand":
            # ``a`` records from the position, with gaps of ``b`` offsets between them and a
            # trailing gap (a transaction marker) before the next fetch position.
            offsets = [model.position + i * (b + 1) for i in range(a)]
            next_position = offsets[-1] + 1 + b
            batch: list[object] = offsets if not as_records else [
                type("R", (), {"offset": o})() for o in offsets]
            cursor.handed(batch, next_position)
            model.handed.update(offsets)
            model.position = next_position
        elif kind == "commit":
            candidates = sorted(model.handed - model.done)
            if not candidates:
                continue
            offset = candidates[a % len(candidates)]
            cursor.commit(offset)
            model.done.add(offset)
        elif kind == "through":
            if not model.handed:
                continue
            ordered = sorted(model.handed)
            offset = ordered[a % len(ordered)]
            cursor.commit_through(offset)
            model.done.update(o for o in model.handed if o <= offset)
        else:
            undone = sorted(model.handed - model.done)
            if not undone:
                continue
            offset = undone[a % len(undone)]  # taken, never reached the application
            cursor.rewind(offset)
            model.handed = {o for o in model.handed if o < offset}
            model.done &= model.handed
            model.position = offset
        expected = model.committed()
        assert cursor.committed <= expected
        assert not any(cursor.committed <= o < expected for o in model.handed), \
            (cursor.committed, expected, sorted(model.handed), sorted(model.done))
        assert cursor.outstanding == bool(model.handed - model.done)


def test_in_order_commits_land_on_the_fetch_position_past_a_trailing_marker() -> None:
    cursor = CommitCursor(10)
    cursor.handed([10, 11, 12], next_position=14)  # 13 is a commit marker
    for offset in (10, 11, 12):
        cursor.commit(offset)
    assert cursor.committed == 14


def test_out_of_order_commits_wait_for_the_gap() -> None:
    cursor = CommitCursor(5)
    cursor.handed([5, 6, 7, 8], next_position=9)
    cursor.commit(7)
    assert cursor.committed == 5
    cursor.commit(5)
    assert cursor.committed == 6
    cursor.commit(6)
    assert cursor.committed == 8
    cursor.commit(8)
    assert cursor.committed == 9


def test_commits_of_records_never_handed_out_change_nothing() -> None:
    cursor = CommitCursor(10)
    cursor.commit(10)
    assert cursor.committed == 10
    cursor.handed([10, 11], next_position=12)
    cursor.commit(3)
    cursor.commit(12)
    assert cursor.committed == 10
