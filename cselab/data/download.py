"""Fetch a URL to disk, verified, and unpack archives once; every failure is one
:class:`DataError` naming the URL or file and the fix."""

from __future__ import annotations

import hashlib
import http.client
import re
import shutil
import stat
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cselab.errors import DataError
from cselab.io import atomic_path, drop_cache_entry, reason_of, sha256_file, unreadable_errors

_CHUNK = 1 << 20
_EXTRACT_MARKER = ".cselab_extracted"


def _manual_fix(source: str) -> str:
    """The generic fix :func:`fetch` suggests for ``source``."""
    return f"download {source} manually and use the local copy"


def with_fix(err: DataError, source: str, setting: str) -> DataError:
    """A copy of ``err`` whose generic manual-download fix names the config key to set
    (``setting``: ``key=value``, or a sentence starting with a verb)."""
    specific = f"download {source} manually and " + (f"pass {setting}" if "=" in setting else setting)
    msg = str(err)
    return DataError(msg.replace(_manual_fix(source), specific) if _manual_fix(source) in msg
                     else f"{msg} Or {specific}.")


def fetch(source: str, dest: Path, *, sha256: str | None = None, timeout: float = 60.0) -> dict:
    """Download ``source`` (``http(s)://`` or ``file://``) to ``dest`` and verify it.

    The body is streamed to a temporary file and renamed to ``dest`` only once complete and
    verified. If ``dest`` already exists and is sound (:func:`cached_download_problem`: not empty,
    ``sha256`` when given, an archive whose members read back) nothing is downloaded; a damaged
    one is removed with one warning naming it and downloaded again. Raises :class:`DataError` on an HTTP error or unreachable
    host, a body shorter than its Content-Length, an empty body, or a sha256 mismatch.

    Returns ``{"source", "path", "bytes", "sha256"}``.
    """
    dest = Path(dest)
    scheme = urllib.parse.urlsplit(source).scheme.lower()
    if scheme not in ("http", "https", "file"):
        raise DataError(
            f"Cannot fetch {source!r}: only http://, https:// and file:// URLs are supported; "
            "fix the URL or give a local path instead."
        )
    expected = sha256.lower() if sha256 else None

    if dest.is_file():
        digest = sha256_file(dest)
        problem = cached_download_problem(dest, digest, expected)
        if problem is None:
            return {"source": source, "path": str(dest), "bytes": dest.stat().st_size, "sha256": digest}
        drop_cache_entry(dest, "downloaded file", problem, f"downloading {source} again")

    manual = f"check the URL and your network, or {_manual_fix(source)}"
    h = hashlib.sha256()
    written = 0
    with atomic_path(dest) as part:
        try:
            with urllib.request.urlopen(source, timeout=timeout) as resp, open(part, "wb") as out:
                length = resp.headers.get("Content-Length")
                expected_len = int(length) if length and length.strip().isdigit() else None
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                    written += len(chunk)
        except urllib.error.HTTPError as e:
            raise DataError(f"Download of {source} failed: HTTP {e.code} {e.reason}; {manual}.") from e
        except urllib.error.URLError as e:
            raise DataError(f"Cannot reach {source}: {e.reason}; {manual}.") from e
        except (http.client.IncompleteRead, ConnectionError, TimeoutError) as e:
            raise DataError(f"Download of {source} was truncated or interrupted after {written} bytes ({e!r}); "
                            f"re-run, or {manual}.") from e
        except http.client.HTTPException as e:
            raise DataError(f"Download of {source} failed: {e!r}; {manual}.") from e
        if expected_len is not None and written < expected_len:
            raise DataError(f"Download of {source} was truncated: got {written} of {expected_len} bytes "
                            f"(Content-Length); re-run, or {manual}.")
        if written == 0:
            raise DataError(f"Download of {source} is empty (0 bytes); {manual}.")
        digest = h.hexdigest()
        if expected is not None and digest != expected:
            raise DataError(f"sha256 mismatch for {source}: expected {expected}, got {digest} "
                            f"(corrupt or changed file; the partial download was deleted); re-run, or {manual}.")
    return {"source": source, "path": str(dest), "bytes": written, "sha256": digest}


def cached_download_problem(path: Path, digest: str, expected: str | None) -> str | None:
    """Why a file downloaded before cannot be used again, or None: empty, another sha256 than
    pinned, or an archive (zip, tar) that does not read back whole: cut short, a bad CRC, garbage."""
    if path.stat().st_size == 0:
        return "empty"
    if expected is not None and digest != expected:
        return f"sha256 {digest[:16]}..., pinned {expected[:16]}..."
    name = path.name.lower()
    try:
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                bad = zf.testzip()
            return f"member {bad} has a bad CRC" if bad else None
        if name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")):
            with tarfile.open(path, "r:*") as tar:
                for member in tar:
                    if member.isfile():
                        with tar.extractfile(member) as fh:
                            while fh.read(_CHUNK):
                                pass
    except unreadable_errors() + (tarfile.TarError,) as e:
        return reason_of(e)
    return None


