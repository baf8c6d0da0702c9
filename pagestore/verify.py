"""`python -m pagestore verify`: check a store directory without modifying it.

Checks, in order (docs/tools.md): the page file header and every page's
checksum and page id; the checkpoint markers in cp/; the recovery files of
the last START (every record's CRC and decoding); the WAL from the last
complete checkpoint's pointer, read as recovery would read it but without
cutting anything; and, when no recovery is pending, the B+tree structure
(`Core.verify` over the page file opened read-only). Every problem is a
*fault* naming its file (and page id or offset); facts worth knowing that are
not damage (a pending recovery, a page past `page_count`) are *notes*.

A pending recovery (last START without END) is not a fault: the store opens
by restoring that checkpoint's pages from its recovery files, so pages that
fail their checksum but are in those files are notes, and the tree is not
checked (it is checked against the restored pages once the store has been
opened). The store's LOCK is never taken; a store open in another process is
reported, and its results describe files that may be changing.
"""

from __future__ import annotations

import posixpath

from pagestore.checkpoint.format import RecoveryFileCorrupt
from pagestore.diskio import layout
from pagestore.checkpoint.recovery_file import read_recovery_file

from .errors import CorruptionError, EncryptionError
from . import _native
from .tools import (ReadOnlyFile, ReadOnlyFS, ToolError, bad_pages, check_store_path, checkpoint_dir,
                    lock_holder, open_page, page_file, recovery_file_summary, scan_wal, wal_newest_fault,
                    wal_slots)

__all__ = ["verify"]


class _Result:
    def __init__(self, path: str):
        self.data = {"path": path, "ok": True, "state": None, "open_in_process": None,
                     "checks": [], "faults": [], "notes": []}

    def fault(self, check: str, message: str, file=None, offset=None, page=None) -> None:
        self.data["ok"] = False
        self.data["faults"].append({"check": check, "file": file, "offset": offset, "page": page,
                                    "message": message})

    def note(self, check: str, message: str) -> None:
        self.data["notes"].append({"check": check, "message": message})

    def check(self, name: str, status: str, summary: str, **details) -> None:
        self.data["checks"].append({"check": name, "status": status, "summary": summary, **details})


def verify(store: str, *, cipher=None) -> dict:
    """Run every check on `store`; returns the report (`ok` False on any fault).

    Raises ToolError for a path that is not a store, or an encrypted store
    without `cipher` (a `pagestore.cipher.Cipher`)."""
    check_store_path(store)
    r = _Result(store)
    pid = lock_holder(store)
    if pid is not None:
        r.data["open_in_process"] = pid
        r.note("store", f"the store is open in another process (pid {pid or 'unknown'}); files may "
                        "change while they are read")
    cpd = checkpoint_dir(store)
    cp = cpd["state"]
    entries = cpd["checkpoints"]
    interrupted, complete = cp.interrupted, cp.last_complete
    pf = page_file(store, cipher)
    if pf["looks_encrypted"]:
        raise ToolError(f"{pf['file']}: the store is encrypted; pass --key-file")
    if interrupted is not None:
        r.data["state"] = "needs recovery"
        r.note("markers", f"needs recovery: checkpoint {interrupted} has START without END; opening "
                          f"the store restores its pages and replays the WAL from its pointer")
    else:
        r.data["state"] = "consistent" if complete is not None else "no checkpoint"
    restore_ids = _check_cp(r, cpd, pf, cipher)
    _check_pages(r, pf, cipher, restore_ids, interrupted)
    _check_wal(r, store, entries, complete, interrupted, cipher)
    _check_tree(r, pf, cipher, interrupted)
    return r.data


