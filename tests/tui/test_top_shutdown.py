"""`omlx top` quits cleanly while stats frames keep arriving (the screen goes first)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from omlx.schemas.stats import StatsSnapshot
from omlx.tui.app import TopApp
from omlx.tui.client import OmlxClient, ServerUnavailable
from tests.tui.test_top_snapshot import FRAME


class FloodClient(OmlxClient):
    """A frame on every turn of the event loop, so one lands during shutdown."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__("http://127.0.0.1:9")
        self.fail = fail
        self.frames = 0

    async def stream(self) -> AsyncIterator[StatsSnapshot]:
        while True:
            await asyncio.sleep(0)
            if self.fail:
                raise ServerUnavailable("gone")
            self.frames += 1
            yield FRAME


@pytest.mark.anyio
@pytest.mark.parametrize("fail", [False, True], ids=["frames", "reconnects"])
@pytest.mark.parametrize("quit_key", [False, True], ids=["closed", "q"])
async def test_quit_while_frames_arrive(fail: bool, quit_key: bool) -> None:
    # Closing the test harness tears the screen down while the message loop still
    # runs, which is where a frame used to meet a missing #status.
    for _ in range(5):
        client = FloodClient(fail=fail)
        app = TopApp(client, reconnect_s=0)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.05)
            if quit_key:
                await pilot.press("q")
        assert fail or client.frames > 0
