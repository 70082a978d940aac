"""The integrations page: one card per agent tool `omlx launch TOOL` sets up.

From omlx.integrations (the tools themselves): what each talks to, where its docs are,
and, on this machine, whether it is installed and already pointed at omlx.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from omlx.integrations import TOOLS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Card:
    id: str  # the TOOL of `omlx launch TOOL`
    name: str
    api: str  # the omlx endpoint it uses
    docs_url: str
    command: str
    installed: bool
    configured: bool | None  # None: configured through the environment at launch only


def cards() -> list[Card]:
    """Blocking (PATH look-ups, a few small config reads): run it in a thread."""
    env = dict(os.environ)
    out = []
    for tool in TOOLS.values():
        info = tool.info()
        try:
            configured = tool.is_configured(env)
        except Exception as e:  # a malformed config of the tool's own: say unknown
            log.debug("integrations: cannot read %s's config: %s", tool.name, e)
            configured = None
        out.append(
            Card(
                id=info.name, name=info.display_name, api=info.api, docs_url=info.docs_url,
                command=info.command, installed=tool.find(env) is not None, configured=configured,
            )
        )  # fmt: skip
    return out