def _check_cp(r: _Result, cpd: dict, pf: dict, cipher):
    """Markers and the last START's recovery files; returns the page ids a restore would write."""
    cp, entries = cpd["state"], cpd["checkpoints"]
    for err in cpd["marker_errors"]:
        r.fault("markers", err["message"], file=err["file"])
    for cid, e in entries.items():
        s, t = e["start"], e["end"]
        if s is not None and t is not None and s.wal_lsn != t.wal_lsn:
            r.fault("markers", f"checkpoint {cid}: END's wal_lsn {t.wal_lsn} differs from START's "
                               f"{s.wal_lsn}", file=posixpath.join(cpd["dir"], layout.marker_name(cid, "END")))
        if t is not None and s is None:
            r.note("markers", f"checkpoint {cid} has END without START (an older marker left behind)")
    lost = _meta_checkpoint_unknown(r, cpd, pf, cipher)
    nmark = len(cp.starts) + len(cp.ends)
    r.check("markers", "fault" if cpd["marker_errors"] or lost else "ok",
            f"{nmark} marker(s) in cp/, last START {cp.last_start}, last complete {cp.last_complete}"
            + (f", checkpoint {cp.interrupted} interrupted (START without END)" if cp.interrupted else ""))
    for cid in sorted(i for i in cp.recovery if cp.last_start is None or i > cp.last_start):
        r.note("recovery", f"recovery files of checkpoint {cid} have no START: recovery ignores them")
    last = cp.last_start
    start = entries[last]["start"] if last is not None else None
    if start is None:
        r.check("recovery", "skipped", "no START marker: no recovery files to check")
        return set()
    needed = last == cp.interrupted
    if start.recovery_data == "wal":
        r.check("recovery", "ok", f"checkpoint {last} keeps its recovery data in the WAL (page records)")
        return set()
    page_size = pf["page_size"]
    files = entries[last]["recovery_files"]
    ids, records, bad = set(), 0, 0
    for w in range(start.recovery_files):
        if w not in files:
            msg = f"recovery file {w} of checkpoint {last} is missing (START names {start.recovery_files})"
            if needed:
                r.fault("recovery", msg, file=posixpath.join(cpd["dir"], layout.recovery_file_name(last, w)))
                bad += 1
            else:
                r.note("recovery", msg + "; not needed, the checkpoint is complete")
    for w, path in files.items():
        if w >= start.recovery_files:
            r.fault("recovery", f"START of checkpoint {last} names only {start.recovery_files} files",
                    file=path)
            bad += 1
            continue
        ps = page_size or recovery_file_summary(path)["page_size"]
        try:
            for pid, _image in read_recovery_file(ReadOnlyFS(), path, checkpoint_id=last, writer=w,
                                                  page_size=ps, cipher=cipher):
                ids.add(pid)
                records += 1
        except (RecoveryFileCorrupt, EncryptionError, OSError) as e:
            bad += 1
            reason, offset = (e.reason, e.offset) if isinstance(e, RecoveryFileCorrupt) else (str(e), None)
            r.fault("recovery", reason + ("" if needed else " (checkpoint complete: not needed to open)"),
                    file=path, offset=offset)
    if needed and not bad and records != start.pages:
        r.fault("recovery", f"recovery files of checkpoint {last} hold {records} pages, START says "
                            f"{start.pages}", file=cpd["dir"])
        bad += 1
    r.check("recovery", "fault" if bad else "ok",
            f"checkpoint {last}: {len(files)} file(s), {records} record(s)"
            + (f", {bad} bad" if bad else ", every CRC holds" if records else "")
            + (" (needed: recovery restores these pages)" if needed else ""))
    if needed and bad:
        return None              # damaged files: which pages a restore would write is unknown
    return ids if needed else set()


def _meta_checkpoint_unknown(r: _Result, cpd: dict, pf: dict, cipher) -> bool:
    """pages.dat's meta page names the checkpoint that wrote it last; when cp/
    has no marker that recent (its files were removed), replaying from the
    older pointer would drop what that checkpoint made durable, and open
    refuses the store: a fault here too. A meta page that does not read back
    whole is `_check_pages`' fault, not this one."""
    if pf["info"] is None or pf["header_error"] or pf["pages_on_disk"] < 1:
        return False
    f = ReadOnlyFile(pf["file"])
    try:
        raw = f.pread(pf["page_size"], 0)
    finally:
        f.close()
    try:
        page = open_page(cipher, raw, 0, pf["file"])
    except EncryptionError:
        return False
    if not _native.check_page(page, 0):
        return False
    cp = cpd["state"]
    written_by = pf["info"]["checkpoint_id"]
    known = max((i for i in (cp.last_start, cp.last_complete) if i is not None), default=0)
    if written_by <= known:
        return False
    r.fault("markers", f"cp/ has no marker of checkpoint {written_by}, which wrote {pf['file']} (were "
                       f"files of cp/ removed?): open refuses the store, as replaying from checkpoint "
                       f"{known or 'none'} would lose acknowledged writes", file=cpd["dir"])
    return True


