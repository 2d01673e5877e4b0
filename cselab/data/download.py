"""Fetch a URL to disk, verified, and unpack archives once; every failure is one
:class:`DataError` naming the URL or file and the fix."""

from __future__ import annotations

import hashlib
import http.client
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

from cselab.errors import DataError
from cselab.io import atomic_path, sha256_file

_CHUNK = 1 << 20
_EXTRACT_MARKER = ".cselab_extracted"


def _manual_fix(source: str) -> str:
    """The generic fix :func:`fetch` suggests for ``source``."""
    return f"download {source} manually and use the local copy"


def with_fix(err: DataError, source: str, setting: str) -> DataError:
    """A copy of ``err`` whose generic manual-download fix names the config key to set."""
    specific = f"download {source} manually and pass {setting}"
    msg = str(err)
    return DataError(msg.replace(_manual_fix(source), specific) if _manual_fix(source) in msg
                     else f"{msg} Or {specific}.")


def fetch(source: str, dest: Path, *, sha256: str | None = None, timeout: float = 60.0) -> dict:
    """Download ``source`` (``http(s)://`` or ``file://``) to ``dest`` and verify it.

    The body is streamed to a temporary file and renamed to ``dest`` only once complete and
    verified. If ``dest`` already exists and matches ``sha256`` (or, without ``sha256``, is
    non-empty) nothing is downloaded. Raises :class:`DataError` on an HTTP error or unreachable
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

    if dest.is_file() and dest.stat().st_size > 0:
        digest = sha256_file(dest)
        if expected is None or digest == expected:
            return {"source": source, "path": str(dest), "bytes": dest.stat().st_size, "sha256": digest}
        # Stale or corrupt copy: download again.

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
