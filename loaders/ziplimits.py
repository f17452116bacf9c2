"""Zip bombs refused from the zip directory, before any member is inflated.

``.docx``, ``.xlsx`` and ``.pptx`` files are zip archives of XML parts. python-docx and python-pptx read
every part into memory and lxml then parses the main one; a 2 MB file whose part inflates to 2 GB
(zeros deflate about 1,030:1) cost the loader 4.5 GB of memory and a minute before lxml gave up. The
zip's central directory states each member's compressed and uncompressed size; :func:`check_zip` reads
only that directory and refuses the file when a member, the members together, a member's compression
ratio or their number is over its limit. The stated sizes are binding: Python's ``zipfile`` (which all
three libraries read through) never returns more than a member's stated size and fails its CRC check
when the data says otherwise, so a directory that understates a member does not get past the limits.
Members compressed with anything but deflate or nothing (bzip2, LZMA: never written by Office, and
inflated without a bound per read) and encrypted members are refused too.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass

from hopsearch.service.config.settings import (
    DEFAULT_ZIP_MAX_MEMBER_BYTES,
    DEFAULT_ZIP_MAX_MEMBERS,
    DEFAULT_ZIP_MAX_RATIO,
    DEFAULT_ZIP_MAX_TOTAL_BYTES,
    Settings,
)
from hopsearch.service.errors import InputError

#: The zip-based formats the loader reads.
ZIP_FORMATS = frozenset({".docx", ".xlsx", ".pptx"})
#: A member smaller than this is not held to the ratio (a small part cannot cost much, whatever it deflates to).
RATIO_GRACE_BYTES = 1024 * 1024
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}


@dataclass(frozen=True, slots=True)
class ZipLimits:
    """The limits of :func:`check_zip` (the ``zip_max_*`` settings)."""

    max_member_bytes: int = DEFAULT_ZIP_MAX_MEMBER_BYTES
    max_total_bytes: int = DEFAULT_ZIP_MAX_TOTAL_BYTES
    max_ratio: float = DEFAULT_ZIP_MAX_RATIO
    max_members: int = DEFAULT_ZIP_MAX_MEMBERS

    @classmethod
    def from_settings(cls, settings: Settings) -> ZipLimits:
        return cls(
            settings.zip_max_member_bytes,
            settings.zip_max_total_bytes,
            settings.zip_max_ratio,
            settings.zip_max_members,
        )


def _setting(name: str) -> str:
    return f"setting zip_{name}, HOPSEARCH_ZIP_{name.upper()}"


def check_zip(data: bytes, limits: ZipLimits, kind: str) -> None:
    """Raise :class:`InputError` unless ``data`` is a zip archive within ``limits``; nothing is inflated.

    ``kind`` names the format in the messages (``DOCX``); a message names the member, its size, the limit
    and the setting that holds it."""
    if data.startswith(_OLE_MAGIC):
        raise InputError(
            f"unreadable {kind}: an OLE compound file, not a zip archive "
            "(a password-protected Office file, or the old binary format under a new name)"
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()  # the central directory, parsed; no member is read
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as exc:
        raise InputError(f"unreadable {kind}: not a zip archive ({exc})") from exc
    refused = f"{kind} refused before extraction"
    if len(members) > limits.max_members:
        raise InputError(
            f"{refused}: {len(members):,} members, over the limit of {limits.max_members:,} ({_setting('max_members')})"
        )
    total = 0
    for info in members:
        if info.compress_type not in _METHODS:
            raise InputError(
                f"{refused}: member {info.filename!r} uses compression method {info.compress_type} "
                "(Office files use deflate or none)"
            )
        if info.flag_bits & 0x1:
            raise InputError(f"{refused}: member {info.filename!r} is encrypted")
        if info.file_size > limits.max_member_bytes:
            raise InputError(
                f"{refused}: member {info.filename!r} inflates to {info.file_size:,} bytes, over the limit "
                f"of {limits.max_member_bytes:,} ({_setting('max_member_bytes')})"
            )
        total += info.file_size
    if total > limits.max_total_bytes:
        largest = max(members, key=lambda info: info.file_size)
        raise InputError(
            f"{refused}: its {len(members):,} members inflate to {total:,} bytes in all, over the limit of "
            f"{limits.max_total_bytes:,} ({_setting('max_total_bytes')}); the largest, {largest.filename!r}, "
            f"to {largest.file_size:,}"
        )
    for info in members:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > RATIO_GRACE_BYTES and ratio > limits.max_ratio:
            raise InputError(
                f"{refused}: member {info.filename!r} inflates {ratio:,.0f}:1 ({info.compress_size:,} to "
                f"{info.file_size:,} bytes), over the limit of {limits.max_ratio:,.0f}:1 ({_setting('max_ratio')})"
            )
