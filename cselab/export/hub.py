"""Pushing an export folder to a Hugging Face Hub model repository.

An export folder is a sentence-transformers model folder (``modules.json``, ``config.json``,
weights, tokenizer, possibly ``onnx/model.onnx``) whose ``README.md`` is the Hugging Face model
card built by :mod:`cselab.export.card`. :func:`push_export` checks the card, then creates the
repository (``exist_ok``) and uploads the folder in one commit with the real client library,
:class:`huggingface_hub.HfApi`. Everything a user can get wrong (no ``hub.repo_id``, no token,
no card, offline mode, a refusing server) is one :class:`~cselab.errors.ExportError` naming the
config key, the variable or the server; the token never appears in a message or a receipt.

The config section ``hub``::

    hub:
      repo_id: me/cselab-{exp}   # {exp} is filled with the experiment id
      token_env: HF_TOKEN        # the environment variable holding a write token
      endpoint: null             # null: $HF_ENDPOINT, else https://huggingface.co
      private: true
      revision: main
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cselab.errors import ExportError
from cselab.settings import from_dict
from cselab.settings.sections import Hub

DEFAULT_ENDPOINT = "https://huggingface.co"

#: never uploaded: lock files, caches, byte code (on top of huggingface_hub's own ``.git`` rules)
IGNORE_PATTERNS = ("*.lock", ".cache/**", "**/.cache/**", "__pycache__/**", "**/__pycache__/**", "*.pyc")

_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)

_SET_REPO = ("set it on the command line, e.g. --config hub='{repo_id: me/cselab-{exp}}', "
             "or as hub: {repo_id: me/cselab-{exp}} in config.yaml ({exp} is filled with the "
             "experiment id)")


@dataclass(frozen=True)
class PushSettings:
    """What a push uses: the repository (``repo_id`` may still hold ``{exp}``), the token, the
    endpoint, the repository's visibility and the branch."""

    repo_id: str
    token: str = field(repr=False)  # never in a message or a log
    endpoint: str
    private: bool
    revision: str

    def logged(self) -> dict:
        """The settings without the token (what the job's MLflow run logs)."""
        return {"repo_id": self.repo_id, "endpoint": self.endpoint, "private": self.private,
                "revision": self.revision}


def hub_settings(cfg_hub: dict | Hub | None, environ: Mapping[str, str] = os.environ) -> PushSettings:
    """The push settings from the config section ``hub`` (typed, or its plain dict: a missing key
    takes its default, ``private: true`` included) and the environment ``environ``.

    Raises :class:`ExportError` naming ``hub.repo_id`` when no repository is
    configured, or naming the variable and ``hub.token_env`` when the token variable is unset
    or empty. The endpoint defaults to ``$HF_ENDPOINT``, then ``https://huggingface.co``.
    """
    hub = cfg_hub if isinstance(cfg_hub, Hub) else from_dict(Hub, cfg_hub or {}, where="hub")
    repo_id = hub.repo_id.strip() if isinstance(hub.repo_id, str) else ""
    if not repo_id:
        raise ExportError(f"config key 'hub.repo_id' is not set: name the Hub model repository "
                          f"to push the export to; {_SET_REPO}")
    owner, _, name = repo_id.partition("/")
    if not owner or not name or "/" in name:
        raise ExportError(f"config key 'hub.repo_id': {repo_id!r} is not of the form "
                          f"'owner/name'; {_SET_REPO}")
    token_env = hub.token_env or "HF_TOKEN"
    token = (environ.get(token_env) or "").strip()
    if not token:
        raise ExportError(f"no Hub token: the environment variable {token_env} (named by config "
                          f"key 'hub.token_env') is unset or empty; export a write token "
                          f"(e.g. {token_env}=hf_...) or point hub.token_env at the variable "
                          f"that holds one")
    endpoint = hub.endpoint or environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    return PushSettings(repo_id=repo_id, token=token, endpoint=endpoint.rstrip("/"), private=bool(hub.private),
                        revision=hub.revision or "main")


def _no_card(folder: Path, why: str) -> ExportError:
    """The error for an export without a usable model card (``why`` says what is wrong)."""
    return ExportError(f"the export {folder} has no model card ({why}); build the export with "
                       f"rule export_model (target results/export/<experiment>), which writes the card, then push")


