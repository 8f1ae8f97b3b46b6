"""File storages that fail the way real disks and object stores do, for attachment tests.

Each is Django's FileSystemStorage (real files under the test's MEDIA_ROOT) with one fault
switched on by a class attribute, so STORAGES can name it by its dotted path.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any

from django.core.files.base import File
from django.core.files.storage import FileSystemStorage


class UnreadableStorage(FileSystemStorage):
    """`open()` raises OSError(EIO) while `failing` is set: a storage outage for a while."""

    failing = False

    def open(self, name: str, mode: str = "rb") -> File:
        if type(self).failing:
            raise OSError(errno.EIO, "Input/output error")
        return super().open(name, mode)


class FullDiskStorage(FileSystemStorage):
    """The disk fills up while a file is written: the first chunk reaches the file, then the
    write raises OSError(ENOSPC), as a real full disk leaves a partial file."""

    def _save(self, name: str, content: Any) -> str:
        chunks = content.chunks

        def filling(chunk_size: int | None = None) -> Iterator[bytes]:
            for number, chunk in enumerate(chunks(chunk_size)):
                if number:
                    raise OSError(errno.ENOSPC, "No space left on device")
                yield chunk

        content.chunks = filling
        return super()._save(name, content)


class UndeletableStorage(FileSystemStorage):
    """`delete()` raises OSError(EACCES): a file the site's user may no longer remove."""

    def delete(self, name: str) -> None:
        raise OSError(errno.EACCES, "Permission denied")
