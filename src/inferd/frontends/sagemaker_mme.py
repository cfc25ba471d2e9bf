"""SageMaker multi-model endpoints: the ``/models`` routes, as Triton 2.51's SageMaker server answers them.

SageMaker downloads a model's archive to ``/opt/ml/models/<hash>/model`` and asks the container to
load it (``POST /models {"model_name": <hash>, "url": <that folder>}``, the name the client asked
for in ``X-Amzn-SageMaker-Target-Model``), invokes it (``POST /models/<hash>/invoke``), lists and
describes what is loaded, and unloads it (``DELETE /models/<hash>``) when memory runs short. A load
registers the folder as a repository (``Core.register_repository``, explicit mode only) that serves
the archive's model under the target name: the folder itself when its ``config.pbtxt`` is at the
top, else its one subfolder, or the ensemble among several (an ensemble's steps load by their own
names). Loads answer 200, 409 for a hash or name already loaded, 507 when the failure reads as out
of memory (SageMaker then unloads others and tries again), else 400; the folder is unregistered
again after a failed load and after an unload. Registrations live in the core, so ``--workers``
processes see one list.

Beyond the reference (which loads any folder a client names, and aborts on a body that is not
JSON or lacks a name): the folder must be ``<root>/<hash>/model[/<subfolder>]`` under
``--sagemaker-models-root`` (``/opt/ml/models``), symbolic links resolved, with hashes and
subfolders as the reference's own pattern spells them; the target name may not hold path
characters; a malformed body gets its parse error (400); an archive of several models and no
ensemble is refused rather than one of them taken at random.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import orjson

from inferd.engine.facade import Core
from inferd.errors import AlreadyExistsError, InferdError, InvalidArgumentError
from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.dialect import SAGEMAKER_MULTI_MODEL, multi_model_status
from inferd.frontends.http.errors import TEXT, error_body
from inferd.frontends.http.jsonparse import parse_json
from inferd.frontends.http.protocol import HttpRequest, Responder
from inferd.logs import VERBOSE1

__all__ = ["MultiModels", "model_folder"]

log = logging.getLogger("inferd.sagemaker")

TARGET_HEADER = "x-amzn-sagemaker-target-model"
#: a hash or subfolder as the reference's path pattern spells them
_PART = re.compile(r"[0-9A-Za-z._]+")
_ENSEMBLE = re.compile(rb'platform:(\s)*"ensemble"')
#: characters a model name may not hold: it names a folder, a metric label, a URL path segment
_BAD_NAME = re.compile(r"[/\\\x00-\x1f]")


def _check_part(part: str) -> bool:
    return _PART.fullmatch(part) is not None and part not in (".", "..")


def check_url(url: str, root: Path) -> Path:
    """``url`` as a folder to load from: ``<root>/<hash>/model[/<subfolder>]``, inside ``root`` once
    symbolic links are resolved. InvalidArgumentError otherwise (nothing is read outside ``root``)."""
    why = (
        f"failed to register '{url}': a multi-model load reads only folders under '{root}' "
        f"(<root>/<hash>/model[/<subfolder>])"
    )
    path = Path(url)
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise InvalidArgumentError(why) from None
    parts = rel.parts
    if (
        not path.is_absolute()
        or os.path.normpath(url) != url
        or len(parts) not in (2, 3)
        or parts[1] != "model"
        or not all(_check_part(p) for p in parts)
    ):
        raise InvalidArgumentError(why)
    real_root = root.resolve()
    if not path.resolve().is_relative_to(real_root):
        raise InvalidArgumentError(why)
    return path


def check_target(name: str) -> str:
    """The model name a load serves (the target header or the hash): no path characters."""
    if not name:
        raise InvalidArgumentError("a multi-model load needs 'model_name' (the model's hash)")
    if _BAD_NAME.search(name) or name in (".", ".."):
        raise InvalidArgumentError(
            f"invalid model name '{name}': a model name may not hold '/', '\\' or controls"
        )
    return name


def model_folder(url: Path) -> tuple[Path, str]:
    """(the folder to register, the subfolder served as the target model) for an archive at ``url``:
    ``url`` itself when its ``config.pbtxt`` is at the top; else its only subfolder, or the ensemble
    among several (the reference's ``platform: "ensemble"`` match). Blocking (reads the folder)."""
    if (url / "config.pbtxt").is_file():
        return url.parent, url.name
    try:
        subdirs = sorted(e.name for e in os.scandir(url) if e.is_dir())
    except OSError as e:
        raise InvalidArgumentError(f"failed to register '{url}', repository not found") from e
    if len(subdirs) <= 1:
        return url, subdirs[0] if subdirs else ""
    ensembles = []
    for sub in subdirs:
        try:
            text = (url / sub / "config.pbtxt").read_bytes()
        except OSError:
            continue
        if _ENSEMBLE.search(text):
            ensembles.append(sub)
    if not ensembles:
        raise InvalidArgumentError(
            f"failed to load '{url}': it holds {len(subdirs)} models ({', '.join(subdirs)}) and none is "
            "an ensemble: a multi-model archive holds one model, or an ensemble and its steps"
        )
    if len(subdirs) > 5:
        log.warning(
            "Several model directories found. If using ensemble, smaller ensembles are recommended "
            "for better memory management."
        )
    return url, ensembles[-1]


def _string(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key, "")
    if not isinstance(value, str):
        raise InvalidArgumentError(f"'{key}': attempt to access JSON non-string as string")
    return value


class MultiModels:
    """The ``/models`` routes over ``core`` (``app`` runs the invokes)."""

    def __init__(self, core: Core, app: HttpApp, root: Path) -> None:
        self.core = core
        self.app = app
        self.root = root
        #: loads and unloads under way (owned until they end)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- what is loaded ----------------------------------------------------------------------------
    def _loaded(self) -> dict[str, str]:
        """hash -> its registered folder, in the order they were loaded."""
        return {label: path for label, path, _ in self.core.registrations() if label}

    def digest_of(self, target: str) -> str | None:
        """The hash whose load serves ``target`` (None: no load does)."""
        return next((label for label, _, m in self.core.registrations() if label and target in m), None)

    def list(self, resp: Responder) -> None:
        """``GET /models``: an entry per load; one whose model (named as its hash, version 1, as
        the reference asks) is not READY is an empty object."""
        models = [
            {"modelName": h, "modelUrl": p} if self.core.model_ready(h, "1") else {}
            for h, p in self._loaded().items()
        ]
        resp.send(200, orjson.dumps({"models": models}), TEXT)

    def describe(self, resp: Responder, digest: str) -> None:
        path = self._loaded().get(digest)
        if path is None:
            resp.send(404, b"", TEXT)
            return
        resp.send(200, orjson.dumps({"modelName": digest, "modelUrl": path}), TEXT)

    def invoke(self, req: HttpRequest, resp: Responder, digest: str) -> None:
        if digest not in self._loaded():
            resp.send(404, b"", TEXT)
            return
        target = req.headers.get(TARGET_HEADER) or digest
        if log.isEnabledFor(VERBOSE1):
            log.log(VERBOSE1, "Invoking SageMaker TargetModel: %s", target)
        self.app.infer(req, resp, target, "", SAGEMAKER_MULTI_MODEL)

    # -- loads and unloads -------------------------------------------------------------------------
    def _spawn(self, work: Coroutine[Any, Any, None], resp: Responder) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._done, resp))

    def _done(self, resp: Responder, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a SageMaker multi-model request failed", exc_info=task.exception())
            resp.send(500, b'{"error":"internal server error"}', TEXT)

    def load(self, req: HttpRequest, resp: Responder) -> None:
        """``POST /models``: answered once the model is READY, or why not."""
        try:
            digest, url = self._read_load(req.body)
            target = check_target(req.headers.get(TARGET_HEADER) or digest)
            folder = check_url(url, self.root)
        except InferdError as e:
            resp.send(400, error_body(e), TEXT)
            return
        log.info("Loading SageMaker TargetModel: %s", target)
        self._spawn(self._load(resp, digest, target, folder), resp)

    @staticmethod
    def _read_load(body: bytes) -> tuple[str, str]:
        if not body:
            return "", ""
        doc = parse_json(body)
        if not isinstance(doc, dict):
            doc = {}  # the reference finds no member in any other root
        return _string(doc, "model_name"), _string(doc, "url")

    async def _load(self, resp: Responder, digest: str, target: str, url: Path) -> None:
        core = self.core
        try:
            parent, sub = await asyncio.to_thread(model_folder, url)
            await core.register_repository(str(parent), {target: sub}, digest)
        except AlreadyExistsError as e:
            resp.send(409, error_body(e), TEXT)
            return
        except InferdError as e:
            resp.send(400, error_body(e), TEXT)
            return
        try:
            await core.load_model(target)
        except InferdError as e:
            status = 409 if isinstance(e, AlreadyExistsError) else multi_model_status(e)
            resp.send(status, error_body(e), TEXT)
            try:
                await core.unregister_repository(str(parent))
            except InferdError as again:
                log.error("unregistering '%s' after its failed load failed: %s", parent, again.message)
            log.log(VERBOSE1, "Unregistered model repository due to load failure for model: %s", target)
            return
        resp.send(200, b"", TEXT)

    def unload(self, req: HttpRequest, resp: Responder, digest: str) -> None:
        """``DELETE /models/<hash>``: the model and its dependents unloaded, its folder unregistered.
        The model is the one the hash's load registered (the reference takes the target header, else
        the hash, and aborts when that names no model)."""
        found = next(((p, m) for label, p, m in self.core.registrations() if label == digest), None)
        path, mapping = found if found is not None else (None, {})
        target = next(iter(mapping), None) or req.headers.get(TARGET_HEADER) or digest
        if path is None:
            log.log(VERBOSE1, "Model %s with model hash %s is not loaded.", target, digest)
            resp.send(404, b"", TEXT)
            return
        log.info("Unloading SageMaker TargetModel: %s", target)
        self._spawn(self._unload(resp, target, path), resp)

    async def _unload(self, resp: Responder, target: str, path: str) -> None:
        try:
            await self.core.unload_model(target, unload_dependents=True)
        except InferdError as e:
            log.error("Error when unloading SageMaker Model with dependents for model: %s", target)
            resp.send(400, error_body(e), TEXT)
            return
        try:
            await self.core.unregister_repository(path)
        except InferdError as e:
            log.error("Unable to unregister model repository for path: %s", path)
            resp.send(400, error_body(e), TEXT)
            return
        resp.send(200, b"", TEXT)