def check_export(folder: Path) -> dict:
    """The parsed YAML front matter of ``folder/README.md``, the export's model card.

    Raises :class:`ExportError` when the folder does not exist, has no ``README.md``, or the
    card has no ``--- ... ---`` front matter parsing to a mapping with ``library_name`` and
    ``model-index`` or ``base_model``.
    """
    import yaml

    folder = Path(folder)
    if not folder.is_dir():
        raise _no_card(folder, "the folder does not exist")
    card = folder / "README.md"
    if not card.is_file():
        raise _no_card(folder, "README.md is missing")
    match = _FRONT_MATTER.match(card.read_text(encoding="utf-8", errors="replace"))
    if match is None:
        raise _no_card(folder, "README.md has no YAML front matter between '---' lines")
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise _no_card(folder, f"README.md front matter is not valid YAML{at}: {problem}") from e
    if not isinstance(meta, dict):
        raise _no_card(folder, "README.md front matter is not a mapping")
    if not meta.get("library_name"):
        raise _no_card(folder, "README.md front matter lacks library_name")
    if not meta.get("model-index") and not meta.get("base_model"):
        raise _no_card(folder, "README.md front matter has neither model-index nor base_model")
    return meta


def _files(folder: Path) -> list[str]:
    """The relative paths under ``folder`` that ``upload_folder`` sends (same filter), sorted."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    paths = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    return sorted(filter_repo_objects(paths, ignore_patterns=[*IGNORE_PATTERNS, *DEFAULT_IGNORE_PATTERNS]))


def _explain(err: Exception, endpoint: str, repo_id: str, token: str) -> str:
    """One sentence for a failed push: the endpoint, the repository and the server's message."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    where = f"could not push the export to {endpoint} (repository {repo_id})"
    if isinstance(err, OfflineModeIsEnabled):
        msg = f"{where}: offline mode is on; unset HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE for the push"
    elif isinstance(err, HfHubHTTPError):
        status = err.response.status_code
        server = ((err.server_message or "").strip() or str(err).strip().splitlines()[0]).rstrip(".")
        msg = f"{where}: HTTP {status}: {server}"
        if status in (401, 403):
            msg += (f"; check that the token (the variable named by hub.token_env) is valid and has "
                    f"write access to {repo_id}")
        elif status == 404:
            msg += "; check hub.endpoint and hub.repo_id"
        elif status >= 500:
            msg += "; the server failed, try again later"
    elif isinstance(err, ValueError):
        msg = f"{where}: the server's answer was refused: {err}"
    else:
        msg = f"{where}: cannot reach the server: {err or type(err).__name__}; check hub.endpoint"
    return msg.replace(token, "***") if token else msg


def push_export(folder: Path, settings: PushSettings, experiment: str,
                commit_message: str | None = None) -> dict:
    """Push the export ``folder`` to the Hub repository ``settings.repo_id`` (``{exp}`` filled
    with ``experiment``) in one commit; ``settings`` come from :func:`hub_settings`.

    The card is checked first, so nothing is uploaded on error. Returns a receipt
    ``{"repo_id", "endpoint", "revision", "commit_url", "commit_oid", "files", "experiment"}``
    (no token). HTTP and network failures become an :class:`ExportError` naming the endpoint,
    the repository and the server's message.
    """
    import httpx2
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    folder = Path(folder)
    check_export(folder)
    repo_id, endpoint = settings.repo_id.replace("{exp}", experiment), settings.endpoint
    token, revision = settings.token, settings.revision or "main"
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise ExportError(f"config key 'hub.repo_id': {repo_id!r} is not a valid Hub repository "
                          f"id ({e})") from e
    if constants.is_offline_mode():
        raise ExportError(f"cannot push the export to {endpoint} (repository {repo_id}): Hugging "
                          f"Face offline mode is on; unset HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE")
    files = _files(folder)
    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(repo_id, repo_type="model", private=settings.private, exist_ok=True)
        if revision != constants.DEFAULT_REVISION:
            api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id, folder_path=folder, repo_type="model", revision=revision,
            commit_message=commit_message or f"cselab: export of experiment {experiment}",
            ignore_patterns=list(IGNORE_PATTERNS))
    except (OSError, ValueError, httpx2.HTTPError) as e:
        raise ExportError(_explain(e, endpoint, repo_id, token)) from e
    return {"repo_id": repo_id, "endpoint": endpoint, "revision": revision,
            "commit_url": info.commit_url, "commit_oid": info.oid, "files": files,
            "experiment": experiment}
