"""A backend for fsspec filesystems whose exclusive create is atomic:
:class:`ObjectStoreLogStore`.

Put-if-absent is ``open(path, "xb")``, which such a filesystem turns into its
own atomic create-if-absent (``O_EXCL`` on a POSIX file system, a conditional
put on an object store that implements ``xb`` that way). No scheme maps here
by default: it is the backend a new scheme's registry line names when its
fsspec filesystem is known to create exclusively and atomically.
"""

from __future__ import annotations

from raydelta.protocol.errors import FileAlreadyExistsError
from raydelta.storage.backends.fsspec_store import FsspecLogStore, filesystem_for
from raydelta.storage.storage_options import ParsedStorageOptions


def open_exclusive_create(uri: str, options: ParsedStorageOptions) -> ObjectStoreLogStore:
    """A registry entry for a scheme whose fsspec filesystem creates ``xb`` atomically."""
    fs, root = filesystem_for(uri, options)
    return ObjectStoreLogStore(fs, root)


class ObjectStoreLogStore(FsspecLogStore):
    """Exclusive create (``mode="xb"``) as put-if-absent."""

    def put_if_absent(self, name: str, data: bytes) -> None:
        path = self.path_of(name)
        try:
            with self.fs.open(path, "xb") as handle:
                handle.write(data)
        except FileExistsError:
            raise FileAlreadyExistsError(f"{name} already exists in {self.log_dir}") from None
