"""ext4 forced read-only under a running store: what is acknowledged, what is lost.

Run as root where loop mounts work (not collected by pytest: it needs root,
losetup, mkfs.ext4 and e2fsck):

    .venv/bin/python tests/faults/erofs_run.py MODE ROUNDS

Each round: a fresh 256 MiB ext4 image mounted errors=remount-ro, a store on
it in a child process, one thread putting sequential keys; after TRIGGER_S
seconds the file system is failed (/sys/fs/ext4/<dev>/trigger_fs_error: ext4
turns itself read-only); the writer goes on until the store raises, then
tries POST more puts (none may be acknowledged); close, umount, e2fsck,
mount, reopen, and count the acknowledged keys lost and the raised ones
present. docs/limits.md ("A file system that turns read-only") has figures.
"""
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import warnings

MODE, ROUNDS = sys.argv[1], int(sys.argv[2])
IMG, MNT = f"/tmp/pagestore-erofs-img-{MODE}", f"/tmp/pagestore-erofs-mnt-{MODE}"
TRIGGER_S, POST, CAP_S = 3.0, 200, 20.0
OPTS = dict(memory_size=32 << 20, wal_segment_size=4 << 20, checkpoint_interval=2.0)


def sh(*a, check=True):
    return subprocess.run(a, check=check, capture_output=True, text=True)


def child(q, path, dev):
    import pagestore
    db = pagestore.open(path, wal_mode=MODE, **OPTS)
    raised, first_err, first_i, after, t_trig, i = [], None, None, 0, None, 0
    t0, trig_i = time.monotonic(), None
    while True:
        try:
            db.put(b"k%08d" % i, b"v" * 100)
            if first_i is not None:
                after += 1
        except pagestore.Error as e:
            raised.append(i)
            if first_i is None:
                first_i, first_err = i, f"{type(e).__name__}: {e}"[:160]
        except BaseException as e:
            q.put({"fatal": f"{type(e).__module__}.{type(e).__name__}: {e}"})
            return
        i += 1
        if trig_i is None and time.monotonic() - t0 >= TRIGGER_S:
            trig_i = i
            with open(f"/sys/fs/ext4/{dev}/trigger_fs_error", "w") as f:
                f.write("1")
            t_trig = time.monotonic()
        if first_i is not None and i >= first_i + POST:
            break
        if t_trig is not None and time.monotonic() - t_trig > CAP_S:
            break
    try:
        db.close()
        close = "ok"
    except pagestore.Error as e:
        close = type(e).__name__
    except BaseException as e:
        close = f"UNTYPED {type(e).__module__}.{type(e).__name__}"
    q.put({"written": i, "trigger_at": trig_i, "raised": raised, "first_error": first_err, "first_error_at": first_i,
           "acked_after_error": after, "close": close})


def main():
    import pagestore
    for r in range(ROUNDS):
        os.makedirs(MNT, exist_ok=True)
        sh("dd", "if=/dev/zero", f"of={IMG}", "bs=1M", "count=256", "status=none")
        sh("mkfs.ext4", "-q", "-F", IMG)
        sh("mount", "-o", "loop,errors=remount-ro", IMG, MNT)
        dev = os.path.basename(sh("findmnt", "-n", "-o", "SOURCE", MNT).stdout.strip())
        path = f"{MNT}/s"
        q = mp.Queue()
        p = mp.Process(target=child, args=(q, path, dev))
        p.start()
        p.join(180)
        res = q.get() if not q.empty() else {"fatal": f"child exit code {p.exitcode}"}
        sh("umount", MNT, check=False)
        fsck = sh("e2fsck", "-fy", IMG, check=False).returncode
        sh("mount", "-o", "loop", IMG, MNT)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                db = pagestore.open(path, wal_mode=MODE, **OPTS)
                present = set(k for k, _ in db.scan())
                db.close()
                reopen = "ok"
            except Exception as e:
                present, reopen = set(), f"{type(e).__name__}: {e}"[:160]
        sh("umount", MNT, check=False)
        if "written" in res and res["trigger_at"] is not None:
            raised = set(res.pop("raised"))
            acked = [j for j in range(res["written"]) if j not in raised]
            lost = [j for j in acked if b"k%08d" % j not in present]
            res.update(acked=len(acked), lost=len(lost),
                       lost_acked_before_trigger=sum(1 for j in lost if j < res["trigger_at"]),
                       first_lost=min(lost) if lost else None,
                       acked_after_trigger=sum(1 for j in acked if j >= res["trigger_at"]),
                       raised_n=len(raised),
                       raised_but_present=sum(1 for j in raised if b"k%08d" % j in present),
                       reopen=reopen, fsck_rc=fsck)
        print(json.dumps(dict(mode=MODE, round=r, **res)), flush=True)
    os.remove(IMG)


if __name__ == "__main__":
    main()
