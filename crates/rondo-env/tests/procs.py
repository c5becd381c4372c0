# Lists the processes of a container, one command line a line, sorted: all but pid 1 (the
# engine's init) and this lister's own ancestors (the command runner); zombies are dead
# already and left out.
import os


def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return rest[0], int(rest[1])


mine, pid = set(), os.getpid()
while pid > 0:
    mine.add(pid)
    try:
        pid = stat(pid)[1]
    except OSError:
        break
found = []
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == 1 or int(name) in mine:
        continue
    try:
        state, _ = stat(name)
        with open(f"/proc/{name}/cmdline", "rb") as f:
            line = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        continue
    if state != "Z":
        found.append(line)
print("\n".join(sorted(found)))
