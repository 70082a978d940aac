"""`omlx top`: a Textual dashboard attached to a running server over HTTP."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import ContentSwitcher, Footer, Static

from omlx.schemas.stats import StatsSnapshot
from omlx.tui.client import OmlxClient, ServerUnavailable
from omlx.tui.format import duration
from omlx.tui.history import History
from omlx.tui.widgets.summary import Summary
from omlx.tui.widgets.tables import ModelsTable, RequestsTable

VIEWS = ("models", "requests")


class TopApp(App[None]):
    TITLE = "omlx top"
    CSS = """
    #status { height: 1; background: $panel; padding: 0 1; }
    #message { height: 1; padding: 0 1; color: $warning; }
    ContentSwitcher { height: 1fr; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("q", "quit", "Quit"),
        Binding("p", "pause", "Pause"),
        Binding("s", "sort", "Sort"),
        Binding("v", "switch_view", "View"),
        Binding("u", "unload", "Unload"),
        Binding("i", "toggle_pin", "Pin/unpin"),
    ]

    def __init__(self, client: OmlxClient, reconnect_s: float = 1.0) -> None:
        super().__init__()
        self.client = client
        self.reconnect_s = reconnect_s
        self.history = History()
        self.paused = False
        self.connected = False
        self.snapshot: StatsSnapshot | None = None

    def compose(self) -> ComposeResult:
        yield Static(f"connecting to {self.client.base_url} ...", id="status")
        yield Summary()
        with ContentSwitcher(initial="models"):
            yield ModelsTable(id="models")
            yield RequestsTable(id="requests")
        yield Static("", id="message")
        yield Footer()

    def on_mount(self) -> None:
        self.follow_stats()

    @work(exclusive=True)
    async def follow_stats(self) -> None:
        """Follow the stats stream; when the server goes away, say so and reconnect."""
        # The screen is torn down before this worker is cancelled, so a frame that
        # arrives while the app quits must not touch the widgets.
        while self.is_running:
            try:
                async for snap in self.client.stream():
                    if not self.is_running:
                        return
                    self.connected = True
                    self.on_snapshot(snap)
                raise ServerUnavailable("stream ended")
            except ServerUnavailable as e:
                self.connected = False
                if not self.is_running:
                    return
                self.set_status(f"server unavailable ({e}); reconnecting ...")
            await asyncio.sleep(self.reconnect_s)

    def on_snapshot(self, snap: StatsSnapshot) -> None:
        self.history.add(snap)
        self.snapshot = snap
        if self.paused:
            return
        self.set_status(
            f"{self.client.base_url}  omlx {snap.version}  up {duration(snap.uptime_s)}  "
            f"blas {snap.blas or '-'}"
        )
        self.query_one(Summary).show(snap, self.history)
        self.query_one(ModelsTable).show(snap)
        self.query_one(RequestsTable).show(snap)

    def set_status(self, text: str) -> None:
        prefix = "[PAUSED] " if self.paused else ""
        self.query_one("#status", Static).update(prefix + text)

    def say(self, text: str) -> None:
        self.query_one("#message", Static).update(text)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.say("paused: press p to resume" if self.paused else "")
        if not self.paused and self.snapshot:
            self.on_snapshot(self.snapshot)

    def _current_table(self) -> ModelsTable | RequestsTable:
        current = self.query_one(ContentSwitcher).current or "models"
        return self.query_one(f"#{current}", ModelsTable if current == "models" else RequestsTable)

    def action_sort(self) -> None:
        table = self._current_table()
        self.say(f"sorted by {table.cycle_sort()}")
        if self.snapshot:
            table.show(self.snapshot)

    def action_switch_view(self) -> None:
        switcher = self.query_one(ContentSwitcher)
        switcher.current = VIEWS[(VIEWS.index(switcher.current or "models") + 1) % len(VIEWS)]
        self.say(f"view: {switcher.current}")

    async def action_unload(self) -> None:
        await self._model_action(lambda m: "unload")

    async def action_toggle_pin(self) -> None:
        pinned = {m.model for m in self.snapshot.models if m.pinned} if self.snapshot else set()
        await self._model_action(lambda m: "unpin" if m in pinned else "pin")

    async def _model_action(self, choose) -> None:
        model = self.query_one(ModelsTable).selected_key()
        if model is None:
            self.say("no model selected")
            return
        self.say(await self.client.model_action(model, choose(model)))

    async def on_unmount(self) -> None:
        await self.client.close()
