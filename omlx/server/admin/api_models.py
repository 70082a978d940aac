"""The models page's API: the store merged with the pool's state; load, unload, pin, TTL,
delete, import.

Pins and TTLs set here are written to config.toml as `omlx pin` does, and applied to the
running pool at once. Imports run as jobs (jobs.py) with the phase and bytes they report.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from litestar import Request, get, post
from litestar.params import Body

from omlx.errors import InvalidRequest, ModelNotFound, NotFound
from omlx.schemas.admin import AdminModel, AdminModels, ImportRequest, JobStatus, TtlUpdate
from omlx.schemas.models import ImportProgress, ModelStatus
from omlx.server.admin.core import Admin, admin_guard, admin_of
from omlx.server.admin.jobs import Job
from omlx.settings import SettingsError, read_file, update_list, write_file

log = logging.getLogger(__name__)

ACTIONS = ("load", "unload", "pin", "unpin")


async def models_view(admin: Admin) -> AdminModels:
    status = admin.pool.status()
    catalog = admin.options.catalog
    entries = await asyncio.to_thread(catalog.entries) if catalog is not None else []
    by_id: dict[str, AdminModel] = {}
    for e in entries:
        by_id[e.name] = AdminModel(
            id=e.name, type=e.type, state="available", architecture=e.architecture,
            num_params=e.num_params, size_bytes=e.size_bytes, quantization=e.quantization,
            context_length=e.context_length, source=e.source, path=e.path,
            deletable=e.deletable,
        )  # fmt: skip
    for row in status.data:
        model = by_id.get(row.id) or AdminModel(id=row.id, type=row.type, state=row.state)
        _merge(model, row)
        by_id[row.id] = model
    return AdminModels(
        budget_bytes=status.budget_bytes,
        used_bytes=status.used_bytes,
        models=sorted(by_id.values(), key=lambda m: m.id.lower()),
        can_import=catalog is not None,
    )


def _merge(model: AdminModel, row: ModelStatus) -> None:
    model.state = row.state
    model.pinned = row.pinned
    model.memory_bytes = row.memory_bytes
    model.estimated_bytes = row.estimated_bytes
    model.ttl_s = row.ttl_s
    model.ttl_left_s = row.ttl_left_s
    model.in_flight = row.in_flight


@get("/admin/api/models", guards=[admin_guard])
async def list_models(request: Request[Any, Any, Any]) -> AdminModels:
    return await models_view(admin_of(request))


def _model_id(request: Request[Any, Any, Any]) -> tuple[str, str]:
    target = str(request.path_params["target"]).strip("/")
    model_id, _, action = target.rpartition("/")
    if not model_id:
        raise InvalidRequest("POST /admin/api/models/{id}/{action}", param="action")
    return model_id, action


@post("/admin/api/models/{target:path}", guards=[admin_guard], status_code=200)
async def model_action(request: Request[Any, Any, Any]) -> AdminModels:
    """load | unload | pin | unpin | ttl (body {"ttl_s": ...}) | delete."""
    admin = admin_of(request)
    model_id, action = _model_id(request)
    pool = admin.pool
    if action == "load":
        await pool.load(model_id)
    elif action == "unload":
        await pool.unload(model_id)
    elif action in ("pin", "unpin"):
        await (pool.pin if action == "pin" else pool.unpin)(model_id)
        _save_pin(admin, model_id, action == "pin")
    elif action == "ttl":
        body = TtlUpdate(**(await request.json() or {}))
        if body.ttl_s is not None and body.ttl_s < 0:
            raise InvalidRequest("ttl_s must be 0 (never) or more seconds", param="ttl_s")
        await pool.set_ttl(model_id, body.ttl_s)
        _save_ttl(admin, model_id, body.ttl_s)
    elif action == "delete":
        await _delete(admin, model_id)
    else:
        raise InvalidRequest(
            f"action must be one of {', '.join((*ACTIONS, 'ttl', 'delete'))}", param="action"
        )
    log.info("admin: %s %s", action, model_id)
    return await models_view(admin)


def _save_pin(admin: Admin, model_id: str, pinned: bool) -> None:
    try:
        value = update_list("models.pinned", model_id, add=pinned, path=admin.config_file)
    except SettingsError as e:
        raise InvalidRequest(str(e)) from None
    admin.live["models.pinned"] = value


def _save_ttl(admin: Admin, model_id: str, ttl_s: float | None) -> None:
    try:
        data = read_file(admin.config_file)
    except SettingsError as e:
        raise InvalidRequest(str(e)) from None
    overrides = dict(data.get("models", {}).get("ttl_overrides_s", {}))
    if ttl_s is None:
        overrides.pop(model_id, None)
    else:
        overrides[model_id] = ttl_s
    data.setdefault("models", {})["ttl_overrides_s"] = overrides
    write_file(admin.config_file, data)
    admin.live["models.ttl_overrides_s"] = overrides


async def _delete(admin: Admin, model_id: str) -> None:
    catalog = admin.options.catalog
    if catalog is None:
        raise InvalidRequest("this server was started without a model store")
    entry = next((e for e in await asyncio.to_thread(catalog.entries) if e.name == model_id), None)
    if entry is None:
        raise ModelNotFound(f"model {model_id!r} is not in the store", param="model")
    if not entry.deletable:
        raise InvalidRequest(f"{model_id} lives outside the store's directories ({entry.path})")
    await admin.pool.unload(model_id)
    if model_id in admin.live.get("models.pinned", admin.settings.models.pinned):
        await admin.pool.unpin(model_id)
        _save_pin(admin, model_id, False)
    gone = await asyncio.to_thread(catalog.delete, model_id)
    log.info("admin: deleted %s (%s)", model_id, gone)


@post("/admin/api/imports", guards=[admin_guard], status_code=202)
async def start_import(
    request: Request[Any, Any, Any], data: Annotated[ImportRequest, Body()]
) -> JobStatus:
    admin = admin_of(request)
    catalog = admin.options.catalog
    if catalog is None:
        raise InvalidRequest("this server was started without a model store")
    source = data.source.strip()
    if not source:
        raise InvalidRequest("name a .gguf file, a model folder or ORG/NAME", param="source")

    def work(job: Job) -> dict[str, Any]:
        def report(p: ImportProgress) -> None:
            # A phase without counts (resolving, done) keeps the last byte counts shown.
            detail: dict[str, Any] = {"phase": p.phase, "note": p.message}
            if p.total is not None:
                detail |= {"done": p.done, "total": p.total, "unit": p.unit}
            fraction = p.done / p.total if p.total else None
            job.update(progress=fraction, message=p.phase, detail=detail)

        entry = catalog.import_model(source, name=data.name, dtype=data.dtype, progress=report)
        return {"name": entry.name, "type": entry.type, "path": entry.path}

    return admin.jobs.start("import", source, work).status()


@get("/admin/api/jobs", guards=[admin_guard])
async def list_jobs(request: Request[Any, Any, Any]) -> list[JobStatus]:
    return admin_of(request).jobs.list(request.query_params.get("kind"))


@get("/admin/api/jobs/{job_id:str}", guards=[admin_guard])
async def get_job(request: Request[Any, Any, Any]) -> JobStatus:
    job_id = request.path_params["job_id"]
    job = admin_of(request).jobs.get(job_id)
    if job is None:
        raise NotFound(f"no job {job_id!r}", param="job_id")
    return job.status()


ROUTES = [list_models, model_action, start_import, list_jobs, get_job]