def _check_pages(r: _Result, pf: dict, cipher, restore_ids, interrupted) -> None:
    """Header and every page; `restore_ids` are the pages a pending restore writes back (None:
    unknown, the recovery files are damaged, so pages in use are not judged)."""
    if not pf["exists"]:
        r.fault("pages", "the page file is missing", file=pf["file"])
        r.check("pages", "fault", f"{layout.PAGE_FILE} missing")
        return
    if pf["info"] is None or pf["header_error"]:
        r.fault("pages", f"page file header: {pf['header_error']}", file=pf["file"], offset=0, page=0)
        r.check("pages", "fault", "page file header unreadable: pages not checked")
        return
    info, ps, n = pf["info"], pf["page_size"], pf["pages_on_disk"]
    unknown = restore_ids is None
    missing = [i for i in range(n, info["page_count"]) if not unknown and i not in restore_ids]
    if unknown and n < info["page_count"]:
        r.note("pages", f"the file holds {n} pages of page_count {info['page_count']}; the recovery "
                        "files are damaged, so which pages a restore would write is unknown")
    elif missing:
        r.fault("pages", f"the file holds {n} pages, the meta page says page_count {info['page_count']}"
                         + (f"; pages {_ranges(missing)} are in no recovery file" if restore_ids else ""),
                file=pf["file"], offset=pf["size"])
    elif n < info["page_count"]:
        r.note("pages", f"the file holds {n} pages of page_count {info['page_count']}; recovery writes "
                        f"the rest from checkpoint {interrupted}'s recovery files")
    faults = 0
    restored, unused = [], []
    for pid, offset, reason in bad_pages(pf, cipher):
        if unknown or pid in restore_ids:
            restored.append(pid)
        elif pid >= info["page_count"]:
            unused.append(pid)
        else:
            faults += 1
            r.fault("pages", f"page {pid}: {reason}",
                    file=pf["file"], offset=offset, page=pid)
    if restored:
        r.note("pages", f"{len(restored)} page(s) fail their checksum or page id "
                        + (f"but are in checkpoint {interrupted}'s recovery files, which recovery writes "
                           "back" if not unknown else "(not judged: the recovery files are damaged)")
                        + f": {_ranges(restored)}")
    if unused:
        r.note("pages", f"{len(unused)} page(s) past page_count {info['page_count']} fail their checksum "
                        f"or page id; they are not in use: {_ranges(unused)}")
    notes = len(restored) + len(unused)
    r.check("pages", "fault" if faults else "ok",
            f"{n} pages of {ps} bytes (page_count {info['page_count']}), "
            + (f"{faults} page(s) in use fail their checksum or page id" if faults else
               "every checksum and page id holds" if not notes else
               f"every page in use holds its checksum and page id ({notes} others noted)"),
            page_size=ps, pages=n, bad=faults)


def _ranges(ids) -> str:
    """"3, 5-9, 12" for sorted ids."""
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ", ".join(out)


