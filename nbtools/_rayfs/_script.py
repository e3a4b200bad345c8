"""What a read job runs on the cluster (``python -c``): one pass over the operations, the answers and what was read
ahead printed between two marker lines. Only the standard library of whatever Python the image has (no nbtools
there), so it is kept as text and never imported there."""

__all__ = ["SCRIPT"]

SCRIPT = r'''
import base64, json, os, shutil, stat, sys, zlib
def st(p, name=None):
    s = os.stat(p); l = os.lstat(p)
    return {"name": name or p, "size": s.st_size, "type": "directory" if stat.S_ISDIR(s.st_mode) else "file",
            "mtime": s.st_mtime, "ino": s.st_ino, "islink": stat.S_ISLNK(l.st_mode)}
def sts(paths):
    out = []
    for q in paths:
        try:
            out.append(st(q))
        except FileNotFoundError:
            pass
    return out
LEVELS = 5  # a stat or listing reads this many directory levels (the one asked, and those below) ahead
AHEAD, FILES, STATS = {}, {}, {}
LEFT = {"dirs": 64, "entries": 2000, "bytes": 1 << 20}  # what read-ahead may still add (running totals)
def listing(p):
    return sts(os.path.join(p, n) for n in sorted(os.listdir(p)))
def small(items):
    for d in items:
        if d["type"] == "file" and d["size"] <= 65536 and LEFT["bytes"] > 0 and d["name"] not in FILES:
            try:
                with open(d["name"], "rb") as f:
                    data = f.read(65537)
                if len(data) <= 65536:  # grown since its stat: a prefix would look like the whole file
                    FILES[d["name"]] = base64.b64encode(data).decode()
                    LEFT["bytes"] -= len(FILES[d["name"]])
            except OSError:
                pass
def ahead(items, levels):
    small(items)
    for _ in range(levels):
        found = []
        for d in items:
            if d["type"] == "directory" and d["name"] not in AHEAD and LEFT["dirs"] > 0 and LEFT["entries"] > 0:
                try:
                    AHEAD[d["name"]] = kids = listing(d["name"])
                    LEFT["dirs"] -= 1
                    LEFT["entries"] -= len(kids)
                    small(kids)
                    found += kids
                except OSError:
                    pass
        items = found
def missing(p):  # a path not there: list its nearest existing directory, so asks for its siblings need no job
    a = os.path.dirname(p)
    while a not in ("", "/") and not os.path.isdir(a):
        a = os.path.dirname(a)
    if a and a not in AHEAD and LEFT["dirs"] > 0:
        try:
            kids = listing(a)
        except OSError:
            return
        if len(kids) <= LEFT["entries"]:
            AHEAD[a] = kids
            LEFT["dirs"] -= 1
            LEFT["entries"] -= len(kids)
def after(p):  # a file's stat taken after its bytes were read or written in this job: its version check
    try:
        STATS[p] = st(p)
    except OSError:
        pass
def run(op):
    k, p = op["op"], op["path"]
    if k == "info":
        s = st(p)
        if op.get("ahead"):  # a file's stat: its directory's tree, since a reader lists or reads beside it next (07)
            ahead([s] if s["type"] == "directory" else [s, st(os.path.dirname(p))], LEVELS)
        return s
    if k == "ls":
        if not os.path.isdir(p):
            return [st(p)]
        out = listing(p)
        if op.get("ahead"):
            STATS[p] = st(p)  # the directory's own stat: a reader that lists it asks info of it too
            ahead(out, LEVELS - 1)
        return out
    if k == "find":
        if not os.path.isdir(p):
            if not os.path.exists(p):
                missing(p)
                return []
            return [st(p)]
        out = [st(p)] if op.get("withdirs") else []
        for d, dirs, files in os.walk(p):
            dirs.sort()
            out += sts(os.path.join(d, n) for n in (dirs if op.get("withdirs") else []) + sorted(files))
        if op.get("ahead"):
            small(out)  # a tree is found to be copied (mirror): its small files come with it
        return out
    if k == "cat":
        with open(p, "rb") as f:
            start, end = op.get("start"), op.get("end")
            size = os.fstat(f.fileno()).st_size
            start = 0 if start is None else (start if start >= 0 else max(size + start, 0))
            end = size if end is None else (end if end >= 0 else max(size + end, 0))
            f.seek(start)
            data = base64.b64encode(f.read(max(end - start, 0))).decode()
        after(p)
        return data
    if k == "rm":  # True when something was there
        if os.path.isdir(p) and not os.path.islink(p):
            if not op.get("recursive"):
                raise IsADirectoryError(p)
            shutil.rmtree(p)
            return True
        if os.path.lexists(p):
            os.remove(p)
            return True
        return False
    if k == "write":
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = p + ".nbtools-partial-%d" % os.getpid()
        with open(tmp, "wb") as f:
            f.write(base64.b64decode(op["data"]))
            f.flush(); os.fsync(f.fileno())
        os.replace(tmp, p)
        after(p)
        return None
    raise ValueError("unknown op " + k)
res = []
for op in json.loads(zlib.decompress(base64.b64decode(sys.argv[1]))):
    try:
        res.append({"ok": run(op)})
    except Exception as e:
        res.append({"err": type(e).__name__, "msg": str(e)})
        if isinstance(e, FileNotFoundError) and op["op"] in ("info", "ls", "cat"):
            missing(op["path"])
res.append({"ahead": AHEAD, "files": FILES, "stats": STATS})
sys.stdout.write("%s\n%s\n%s\n" % ("NBTOOLS-RAYFS-BEGIN", base64.encodebytes(zlib.compress(json.dumps(res).encode())).decode(), "NBTOOLS-RAYFS-END"))
'''
