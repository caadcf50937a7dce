"""python3 Tests/Benchmarks/commit-pages.py TRACE COMMITS: the 4 KiB pages a run wrote to data.mdb per
commit, from `strace -f -y -e trace=pwrite64,writev,lseek,fdatasync -o TRACE ledger submit ...` (the bytes
each write to data.mdb returned, summed; a pwrite64 is a page not next to another, a writev a run of
adjacent pages). docs/benchmarks.md, "Storage format 3"."""
import re
import sys

PAGE = 4096
pages = pwrites = writevs = syncs = 0
for line in open(sys.argv[1]):
    if "data.mdb>" not in line:
        continue
    if m := re.search(r"pwrite64\(\d+<[^>]*data\.mdb>, .*, (\d+), (\d+)\) = (\d+)", line):
        pages += int(m.group(3)) // PAGE
        pwrites += 1
    elif m := re.search(r"writev\(\d+<[^>]*data\.mdb>, .*\) = (\d+)", line):
        pages += int(m.group(1)) // PAGE
        writevs += 1
    elif "fdatasync(" in line:
        syncs += 1
commits = int(sys.argv[2])
print(f"pages per commit {pages / commits:.0f}, pwrite64 per commit {pwrites / commits:.0f}, "
      f"writev per commit {writevs / commits:.0f}, fdatasync calls {syncs}")