def _check_wal(r: _Result, store: str, entries: dict, complete, interrupted, cipher=None) -> None:
    slots, seg_size, sizes = wal_slots(store)
    pointer = entries[complete]["start"].wal_lsn if complete is not None and entries[complete]["start"] else 0
    gone = wal_newest_fault(store, slots)      # a removed newest segment reads as a clean end
    if gone is not None:
        r.fault("wal", gone[1], file=gone[0])
    if not slots:
        if pointer:
            r.fault("wal", f"no WAL segment files, but checkpoint {complete} points at lsn {pointer}",
                    file=posixpath.join(store, layout.WAL_DIR))
        r.check("wal", "fault" if pointer or gone else "ok", "no WAL segments")
        return
    if seg_size is None:
        r.fault("wal", "segment headers disagree on segment_size: " + ", ".join(map(str, sizes))
                if sizes else "no WAL segment has a valid header", file=posixpath.join(store, layout.WAL_DIR))
        r.check("wal", "fault", "WAL segments unreadable")
        return
    w = scan_wal(slots, seg_size, pointer, cipher)
    bad = 1 if gone else 0
    for d in w["damage"]:
        bad += 1
        r.fault("wal", f"damage at offset {d['offset']} (lsn {d['lsn']}): {d['reason']}",
                file=d["file"], offset=d["offset"])
    for g in w["gaps"]:
        bad += 1
        r.fault("wal", f"gap: {g['reason']}", file=g["file"], offset=g["offset"])
    for s in w["off_chain"] if not w["torn_tail"] else ():
        bad += 1
        r.fault("wal", f"slot {s['slot']} (seq {s['seq']}) is not on the log's chain: recovery would set "
                       "it aside", file=s["file"], offset=0)
    if complete is not None and pointer:
        first = w["first"]
        if first is None and w["stop_lsn"] == pointer and w["end_at_stop"] and not (w["damage"] or w["gaps"]):
            # The checkpoint flushed the log up to its record, not through it:
            # a process stopped after END can leave the log ending at the
            # pointer, which is what recovery replays from. The whole END
            # trailer there is the writer's own end of the log: nothing after
            # it was written. (Zeroed or missing segments end the scan at the
            # pointer too, with no END: those stay faults.)
            r.note("wal", f"the log ends at checkpoint {complete}'s pointer lsn {pointer}: its CHECKPOINT "
                          "record was not yet written when the store stopped, and nothing after it was")
        elif first is None or first[0] != pointer or first[2] != complete:
            bad += 1
            r.fault("wal", f"no CHECKPOINT record of checkpoint {complete} at its pointer lsn {pointer}",
                    file=_where(slots, seg_size, pointer)[0], offset=pointer % seg_size)
    if interrupted is not None:
        target = entries[interrupted]["start"].wal_lsn if entries[interrupted]["start"] else 0
        if w["stop_lsn"] < target:
            bad += 1
            r.fault("wal", f"the WAL ends at lsn {w['stop_lsn']}, before interrupted checkpoint "
                           f"{interrupted}'s pointer {target}", file=_where(slots, seg_size, w["stop_lsn"])[0])
    file, off = _where(slots, seg_size, w["stop_lsn"])
    end = "damaged end" if w["damage"] else ("gap" if w["gaps"] else "clean end")
    if w["torn_tail"] and w["tail_bytes"]:
        # a crash's unfinished records, no acknowledged one among them (docs/wal-format.md)
        end = f"end after a crash ({w['tail_bytes']} bytes of unfinished records to cut)"
    r.check("wal", "fault" if bad else "ok",
            f"from lsn {pointer}: {w['records']} valid record(s), {end} at lsn {w['stop_lsn']} "
            f"({posixpath.basename(file) if file else 'no segment'} offset {off}); "
            f"{len(slots)} segment file(s) of {seg_size} bytes",
            from_lsn=pointer, stop_lsn=w["stop_lsn"], records=w["records"], stop_file=file,
            stop_offset=off, types=w["types"], clean=not (w["damage"] or w["gaps"]),
            tail_bytes=w["tail_bytes"])


def _where(slots, seg_size: int, lsn: int):
    seq = lsn // seg_size
    for s in slots:
        if s.seq == seq:
            return s.path, lsn - seq * seg_size
    return None, lsn - seq * seg_size


def _check_tree(r: _Result, pf: dict, cipher, interrupted) -> None:
    if interrupted is not None:
        r.check("tree", "skipped", "recovery pending: the tree is checked once the store has been opened")
        return
    if pf["info"] is None or pf["header_error"] or any(f["check"] == "pages" for f in r.data["faults"]):
        r.check("tree", "skipped", "page faults: the tree walk would stop at the first bad page")
        return
    try:
        v = tree_check(pf, cipher)
    except (CorruptionError, EncryptionError) as e:
        page = e.page
        if page is not None and f"page {page}" not in str(e):
            page = None          # the core's bad-page id is only meaningful when the message names it
        r.fault("tree", str(e), file=pf["file"], page=page,
                offset=None if page is None else page * pf["page_size"])
        r.check("tree", "fault", str(e))
        return
    r.check("tree", "ok", f"height {v['height']}, {v['keys']} keys, {v['leaf_pages']} leaf / "
                          f"{v['inner_pages']} inner / {v['overflow_pages']} overflow / "
                          f"{v['freelist_pages']} freelist pages, {v['free_ids']} free ids",
            **v)


# -- the B+tree ------------------------------------------------------------------------
def tree_check(pf: dict, cipher=None) -> dict:
    """`Core.verify()` over the page file opened read-only; raises CorruptionError (with .page)."""
    ps, path = pf["page_size"], pf["file"]
    f = ReadOnlyFile(path)

    def read_page(pid, buf):
        raw = f.pread(ps, pid * ps)
        if len(raw) != ps:
            raise CorruptionError(f"{path}: page {pid} is beyond the end of the file", path)
        buf[:] = open_page(cipher, raw, pid, path)
        if not _native.check_page(buf, pid):
            err = CorruptionError(f"{path}: page {pid} (offset {pid * ps}) failed its checksum "
                                  "or page-id check", path)
            err.page = pid
            raise err

    memory = max(64 * ps, min(pf["size"] + 64 * ps, 64 << 20))
    core = _native.Core(page_size=ps, memory_size=memory, checkpoint_buffer_size=0,
                        page_reserve=pf["info"]["page_reserve"], read_page=read_page)
    try:
        core.open_existing(pf["pages_on_disk"])
        return core.verify()
    finally:
        core.close()
        f.close()
