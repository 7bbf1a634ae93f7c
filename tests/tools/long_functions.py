#!/usr/bin/env python3
"""Fails when a Rust function outside tests is over 120 lines (STYLE.md: long pieces are cut
along their seams).

usage: long_functions.py [REPO]

A function counts from the line of its `fn` to the line of its closing brace. Braces inside
strings (raw and byte strings too), char literals and comments do not count. Test code is
skipped: `#[cfg(test)]` items (a `mod tests { ... }`, or a `mod name;` and its file),
`#[test]` functions, tests.rs files, tests/ and benches/ folders (tests/fuzz with them).
Prints `path:line fn name: N lines` for each; exits 1 if any.
"""
import os
import re
import sys

LIMIT = 120
SKIPPED_DIRS = ("target", ".git", "node_modules", "tests", "benches", "fuzz")


def code_only(text):
    """`text` with every comment, string and char literal blanked (newlines kept), so that
    what is left can be searched and its braces counted."""
    out, i, n = [], 0, len(text)

    def blank(s):
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif m := re.compile(r'b?r(#*)"').match(text, i):
            if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
                out.append(c)
                i += 1
                continue
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and not _ident_before(text, i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}', '{'), or a lifetime / label ('a).
            if text.startswith("\\", i + 1):
                j = text.find("'", i + 3)
                j = n if j < 0 else j + 1
            elif i + 2 < n and text[i + 2] == "'":
                j = i + 3
            else:
                out.append(c)
                i += 1
                continue
            out.append(blank(text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _ident_before(text, i):
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def matching_brace(code, open_at):
    """The index just past the `}` that closes the `{` at `open_at`."""
    depth, j = 0, open_at
    while j < len(code):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(code)


def body_start(code, start):
    """Where the item starting at `start` opens its body: the first `{` or `;` (no body) outside
    parentheses and brackets (`[u8; 4]` in a signature), or the end of `code`."""
    depth, j = 0, start
    while j < len(code):
        c = code[j]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and c in "{;":
            return j
        j += 1
    return j


def item_end(code, start):
    """Where the item starting at `start` ends: after its `;` or its brace-matched body."""
    j = body_start(code, start)
    if j < len(code) and code[j] == "{":
        return matching_brace(code, j)
    return j + 1


TEST_ATTR = re.compile(r"#\[\s*(cfg\(\s*test\s*\)|(\w+::)*test(\([^\]]*\))?)\s*\]")
ATTR = re.compile(r"\s*#\[[^\]]*\]")


def without_tests(code):
    """`code` with every item carrying `#[cfg(test)]` or `#[test]` blanked, and the names of
    the `#[cfg(test)] mod name;` declarations (their code is in a file of their own)."""
    out, i, test_mods = [], 0, []
    for m in TEST_ATTR.finditer(code):
        if m.start() < i:
            continue
        j = m.end()
        while a := ATTR.match(code, j):  # the item's other attributes
            j = a.end()
        end = item_end(code, j)
        decl = re.match(r"\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code[j:end])
        if decl:
            test_mods.append(decl.group(3))
        out.append(code[i : m.start()])
        out.append(re.sub(r"[^\n]", " ", code[m.start() : end]))
        i = end
    out.append(code[i:])
    return "".join(out), test_mods


FN = re.compile(r"\bfn\s+(r#)?(\w+)")


def long_functions(code):
    """(line, name, lines) of each function in `code` longer than LIMIT lines."""
    for m in FN.finditer(code):
        # A `;` before any body is a declaration without one (a trait's).
        j = body_start(code, m.end())
        if j >= len(code) or code[j] == ";":
            continue
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, matching_brace(code, j) - 1) + 1
        if last - first + 1 > LIMIT:
            yield first, m.group(2), last - first + 1


def module_dir(path):
    """Where the files of `path`'s child modules are."""
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem in ("lib", "main", "mod"):
        return os.path.dirname(path)
    return os.path.join(os.path.dirname(path), stem)


def rust_files(repo):
    for root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for f in sorted(files):
            if f.endswith(".rs") and f != "tests.rs":
                yield os.path.join(root, f)


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else "."
    files = list(rust_files(repo))
    scanned, skipped = {}, set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            code, test_mods = without_tests(code_only(f.read()))
        scanned[path] = code
        for name in test_mods:
            base = os.path.join(module_dir(path), name)
            skipped.update({base + ".rs", os.path.join(base, "mod.rs"), base + os.sep})
    found = 0
    for path in files:
        if path in skipped or any(path.startswith(s) for s in skipped if s.endswith(os.sep)):
            continue
        for line, name, lines in long_functions(scanned[path]):
            print(f"{os.path.relpath(path, repo)}:{line} fn {name}: {lines} lines")
            found += 1
    print(f"{found} functions over {LIMIT} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
