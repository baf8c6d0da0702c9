"""`python -m pagestore verify|inspect|backup|compact`: the tools a user runs on a store.

`verify` checks a store without modifying it and exits 0 when everything
holds, 1 on any fault (each printed with its file and page or offset), 2 on
a usage error. `inspect` prints what is on disk: checkpoints and their
markers, the WAL's segments and range, recovery files, page counts, the WAL
archive and the options the files record. Neither takes the store's LOCK,
runs recovery or cuts the WAL. `backup SRC DEST` opens SRC read-only and
writes a consistent copy to DEST (`Database.backup`); `compact PATH` opens the
store and shrinks it (`Database.compact`); both exit 0 on success, 1 when the
store refused (the error is printed), 2 on a usage error. docs/tools.md shows
them all with example output.
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import sys

from pagestore.diskio import layout
from pagestore.wal.recseal import is_record_sealed

from .tools import (ReadOnlyFS, SegmentView, ToolError, check_store_path, checkpoint_dir, free_pages, lock_holder,
                    page_file, recovery_file_summary, scan_wal, walk_segment, wal_slots)



def _cipher(key_file):
    if key_file is None:
        return None
    from .cipher import Cipher
    if not os.path.isfile(key_file):
        raise ToolError(f"--key-file {key_file}: no such file")
    return Cipher.from_option(key_file)


# -- inspect ---------------------------------------------------------------------------
def inspect_store(store: str, *, archive=None, cipher=None) -> dict:
    """Everything `inspect` reports, as a JSON-ready dict."""
    check_store_path(store)
    out = {"path": store, "open_in_process": lock_holder(store)}
    pf = page_file(store, cipher)
    pages = {"file": pf["file"], "exists": pf["exists"], "bytes": pf["size"],
             "pages_on_disk": pf["pages_on_disk"], "header_error": pf["header_error"],
             "encrypted": bool(cipher) or pf["looks_encrypted"]}
    if pf["info"] is not None:
        info = pf["info"]
        pages.update(page_count=info["page_count"], root=info["root"], height=info["height"],
                     keys=info["key_count"], freelist_head=info["freelist_head"],
                     meta_checkpoint_id=info["checkpoint_id"], format_version=info["format_version"])
        fl = free_pages(pf, cipher) if info["freelist_head"] else (0, 0)
        pages["freelist_pages"], pages["free_pages"] = fl if fl else (None, None)
    out["pages"] = pages
    cpd = checkpoint_dir(store)
    cp = cpd["state"]
    cps = []
    for cid, e in cpd["checkpoints"].items():
        m = e["start"] or e["end"]
        cps.append({"id": cid, "start": cid in cp.starts, "end": cid in cp.ends,
                    "wal_lsn": m.wal_lsn if m else None, "prev_wal_lsn": m.prev_wal_lsn if m else None,
                    "pages": m.pages if m else None, "recovery_files_named": m.recovery_files if m else None,
                    "recovery_data": m.recovery_data if m else None,
                    "recovery_files_present": len(e["recovery_files"])})
    out["checkpoints"] = cps
    out["last_start"], out["last_complete"], out["interrupted"] = cp.last_start, cp.last_complete, cp.interrupted
    out["state"] = ("needs recovery" if cp.interrupted is not None else
                    "consistent" if cp.last_complete is not None else "no checkpoint")
    out["marker_errors"] = cpd["marker_errors"]
    out["recovery_files"] = [dict(recovery_file_summary(p), checkpoint_id=cid, writer=w)
                             for cid, e in cpd["checkpoints"].items() for w, p in e["recovery_files"].items()]
    out["cp_other_files"] = cpd["other_files"]
    out["wal"] = _inspect_wal(store, cpd, cipher)
    if pf["looks_encrypted"]:
        pages["header_error"] = "page 0 is sealed (encrypted store): pass --key-file to read the meta page"
    out["options"] = {"page_size": pf["page_size"] or next((f["page_size"] for f in out["recovery_files"]
                                                            if f["page_size"]), None),
                      "page_reserve": pf["info"]["page_reserve"] if pf["info"] else None,
                      "wal_segment_size": out["wal"]["segment_size"],
                      "recovery_data": next((c["recovery_data"] for c in reversed(cps) if c["recovery_data"]), None),
                      "recovery_compression": next((f["codec"] for f in reversed(out["recovery_files"])
                                                    if f["codec"]), None),
                      "encrypted": pages["encrypted"]}
    out["archive"] = _inspect_archive(archive or os.path.join(store, layout.ARCHIVE_DIR),
                                      explicit=archive is not None)
    return out


def _inspect_wal(store: str, cpd: dict, cipher=None) -> dict:
    slots, seg_size, sizes = wal_slots(store)
    d = os.path.join(store, layout.WAL_DIR)
    res = {"dir": d, "segment_size": seg_size, "segment_sizes_seen": sizes, "segments": [],
           "other_files": [n for n in (sorted(os.listdir(d)) if os.path.isdir(d) else [])
                           if layout.parse_slot(n) is None]}
    if seg_size is None:
        res["segments"] = [{"slot": s.number, "file": s.path, "bytes": s.size,
                            "state": "blank" if s.blank else "invalid header"} for s in slots]
        return res
    view = SegmentView(slots, seg_size, cipher)
    sealed = 0
    try:
        for s in slots:
            if s.header is None:
                res["segments"].append({"slot": s.number, "file": s.path, "bytes": s.size,
                                        "state": "blank" if s.blank else "invalid header"})
            elif cipher is None and is_record_sealed(s.header):
                # without the key a record's payload cannot be told from damage
                sealed += 1
                res["segments"].append({"slot": s.number, "file": s.path, "bytes": s.size,
                                        "seq": s.seq, "state": "sealed"})
            else:
                res["segments"].append(dict(walk_segment(view, s), state="segment"))
    finally:
        view.close()
    if sealed:                  # the replay scan would read sealed records: no range without the key
        res["sealed_segments"] = sealed
        return res
    cp = cpd["state"]
    complete = cp.last_complete
    start = cpd["checkpoints"][complete]["start"] if complete is not None else None
    pointer = start.wal_lsn if start is not None else 0
    w = scan_wal(slots, seg_size, pointer, cipher)
    chain = {c["seq"] for c in w["chain"]}
    for seg in res["segments"]:
        if seg["state"] == "segment":
            seg["role"] = ("replay" if seg["seq"] in chain else
                           "reusable" if seg["seq"] < pointer // seg_size else "off chain")
    res["replay"] = {"from_lsn": pointer, "checkpoint_id": complete, "records": w["records"],
                     "stop_lsn": w["stop_lsn"], "chain_seqs": [c["seq"] for c in w["chain"]],
                     "clean": not (w["damage"] or w["gaps"] or w["off_chain"])}
    return res


def _inspect_archive(d: str, explicit: bool) -> dict | None:
    """Plain (`seg-<seq>.wal`) and compacted (`seg-<first seq>.walc`) copies in the WAL archive."""
    if not os.path.isdir(d):
        if explicit:
            raise ToolError(f"--archive {d}: no such directory")
        return None
    try:
        from pagestore.wal.compact import list_archive
        listed = list_archive(ReadOnlyFS(), d)
    except ImportError:                 # an archive without compaction: plain copies only
        listed = [(p[0], p[0], "wal", posixpath.join(d, n)) for n in sorted(os.listdir(d))
                  if (p := layout.parse_archive_name(n)) and p[1] == "wal"]
    copies = [{"file": p, "kind": kind, "first_seq": first, "last_seq": last, "bytes": os.path.getsize(p)}
              for first, last, kind, p in listed]
    return {"dir": d, "copies": len(copies), "bytes": sum(c["bytes"] for c in copies),
            "compacted": sum(c["kind"] == "walc" for c in copies),
            "first_seq": min((c["first_seq"] for c in copies), default=None),
            "last_seq": max((c["last_seq"] for c in copies), default=None), "files": copies}


# -- text output -----------------------------------------------------------------------
def _print_verify(rep: dict, out) -> None:
    w = out.write
    w(f"pagestore verify {rep['path']}\n")
    held = rep["open_in_process"]
    w(f"  {'store':<9} state: {rep['state']}; " +
      (f"open in another process (pid {held or 'unknown'})\n" if held is not None else "not open\n"))
    for c in rep["checks"]:
        w(f"  {c['check']:<9} {c['status'].upper():<7} {c['summary']}\n")
    for n in rep["notes"]:
        w(f"  note      [{n['check']}] {n['message']}\n")
    for f in rep["faults"]:
        where = f["file"] or ""
        if f["page"] is not None:
            where += f" page {f['page']}"
        if f["offset"] is not None:
            where += f" offset {f['offset']}"
        w(f"FAULT [{f['check']}] {where}: {f['message']}\n")
    n = len(rep["faults"])
    w("result: OK\n" if rep["ok"] else f"result: {n} FAULT{'S' if n != 1 else ''}\n")


def _print_inspect(rep: dict, out) -> None:
    w = out.write
    w(f"pagestore inspect {rep['path']}\n")
    held = rep["open_in_process"]
    w(f"store        {'open in process ' + str(held or 'unknown') if held is not None else 'not open'}; "
      f"state: {rep['state']}\n")
    o = rep["options"]
    w(f"options      page_size {o['page_size']}, page_reserve {o['page_reserve']}, wal_segment_size "
      f"{o['wal_segment_size']}, recovery_data {o['recovery_data']}, recovery codec "
      f"{o['recovery_compression']}, encrypted {o['encrypted']}\n")
    p = rep["pages"]
    if p.get("page_count") is not None:
        w(f"pages        {p['file']}: {p['bytes']} bytes, {p['pages_on_disk']} pages on disk, page_count "
          f"{p['page_count']}, free {p['free_pages']} (in {p['freelist_pages']} freelist pages), root "
          f"{p['root']}, height {p['height']}, {p['keys']} keys, meta written by checkpoint "
          f"{p['meta_checkpoint_id']}\n")
    else:
        w(f"pages        {p['file']}: {'missing' if not p['exists'] else p['header_error']}\n")
    w(f"checkpoints  last START {rep['last_start']}, last complete {rep['last_complete']}"
      + (f", INTERRUPTED {rep['interrupted']} (needs recovery)" if rep["interrupted"] is not None else "") + "\n")
    w("    id  START  END  wal_lsn       prev_wal_lsn  pages     files  data\n")
    for c in rep["checkpoints"]:
        w(f"  {c['id']:>4}  {'yes' if c['start'] else '-':<5}  {'yes' if c['end'] else '-':<3}  "
          f"{_s(c['wal_lsn']):<12}  {_s(c['prev_wal_lsn']):<12}  {_s(c['pages']):<8}  "
          f"{c['recovery_files_present']}/{_s(c['recovery_files_named'])}    {_s(c['recovery_data'])}\n")
    for e in rep["marker_errors"]:
        w(f"  bad marker {e['file']}: {e['message']}\n")
    w(f"recovery     {len(rep['recovery_files'])} file(s)\n")
    for f in rep["recovery_files"]:
        w(f"  {posixpath.basename(f['file'])}  {f['size']} bytes  {f['records']} records  codec {f['codec']}"
          + ("  encrypted" if f["encrypted"] else "") + (f"  ERROR {f['error']}" if f["error"] else "") + "\n")
    if rep["cp_other_files"]:
        w(f"  other files in cp/: {', '.join(rep['cp_other_files'])}\n")
    wal = rep["wal"]
    w(f"wal          {wal['dir']}: {len(wal['segments'])} slot file(s), segment_size {wal['segment_size']}\n")
    w("  slot  seq     first_lsn     last_lsn      end_lsn       records   bytes      role\n")
    for s in wal["segments"]:
        if s["state"] == "sealed":
            w(f"  {s['slot']:>4}  {s['seq']:<6}  (records sealed)  {s['bytes']} bytes\n")
            continue
        if s["state"] != "segment":
            w(f"  {s['slot']:>4}  ({s['state']})  {s['bytes']} bytes\n")
            continue
        w(f"  {s['slot']:>4}  {s['seq']:<6}  {_s(s['first_lsn']):<12}  {_s(s['last_lsn']):<12}  "
          f"{_s(s['end_lsn']):<12}  {s['records']:<8}  {s['bytes']:<9}  {s.get('role', '-')}\n")
    if wal.get("sealed_segments"):
        w(f"  the records of {wal['sealed_segments']} segment(s) are sealed (encrypted store): "
          "pass --key-file to read them and the replay range\n")
    r = wal.get("replay")
    if r:
        w(f"  replay from lsn {r['from_lsn']} (checkpoint {r['checkpoint_id']}): {r['records']} records over "
          f"seq {r['chain_seqs']}, log ends at lsn {r['stop_lsn']}"
          + (" (clean)" if r["clean"] else " (damage or gap: run verify)") + "\n")
    if wal["other_files"]:
        w(f"  other files in wal/: {', '.join(wal['other_files'])}\n")
    a = rep["archive"]
    w("archive      " + (f"{a['dir']}: {a['copies']} file(s) ({a['compacted']} compacted), {a['bytes']} "
                         f"bytes, segments {a['first_seq']}..{a['last_seq']}\n" if a else
                         "none found (pass --archive DIR)\n"))


def _s(v) -> str:
    return "-" if v is None else str(v)


# -- command line ------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pagestore",
                                 description="Tools for a pagestore store directory. verify and inspect "
                                             "only read it; backup writes a copy to a new directory; "
                                             "compact rewrites the store.")
    sub = ap.add_subparsers(dest="command", metavar="{verify,inspect,backup,compact}")
    sub.required = True
    v = sub.add_parser("verify", help="check pages, markers, recovery files, WAL and tree",
                       description="Check a store without modifying it: page file header, every page's "
                                   "checksum and page id, checkpoint markers, the last START's recovery "
                                   "files, the WAL from the last complete checkpoint, and the B+tree. "
                                   "Exit status: 0 everything holds, 1 a fault was found, 2 usage error.")
    i = sub.add_parser("inspect", help="show checkpoints, WAL range, recovery files, page counts",
                       description="Show what a store holds on disk: checkpoints and markers with their "
                                   "WAL pointers, WAL segments and range, recovery files, page counts, "
                                   "the WAL archive and the options recorded in the files.")
    for p in (v, i):
        p.add_argument("path", metavar="PATH", help="the store directory")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        p.add_argument("--key-file", metavar="FILE", help="key file of an encrypted store")
    i.add_argument("--archive", metavar="DIR", help="WAL archive directory (default: PATH/archive if present)")
    b = sub.add_parser("backup", help="copy a store, consistent as of one moment, to a new directory",
                       description="Open SRC read-only (it must not be open for writing elsewhere: from "
                                   "the process that has it open, call db.backup(dest)) and write a "
                                   "consistent copy to DEST, a new or empty directory.")
    b.add_argument("path", metavar="SRC", help="the store directory")
    b.add_argument("dest", metavar="DEST", help="where the copy goes (missing or empty)")
    c = sub.add_parser("compact", help="rewrite a store densely and give free space back",
                       description="Open the store, rewrite it densely (db.compact()) and close it.")
    c.add_argument("path", metavar="PATH", help="the store directory")
    for p in (b, c):
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        p.add_argument("--key-file", metavar="FILE", help="key file of an encrypted store")
    return ap


def _operate(args, cipher) -> dict:
    """backup / compact: open the store with the options its files record."""
    import pagestore
    check_store_path(args.path)
    slots, seg_size, _ = wal_slots(args.path)
    options = {"encryption_key": args.key_file} if cipher is not None else {}
    page_size = page_file(args.path, cipher)["page_size"]
    if page_size:
        options["page_size"] = page_size
    if seg_size:
        options["wal_segment_size"] = seg_size
    with pagestore.open(args.path, create=False, read_only=args.command == "backup", **options) as db:
        return db.backup(args.dest) if args.command == "backup" else db.compact()


def main(argv=None) -> int:
    """`python -m pagestore verify|inspect|backup|compact ...`; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        cipher = _cipher(args.key_file)
        if args.command == "verify":
            from .verify import verify
            rep = verify(args.path, cipher=cipher)
            status = 0 if rep["ok"] else 1
        elif args.command in ("backup", "compact"):
            from .errors import Error
            try:
                rep, status = _operate(args, cipher), 0
            except Error as e:
                print(f"python -m pagestore {args.command}: {e}", file=sys.stderr)
                return 1
        else:
            rep = inspect_store(args.path, archive=args.archive, cipher=cipher)
            status = 0
    except ToolError as e:
        print(f"python -m pagestore {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:        # a store file the tool could not read: typed, named, no traceback
        from .faults import translate
        print(f"python -m pagestore {translate(e, args.command)}", file=sys.stderr)
        return 1
    try:
        if args.json:
            json.dump(rep, sys.stdout, indent=2, default=str)
            sys.stdout.write("\n")
        elif args.command == "verify":
            _print_verify(rep, sys.stdout)
        elif args.command in ("backup", "compact"):
            sys.stdout.write("".join(f"{k:<22} {v:.2f}\n" if isinstance(v, float) else f"{k:<22} {v}\n"
                                     for k, v in rep.items()))
        else:
            _print_inspect(rep, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:                   # `| head`: the reader left; keep the exit status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return status


if __name__ == "__main__":
    sys.exit(main())