def url_basename(url: str) -> str:
    name = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    return name or "download"


def extract_once(archive: Path, archive_sha: str, extract_dir: Path,
                 extract: Callable[[Path, Path], None]) -> None:
    """Extract ``archive`` into ``extract_dir`` unless it already holds it (marker = its sha256).

    Extraction goes to a temporary folder renamed at the end, so an interrupted run leaves no
    half-extracted tree; a non-empty folder that cselab did not extract is never deleted.
    """
    marker = extract_dir / _EXTRACT_MARKER
    if marker.is_file() and marker.read_text().strip() == archive_sha:
        return
    if extract_dir.exists():
        if not marker.is_file() and any(extract_dir.iterdir()):
            raise DataError(f"{extract_dir} exists and was not extracted by cselab; delete it or choose "
                            "another extract directory, then re-run.")
        shutil.rmtree(extract_dir)
    with atomic_path(extract_dir) as tmp:
        tmp.mkdir()
        extract(archive, tmp)
        (tmp / _EXTRACT_MARKER).write_text(archive_sha + "\n")


@dataclass
class Source:
    """Where a dataset comes from: ``path`` (the local file or folder, used in place, or the
    downloaded file), ``source`` (what a manifest records: that path or the URL) and ``archive``
    (``{"path", "bytes", "sha256"}`` of a download, else None)."""

    path: Path
    source: str
    archive: dict | None = None


def local_or_download(what: str, setting: str, *, path: str | Path | None, url: str | None, download_dir: Path,
                      dest_name: str | None = None, sha256: str | None = None, local_kind: str = "file",
                      local_fix: str | None = None) -> Source:
    """The one "local path or download" rule of every data source: ``path`` (``setting``.path, a
    ``local_kind`` "file" or "dir") wins and is used in place, never copied; otherwise ``url``
    (``setting``.url) is fetched into ``download_dir`` (as ``dest_name``, default the URL's file
    name; pinned by ``sha256``). Every failure is one :class:`DataError` naming the setting."""
    if path:
        local = Path(path).expanduser().resolve()
        if not (local.is_dir() if local_kind == "dir" else local.is_file()):
            raise DataError(f"{what} {local} does not exist ({setting}.path); fix {setting}.path or unset it to "
                            f"download {setting}.url.")
        return Source(local, str(local))
    if url:
        try:
            got = fetch(url, Path(download_dir) / (dest_name or url_basename(url)), sha256=sha256)
        except DataError as e:
            raise with_fix(e, url, local_fix or f"{setting}.path=/path/to/a/local/copy") from e
        return Source(Path(got["path"]), url, {"path": got["path"], "bytes": got["bytes"], "sha256": got["sha256"]})
    raise DataError(f"No {what} given: set {setting}.url or {setting}.path.")


_EXTRACT_FIX = "delete it and re-run to download it again, or set the local path to an unpacked copy"
_DRIVE = re.compile(r"^[A-Za-z]:")


def _member_parts(archive: Path, name: str, is_link: bool) -> list[str]:
    """A member's path parts, or a DataError for an absolute, ``..``, drive-letter or link member."""
    parts = [p for p in re.split(r"[\\/]", name) if p]
    if name.startswith(("/", "\\")) or _DRIVE.match(name) or ".." in parts or not parts:
        raise DataError(f"{archive} contains an unsafe member {name!r} (absolute path or '..'); refusing to extract "
                        f"it. Delete {archive} and re-download it from a trusted source.")
    if is_link:
        raise DataError(f"{archive} contains a link or special file {name!r}; refusing to extract it. "
                        f"Delete {archive} and re-download it from a trusted source.")
    return parts


def _extract_zip(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        targets = [dest.joinpath(*_member_parts(archive, i.filename, stat.S_ISLNK(i.external_attr >> 16)))
                   for i in infos]
        for info, target in zip(infos, targets):
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)


def _extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            _member_parts(archive, m.name, m.issym() or m.islnk() or not (m.isfile() or m.isdir()))
        for m in members:
            tar.extract(m, dest, filter="data")


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a zip or tar ``archive`` into ``dest``, refusing absolute, ``..``, drive-letter,
    link and special members (before writing anything); a corrupt or truncated archive (bad
    header, bad CRC) and a full disk are each one :class:`DataError`."""
    archive, dest = Path(archive), Path(dest)
    kind = "zip" if archive.suffix.lower() == ".zip" or zipfile.is_zipfile(archive) else "tar"
    try:
        (_extract_zip if kind == "zip" else _extract_tar)(archive, dest)
    except DataError:
        raise
    except (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, NotImplementedError) as e:
        reason = " ".join(str(e).split())  # one line (tarfile lists every method it tried)
        raise DataError(f"{archive} is corrupt or not a {kind} archive ({reason}); {_EXTRACT_FIX}.") from e
    except OSError as e:
        raise DataError(f"Cannot extract {archive} into {dest}: {e}; free disk space or fix permissions, "
                        "then re-run.") from e
