#!/usr/bin/python3
"""A FUSE filesystem that loses every write not made durable (the model of LazyFS).

It keeps two images of one tree in memory:
  - live: what processes see (every write, create, rename, unlink, mkdir ...);
  - durable: what a power cut would leave. Only these reach it:
      fsync/fdatasync(file)  that file's bytes and attributes (not its name);
      fsync(directory)       that directory's entries (the names in it; a child
                             that was never synced comes back empty, as a
                             journaled inode whose delayed data was lost);
      syncfs(2) / sync(2)    everything.
    This is ext4 read conservatively: a new file's name is not durable until its
    directory is synced, a rename is not durable until both directories are, and
    nothing becomes durable by itself with time.

FUSE does not forward syncfs(2) or sync(2) to its daemon, so a process on this
filesystem announces them: tests/fixtures/lazyfs_sync.c (LD_PRELOAD) calls the
real syncfs/sync and then sets the xattr "user.lazyfs.syncfs" on a directory of
this filesystem, which the daemon takes as the syncfs. fsync and fdatasync
reach the daemon as FUSE requests, from any process (SQLite, pip, python).

A crash is chosen when the filesystem is mounted:
  --crash-event K   after the K-th durability event (fsync, fdatasync, directory
                    fsync, syncfs, rename; counted from 1 in the order the
                    daemon sees them): the image is the durable one at that
                    instant; for a rename, the image is the durable one plus
                    every namespace change made so far (a journal commit of the
                    metadata) with no unsynced file bytes (delayed allocation).
  --crash-op N --seed S
                    before the N-th mutating operation: a torn image. With
                    probability 1/2 the namespace is the live one (the journal
                    committed), else the durable one; each file's bytes are the
                    live ones or the durable ones (or none), chosen at random.
The crash image is written to --image-out (pickle); from then on every request
fails with EIO (the machine is off), until the harness unmounts. --image-in
mounts a saved image as the durable and live tree (the reboot); --save-on-exit
writes the whole tree to --image-out at a clean unmount. --events FILE
gets one line per durability event ("K kind path opno"), and the last line
"total OPS EVENTS" at unmount, so a first run can list the crash points.

Run: /usr/bin/python3 lib_lazyfs.py MOUNTPOINT [options]  (foreground; unmount
with fusermount -u -z MOUNTPOINT). Needs python3-fusepy and fuse3 (/dev/fuse).
"""
import argparse
import errno
import os
import pickle
import random
import stat
import sys
import threading
import time

import fusepy
from fusepy import FUSE, FuseOSError, Operations

SYNC_XATTR = "user.lazyfs.syncfs"
ROOT = 1


class Node:
    __slots__ = ("ino", "kind", "mode", "uid", "gid", "mtime", "data", "entries", "target",
                 "nlink", "opens", "dirty")

    def __init__(self, ino, kind, mode, uid=0, gid=0):
        self.ino, self.kind, self.mode, self.uid, self.gid = ino, kind, mode & 0o7777, uid, gid
        self.mtime = time.time_ns()
        self.data = bytearray() if kind == "f" else None
        self.entries = {} if kind == "d" else None
        self.target = None
        self.nlink = 2 if kind == "d" else 1
        self.opens = 0
        self.dirty = True

    def snap(self, empty=False):
        """The durable record of this node (immutable but for the entries copy)."""
        if self.kind == "f":
            payload = b"" if empty else bytes(self.data)
        elif self.kind == "d":
            payload = {} if empty else dict(self.entries)
        else:
            payload = self.target
        return (self.kind, self.mode, self.uid, self.gid, self.mtime, payload)


def load_image(img):
    """{ino: record} -> {ino: Node}, keeping what is reachable from the root (fsck)."""
    nodes = {}
    todo = [ROOT]
    while todo:
        ino = todo.pop()
        if ino in nodes or ino not in img:
            continue
        kind, mode, uid, gid, mtime, payload = img[ino]
        n = Node(ino, kind, mode, uid, gid)
        n.mtime = mtime
        if kind == "f":
            n.data = bytearray(payload)
        elif kind == "d":
            n.entries = {k: v for k, v in payload.items() if v in img}
            todo.extend(n.entries.values())
        else:
            n.target = payload
        n.dirty = False
        nodes[ino] = n
    for n in nodes.values():
        if n.kind != "d":
            n.nlink = 0
    for n in nodes.values():
        if n.kind == "d":
            for c in n.entries.values():
                child = nodes[c]
                if child.kind == "d":
                    n.nlink += 1
                else:
                    child.nlink += 1
    return nodes


