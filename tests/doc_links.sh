#!/usr/bin/env bash
# Every relative link and image in README.md and docs/**/*.md resolves: the
# file (or folder) exists inside the repository and, for a link with a
# #anchor, the target file has a heading with that anchor (GitHub's slugs:
# lowercase, spaces to '-', punctuation dropped, "-1", "-2" for repeats).
# Links to other sites (http:, https:, mailto:) are not fetched.
#
#   bash tests/doc_links.sh [REPO]      (REPO: the checkout, default this one)
#
# Exit status 0 when every link resolves, 1 with one line per broken link.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
exec python3 - "$root" <<'PY'
import os, re, sys, glob

root = os.path.realpath(sys.argv[1])
files = [os.path.join(root, "README.md")]
files += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
files = [f for f in files if os.path.isfile(f)]

FENCE = re.compile(r"^\s*(```|~~~)")
# [text](target "title") and ![alt](target); the text may hold one level of [ ].
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")



def lines_outside_fences(path):
    """(number, line) of every line not inside a fenced code block."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield n, line.rstrip("\n")


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # punctuation dropped (letters, digits, _ and - kept)
    return text.replace(" ", "-")


anchors_cache = {}


def anchors(path):
    if path not in anchors_cache:
        seen, found = {}, set()
        for _, line in lines_outside_fences(path):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
        # explicit <a name="..."> or id="..." anchors too
        with open(path, encoding="utf-8") as f:
            for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", f.read()):
                found.add(m.group(1))
        anchors_cache[path] = found
    return anchors_cache[path]


broken, checked = [], 0
for path in files:
    rel_path = os.path.relpath(path, root)
    for n, line in lines_outside_fences(path):
        # inline code is not a link: `[a](b)` in backticks is left out
        text = re.sub(r"`+[^`]*`+", "", line)
        targets = [m.group(1) for m in INLINE.finditer(text)]
        m = REFDEF.match(text)
        if m:
            targets.append(m.group(1))
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto: ...: another site
            checked += 1
            where = f"{rel_path}:{n}: {target}"
            file_part, _, anchor = target.partition("#")
            if file_part.startswith("/"):
                dest = os.path.join(root, file_part.lstrip("/"))
            elif file_part:
                dest = os.path.join(os.path.dirname(path), file_part)
            else:
                dest = path
            dest = os.path.realpath(dest)
            if dest != root and not dest.startswith(root + os.sep):
                broken.append(f"{where}: points outside the repository")
                continue
            if not os.path.exists(dest):
                broken.append(f"{where}: no such file")
                continue
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    continue  # anchors into source files (#L10) are not checked
                if anchor.lower() not in anchors(dest):
                    broken.append(f"{where}: no heading \"#{anchor}\" in {os.path.relpath(dest, root)}")

for b in broken:
    print(b)
print(f"doc_links: {len(files)} files, {checked} relative links, {len(broken)} broken",
      file=sys.stderr)
sys.exit(1 if broken else 0)
PY
