#!/usr/bin/env python3
"""Every function nccl.h declares is a function the layer exports.

    check_symbols.py NCCL_H LIBRARY [NM]

Reads the function declarations of NCCL_H (comments, preprocessor lines and attributes removed; a declaration is a
return type, a name starting with nccl or pnccl, and an opening parenthesis at the start of a statement), lists the
dynamic symbols LIBRARY defines (`nm -D --defined-only`), and fails naming every declared function that is not a
defined function symbol of LIBRARY. It also fails when the header yields implausibly few declarations (a parse that
broke must not pass). Prints what it compared.
"""
import re
import subprocess
import sys


def declared(header_text):
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*(?:\\\n[^\n]*)*", " ", text, flags=re.M)
    # __attribute__ ((...)) with nested parentheses
    while True:
        m = re.search(r"__attribute__\s*\(\(", text)
        if not m:
            break
        depth, i = 0, m.end() - 2
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        text = text[: m.start()] + " " + text[i:]
    text = text.replace('extern "C" {', " ").replace('extern "C"', " ")
    names = set()
    for m in re.finditer(r"(?:^|[;{}])\s*((?:const\s+)?[A-Za-z_]\w*(?:\s*\*)*)\s+(\**\s*p?nccl\w*)\s*\(", text):
        ret, name = m.group(1), m.group(2).lstrip("* ").strip()
        if ret.split()[0] in ("typedef", "return", "struct", "enum"):
            continue
        names.add(name)
    return names


def exported(library, nm):
    out = subprocess.run([nm, "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    funcs = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] in ("T", "W", "i"):
            funcs.add(parts[2].split("@")[0])
    return funcs


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    header, library = sys.argv[1], sys.argv[2]
    nm = sys.argv[3] if len(sys.argv) > 3 else "nm"
    with open(header) as f:
        want = declared(f.read())
    have = exported(library, nm)
    missing = sorted(want - have)
    print(f"{header}: {len(want)} functions declared ({len([n for n in want if n.startswith('nccl')])} nccl*, "
          f"{len([n for n in want if n.startswith('pnccl')])} pnccl*)")
    print(f"{library}: {len(have)} functions exported; of them beyond nccl.h: "
          f"{', '.join(sorted(n for n in have - want)) or 'none'}")
    if len(want) < 40:
        print(f"FAIL: only {len(want)} declarations parsed from {header}: the parser or the header changed")
        return 1
    if missing:
        print(f"FAIL: {len(missing)} declared functions are not exported: {', '.join(missing)}")
        return 1
    print("PASS: every function nccl.h declares is exported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