class LazyFS(Operations):
    use_ns = True

    def __init__(self, a):
        self._mu = threading.RLock()
        self.a = a
        self.rng = random.Random(a.seed)
        if a.image_in:
            with open(a.image_in, "rb") as f:
                img = pickle.load(f)
            self.live = load_image(img)
        else:
            root = Node(ROOT, "d", 0o755)
            self.live = {ROOT: root}
        self.durable = {ino: n.snap() for ino, n in self.live.items()}
        for n in self.live.values():
            n.dirty = False
        self.next_ino = max(self.live) + 1
        self.ops = 0
        self.events = 0
        self.crashed = False
        self.log = open(a.events, "a") if a.events else None

    # --- the model
    def _event(self, kind, path):
        self.events += 1
        if self.log:
            self.log.write(f"{self.events} {kind} {path} {self.ops}\n")
            self.log.flush()
        if self.a.crash_event == self.events:
            if kind == "rename":
                self._crash(self._torn(meta=True, keep=0.0))
            else:
                self._crash(dict(self.durable))

    def _mutating(self):
        self.ops += 1
        if self.a.crash_op == self.ops:
            self._crash(self._torn(meta=self.rng.random() < 0.5, keep=None))

    def _torn(self, meta, keep):
        """A crash between syncs: namespace live (meta) or durable; each file's bytes
        live, durable or none, at random (keep: the chance of live, None: random)."""
        def data(ino):
            n = self.live.get(ino)
            d = self.durable.get(ino)
            choice = self.rng.random()
            p = 0.5 if keep is None else keep
            if n is not None and n.kind == "f" and choice < p:
                return bytes(n.data)
            if d is not None and d[0] == "f":
                return d[5]
            if keep is None and n is not None and n.kind == "f" and choice < 0.75:
                return bytes(n.data[:len(n.data) // 2])  # torn: a prefix reached the disk
            return b""
        img = {}
        if meta:
            for ino, n in self.live.items():
                rec = n.snap(empty=True)
                if n.kind == "d":
                    rec = n.snap()
                elif n.kind == "f":
                    rec = rec[:5] + (data(ino),)
                img[ino] = rec
        else:
            for ino, rec in self.durable.items():
                if rec[0] == "f":
                    rec = rec[:5] + (data(ino),)
                img[ino] = rec
        return img

    def _crash(self, img):
        tmp = self.a.image_out + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(img, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.rename(tmp, self.a.image_out)
        self.crashed = True

    def _sync_node(self, n, entries):
        rec = n.snap()
        if n.kind == "d" and not entries:
            old = self.durable.get(n.ino)
            rec = rec[:5] + (dict(old[5]) if old else {},)
        self.durable[n.ino] = rec
        if n.kind == "d" and entries:
            for c in n.entries.values():
                if c not in self.durable:
                    self.durable[c] = self.live[c].snap(empty=True)

    def _syncfs(self):
        self.durable = {ino: (n.snap() if n.dirty or ino not in self.durable
                              else self.durable[ino])
                        for ino, n in self.live.items() if n.nlink > 0}
        for n in self.live.values():
            n.dirty = False

    # --- plumbing
    def __call__(self, op, path, *args):
        with self._mu:
            if self.crashed:
                raise FuseOSError(errno.EIO)
            try:
                return getattr(self, op)(path, *args)
            except FuseOSError as e:
                if os.environ.get("LAZYFS_DEBUG") and op not in ("getxattr", "getattr", "access"):
                    print(f"lazyfs: {op} {path}: {os.strerror(e.errno)}", file=sys.stderr)
                raise

    def _resolve(self, path):
        n = self.live[ROOT]
        for part in path.split("/"):
            if not part:
                continue
            if n.kind != "d":
                raise FuseOSError(errno.ENOTDIR)
            ino = n.entries.get(part)
            if ino is None:
                raise FuseOSError(errno.ENOENT)
            n = self.live[ino]
        return n

    def _parent(self, path):
        head, name = os.path.split(path.rstrip("/"))
        p = self._resolve(head or "/")
        if p.kind != "d":
            raise FuseOSError(errno.ENOTDIR)
        return p, name

    def _node(self, path, fh):
        if fh and fh in self.live:
            return self.live[fh]
        return self._resolve(path)

    def _new(self, path, kind, mode):
        self._mutating()
        p, name = self._parent(path)
        if name in p.entries:
            raise FuseOSError(errno.EEXIST)
        ctx = fusepy.fuse_get_context()
        n = Node(self.next_ino, kind, mode, ctx[0], ctx[1])
        self.next_ino += 1
        self.live[n.ino] = n
        p.entries[name] = n.ino
        p.dirty = True
        p.mtime = time.time_ns()
        if kind == "d":
            p.nlink += 1
        return n

    def _drop(self, n):
        if n.nlink <= 0 and n.opens <= 0:
            self.live.pop(n.ino, None)

    # --- operations
    def getattr(self, path, fh=None):
        n = self._node(path, fh)
        fmt = {"f": stat.S_IFREG, "d": stat.S_IFDIR, "l": stat.S_IFLNK}[n.kind]
        size = len(n.data) if n.kind == "f" else len(n.target) if n.kind == "l" else 4096
        return dict(st_mode=fmt | n.mode, st_ino=n.ino, st_nlink=max(n.nlink, 0),
                    st_uid=n.uid, st_gid=n.gid, st_size=size, st_atime=n.mtime,
                    st_mtime=n.mtime, st_ctime=n.mtime, st_blksize=4096,
                    st_blocks=(size + 511) // 512)

    def readdir(self, path, fh):
        n = self._resolve(path)
        return [".", ".."] + list(n.entries)

    def access(self, path, amode):
        self._resolve(path)
        return 0

    def mkdir(self, path, mode):
        self._new(path, "d", mode)
        return 0

    def create(self, path, mode, fi=None):
        n = self._new(path, "f", mode)
        n.opens += 1
        return n.ino

    def open(self, path, flags):
        n = self._resolve(path)
        n.opens += 1
        return n.ino

    def release(self, path, fh):
        n = self.live.get(fh)
        if n is not None:
            n.opens -= 1
            self._drop(n)
        return 0

    def flush(self, path, fh):
        return 0

    def read(self, path, size, offset, fh):
        n = self._node(path, fh)
        return bytes(n.data[offset:offset + size])

    def write(self, path, data, offset, fh):
        self._mutating()
        n = self._node(path, fh)
        if offset > len(n.data):
            n.data.extend(b"\0" * (offset - len(n.data)))
        n.data[offset:offset + len(data)] = data
        n.dirty = True
        n.mtime = time.time_ns()
        return len(data)

    def truncate(self, path, length, fh=None):
        self._mutating()
        n = self._node(path, fh)
        if length < len(n.data):
            del n.data[length:]
        else:
            n.data.extend(b"\0" * (length - len(n.data)))
        n.dirty = True
        n.mtime = time.time_ns()
        return 0

    def unlink(self, path):
        self._mutating()
        p, name = self._parent(path)
        ino = p.entries.get(name)
        if ino is None:
            raise FuseOSError(errno.ENOENT)
        n = self.live[ino]
        if n.kind == "d":
            raise FuseOSError(errno.EISDIR)
        del p.entries[name]
        p.dirty = True
        p.mtime = time.time_ns()
        n.nlink -= 1
        n.dirty = True
        self._drop(n)
        return 0

    def rmdir(self, path):
        self._mutating()
        p, name = self._parent(path)
        ino = p.entries.get(name)
        if ino is None:
            raise FuseOSError(errno.ENOENT)
        n = self.live[ino]
        if n.kind != "d":
            raise FuseOSError(errno.ENOTDIR)
        if n.entries:
            raise FuseOSError(errno.ENOTEMPTY)
        del p.entries[name]
        p.nlink -= 1
        p.dirty = True
        n.nlink = 0
        self._drop(n)
        return 0

    def rename(self, old, new):
        self._mutating()
        op, oname = self._parent(old)
        np, nname = self._parent(new)
        ino = op.entries.get(oname)
        if ino is None:
            raise FuseOSError(errno.ENOENT)
        n = self.live[ino]
        other = np.entries.get(nname)
        if other == ino:
            return 0
        if other is not None:
            o = self.live[other]
            if o.kind == "d":
                if n.kind != "d":
                    raise FuseOSError(errno.EISDIR)
                if o.entries:
                    raise FuseOSError(errno.ENOTEMPTY)
                np.nlink -= 1
                o.nlink = 0
            elif n.kind == "d":
                raise FuseOSError(errno.ENOTDIR)
            else:
                o.nlink -= 1
            self._drop(o)
        del op.entries[oname]
        np.entries[nname] = ino
        if n.kind == "d" and op is not np:
            op.nlink -= 1
            np.nlink += 1
        op.dirty = np.dirty = n.dirty = True
        op.mtime = np.mtime = time.time_ns()
        self._event("rename", new)
        return 0

    def link(self, target, source):
        self._mutating()
        n = self._resolve(source)
        if n.kind == "d":
            raise FuseOSError(errno.EPERM)
        p, name = self._parent(target)
        if name in p.entries:
            raise FuseOSError(errno.EEXIST)
        p.entries[name] = n.ino
        p.dirty = n.dirty = True
        n.nlink += 1
        return 0

    def symlink(self, target, source):
        n = self._new(target, "l", 0o777)
        n.target = source
        return 0

    def readlink(self, path):
        n = self._resolve(path)
        if n.kind != "l":
            raise FuseOSError(errno.EINVAL)
        return n.target

    def chmod(self, path, mode):
        self._mutating()
        n = self._resolve(path)
        n.mode = mode & 0o7777
        n.dirty = True
        return 0

    def chown(self, path, uid, gid):
        self._mutating()
        n = self._resolve(path)
        if uid != -1 and uid != 0xFFFFFFFF:
            n.uid = uid
        if gid != -1 and gid != 0xFFFFFFFF:
            n.gid = gid
        n.dirty = True
        return 0

    def utimens(self, path, times=None):
        self._mutating()
        n = self._resolve(path)
        n.mtime = times[1] if times else time.time_ns()
        n.dirty = True
        return 0

    def fsync(self, path, datasync, fh):
        n = self._node(path, fh)
        self._sync_node(n, entries=n.kind == "d")
        self._event("fdatasync" if datasync else "fsync", path)
        return 0

    def fsyncdir(self, path, datasync, fh):
        n = self._resolve(path)
        self._sync_node(n, entries=True)
        self._event("fsyncdir", path)
        return 0

    def setxattr(self, path, name, value, options, position=0):
        if name != SYNC_XATTR:
            raise FuseOSError(errno.ENOTSUP)
        self._syncfs()
        self._event("syncfs", path)
        return 0

    def getxattr(self, path, name, position=0):
        raise FuseOSError(errno.ENODATA)

    def listxattr(self, path):
        return []

    def removexattr(self, path, name):
        raise FuseOSError(errno.ENODATA)

    def statfs(self, path):
        used = sum(len(n.data) for n in self.live.values() if n.kind == "f") // 4096
        total = 4 << 20  # 16 GiB in 4 KiB blocks
        return dict(f_bsize=4096, f_frsize=4096, f_blocks=total, f_bfree=total - used,
                    f_bavail=total - used, f_files=1 << 20, f_ffree=(1 << 20) - len(self.live),
                    f_namemax=255)

    def destroy(self, path):
        if self.a.save_on_exit and not self.crashed:
            self._crash({ino: n.snap() for ino, n in self.live.items() if n.nlink > 0})
        if self.log:
            self.log.write(f"total {self.ops} {self.events}\n")
            self.log.close()
            self.log = None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mountpoint")
    ap.add_argument("--image-in")
    ap.add_argument("--image-out", default=os.devnull)
    ap.add_argument("--crash-event", type=int, default=0)
    ap.add_argument("--crash-op", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--events")
    ap.add_argument("--save-on-exit", action="store_true",
                    help="a clean unmount writes the whole tree to --image-out")
    a = ap.parse_args(argv)
    FUSE(LazyFS(a), a.mountpoint, foreground=True, nothreads=False, use_ino=True,
         default_permissions=True, allow_other=False, hard_remove=True, fsname="lazyfs")


if __name__ == "__main__":
    sys.exit(main())
