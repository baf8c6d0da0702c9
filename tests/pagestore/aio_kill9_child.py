"""Child of the asyncio kill -9 loop: tasks in one event loop write durably
and acknowledge each put on stdout only after its await returned.

argv: store_dir wal_mode round tasks sync(0|1) [wal_direct(0|1)]
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pagestore  # noqa: E402


def value_for(key: bytes) -> bytes:
    return key * (1 + len(key) % 5)


async def main():
    path, mode, rnd, ntasks, sync = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
    direct = sys.argv[6:7] == ["1"]
    out = sys.stdout.fileno()
    async with pagestore.aio.open(path, wal_mode=mode, memory_size=16 << 20, wal_segment_size=4 << 20,
                                  checkpoint_interval=0.2, wal_direct=direct) as db:
        os.write(out, b"READY\n")

        async def task(t):
            i = 0
            while True:
                k = b"r%d-t%d-%d" % (rnd, t, i)
                await db.put(k, value_for(k), sync=sync)
                os.write(out, k + b"\n")
                i += 1

        await asyncio.gather(*(task(t) for t in range(ntasks)))


if __name__ == "__main__":
    asyncio.run(main())
