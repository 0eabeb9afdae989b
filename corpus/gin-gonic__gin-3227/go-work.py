"""Write /opt/gin.work, the Go workspace the image's GOWORK names: /testbed, and every module
of its module graph (the closure of the requirements of /testbed/go.mod and of each
replacement's own go.mod) replaced by the source Debian's golang-*-dev package installs for
it under /usr/share/gocode/src. Debian's tree of a module without a go.mod (its upstream
had none, or Debian left it out) is copied to /opt/gin-deps with a go.mod naming the module,
as the module proxy synthesises one for such a module. Nothing is downloaded."""
import os
import re
import shutil
import sys

SRC, OWN, OUT = "/usr/share/gocode/src", "/opt/gin-deps", "/opt/gin.work"
REQ = re.compile(r"^\s*(?:require\s+)?([\w.\-]+\.[\w.\-/~]+)\s+v\S+", re.M)


def requires(path):
    text = re.sub(r"//.*", "", open(path, encoding="utf-8").read())
    text = re.sub(r"^\s*(replace|exclude|retract)\b.*?(\)|$)", "", text, flags=re.M | re.S)
    return REQ.findall(text)


def main():
    todo, seen, dirs, missing = requires("/testbed/go.mod"), set(), {}, []
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        d = os.path.join(SRC, m)
        if not os.path.isdir(d):
            missing.append(m)
            continue
        if not os.path.isfile(os.path.join(d, "go.mod")):
            own = os.path.join(OWN, m)
            shutil.copytree(d, own, symlinks=True)
            with open(os.path.join(own, "go.mod"), "w", encoding="utf-8") as fh:
                fh.write(f"module {m}\n")
            d = own
        dirs[m] = d
        todo += requires(os.path.join(d, "go.mod"))
    if missing:
        sys.exit("no Debian source for: " + " ".join(sorted(missing)))
    with open(OUT, "w", encoding="utf-8") as fh:
        fh.write("go 1.18\n\nuse /testbed\n\nreplace (\n")
        fh.writelines(f"\t{m} => {d}\n" for m, d in sorted(dirs.items()))
        fh.write(")\n")
    print(f"{OUT}: {len(dirs)} modules from Debian's sources")


main()
