"""The models and running-requests tables, each sortable by a cycling column."""

from __future__ import annotations

from textual.widgets import DataTable

from omlx.schemas.stats import ModelStats, RunningRequest, StatsSnapshot
from omlx.tui.format import duration, human_bytes


class SortableTable(DataTable):
    """A DataTable that remembers its sort column across refreshes."""

    COLUMNS: tuple[str, ...] = ()
    SORT_KEYS: tuple[str, ...] = ()

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for col in self.COLUMNS:
            self.add_column(col, key=col)
        self.sort_index = 0

    def cycle_sort(self) -> str:
        self.sort_index = (self.sort_index + 1) % len(self.SORT_KEYS)
        return self.SORT_KEYS[self.sort_index]

    def selected_key(self) -> str | None:
        if self.row_count == 0:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value

    def _refill(self, rows: list[tuple[str, tuple]]) -> None:
        selected = self.selected_key()
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        keys = [k for k, _ in rows]
        if selected in keys:
            self.move_cursor(row=keys.index(selected))


class ModelsTable(SortableTable):
    COLUMNS = ("model", "type", "state", "pin", "ttl", "run", "q", "tok/s", "mem")
    SORT_KEYS = ("model", "generation_tps", "running", "memory_bytes")

    def show(self, snap: StatsSnapshot) -> None:
        key = self.SORT_KEYS[self.sort_index]
        models: list[ModelStats] = sorted(
            snap.models, key=lambda m: getattr(m, key), reverse=key != "model"
        )
        self._refill(
            [
                (
                    m.model,
                    (
                        m.model[:24],
                        m.type[:5],
                        "loaded" if m.loaded else "idle",
                        "yes" if m.pinned else "",
                        duration(m.ttl_left_s),
                        str(m.running),
                        str(m.queued),
                        f"{m.generation_tps:.1f}",
                        human_bytes(m.memory_bytes),
                    ),
                )
                for m in models
            ]
        )


class RequestsTable(SortableTable):
    COLUMNS = ("request", "model", "age", "prompt", "gen", "tok/s", "path")
    SORT_KEYS = ("age_s", "tokens_per_s", "generated_tokens", "prompt_tokens")

    def show(self, snap: StatsSnapshot) -> None:
        key = self.SORT_KEYS[self.sort_index]
        reqs: list[RunningRequest] = sorted(
            snap.requests, key=lambda r: getattr(r, key), reverse=True
        )
        self._refill(
            [
                (
                    r.request_id,
                    (
                        r.request_id[-12:],
                        r.model,
                        duration(r.age_s),
                        str(r.prompt_tokens),
                        str(r.generated_tokens),
                        f"{r.tokens_per_s:.1f}",
                        r.served_by,
                    ),
                )
                for r in reqs
            ]
        )
