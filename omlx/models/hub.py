"""Download a model repository from the Hugging Face hub into the store.

huggingface_hub does the HTTP work and honours HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE
(all read by it). A transfer cut mid-file is resumed with a Range request; a pull that
failed part-way skips, on the next run, the files it already finished.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omlx.errors import ModelNotFound, OmlxError

log = logging.getLogger(__name__)

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class DownloadFailed(OmlxError):
    """A hub download failed: network, authentication, or a server error."""

    code = "download_failed"


@dataclass(frozen=True, slots=True)
class HubFile:
    name: str
    size_bytes: int | None
    will_download: bool


def is_repo_id(source: str) -> bool:
    return bool(REPO_ID_RE.match(source)) and ".." not in source


def download(
    repo_id: str,
    dest: Path,
    revision: str | None = None,
    dry_run: bool = False,
    progress: bool = True,
    on_bytes: Callable[[int, int | None], None] | None = None,
) -> Path | list[HubFile]:
    """Fetch `repo_id` at `revision` into `dest`; with `dry_run`, list what would be fetched.

    `on_bytes(done, total)`: bytes fetched so far, instead of the terminal progress bars.
    """
    if not is_repo_id(repo_id):
        raise ModelNotFound(f"{repo_id!r} is not a hub repository id (ORG/NAME)", param="source")
    from huggingface_hub import constants, snapshot_download

    if constants.is_offline_mode():
        raise DownloadFailed("HF_HUB_OFFLINE is set: unset it to download from the hub")
    tqdm_class = _reporting_tqdm(on_bytes) if on_bytes else None
    if tqdm_class is None and not progress:
        tqdm_class = _silent_tqdm()
    try:
        result = snapshot_download(
            repo_id,
            revision=revision,
            local_dir=dest,
            dry_run=dry_run,
            tqdm_class=tqdm_class,
        )
    except Exception as e:
        raise _translate(e, repo_id, revision, constants.ENDPOINT) from e
    if dry_run:
        return [HubFile(f.filename, f.file_size, f.will_download) for f in result]
    return Path(result)


def _silent_tqdm() -> Any:
    from huggingface_hub.utils import tqdm

    class Silent(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Silent


def _reporting_tqdm(on_bytes: Callable[[int, int | None], None]) -> Any:
    """A tqdm that prints nothing and hands its byte counts to `on_bytes`.

    snapshot_download aggregates every file's bytes into bars of unit "B" made from this
    class (huggingface_hub 1.x and 2.x); file-count bars are ignored.
    """
    import io

    from huggingface_hub.utils import tqdm

    class Reporting(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["file"] = io.StringIO()
            kwargs.pop("disable", None)
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.unit == "B":
                on_bytes(int(self.n), int(self.total) if self.total else None)
            return shown

    return Reporting


def _translate(e: Exception, repo_id: str, revision: str | None, endpoint: str) -> OmlxError:
    """Turn huggingface_hub's exceptions into omlx errors that name the fix."""
    from huggingface_hub import errors

    # A dry run wraps the failed repo look-up; judge by what actually failed.
    if isinstance(e, errors.DryRunError) and isinstance(e.__cause__, errors.HfHubHTTPError):
        e = e.__cause__
    if isinstance(e, errors.RevisionNotFoundError):
        return ModelNotFound(f"revision {revision!r} of {repo_id} not found on {endpoint}")
    if isinstance(e, errors.GatedRepoError):
        return DownloadFailed(f"{repo_id} is gated: accept its terms on the hub and set HF_TOKEN")
    if isinstance(e, errors.RepositoryNotFoundError):
        return ModelNotFound(
            f"repository {repo_id} not found on {endpoint} "
            "(a private repository also needs HF_TOKEN)"
        )
    if isinstance(e, errors.DryRunError | errors.LocalEntryNotFoundError):
        cause = e.__cause__ or e
        return DownloadFailed(f"cannot reach {endpoint} for {repo_id}: {_first_line(cause)}")
    if isinstance(e, errors.HfHubHTTPError):
        return DownloadFailed(f"download of {repo_id} failed: {_first_line(e)}")
    if isinstance(e, OSError | ValueError):
        return DownloadFailed(f"download of {repo_id} failed: {_first_line(e)}")
    return DownloadFailed(f"download of {repo_id} failed: {type(e).__name__}: {_first_line(e)}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
