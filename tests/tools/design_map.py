#!/usr/bin/env python3
"""Checks that docs/design.md still maps the code: every workspace crate appears (its package
name and its folder), and so does every public module of the binaries' crates (the operator's
and the resolver's), by its path (`dns::serving`, `dns/serving`) or, at the top, its name.

    python3 tests/tools/design_map.py [REPO]

Prints what the map leaves out and exits 1 if anything is; a newcomer reads the map first.
"""

import re
import sys
import tomllib
from pathlib import Path

# `pub mod name;` (a `#[cfg(...)]` line before it does not matter: a fuzzing-only module is
# still a module a reader meets).
PUB_MOD = re.compile(r"^\s*pub\s+mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)


def members(repo: Path) -> list[Path]:
    workspace = tomllib.loads((repo / "Cargo.toml").read_text())["workspace"]
    return [repo / m for m in workspace["members"]]


def package_name(crate: Path) -> str:
    return tomllib.loads((crate / "Cargo.toml").read_text())["package"]["name"]


def is_binary_crate(crate: Path) -> bool:
    manifest = tomllib.loads((crate / "Cargo.toml").read_text())
    return (crate / "src" / "main.rs").exists() or bool(manifest.get("bin"))


def public_modules(src: Path, file: Path, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every `pub mod` reachable from `file` through public modules, as paths."""
    found = []
    for name in PUB_MOD.findall(file.read_text()):
        path = prefix + (name,)
        found.append(path)
        folder = src.joinpath(*path)
        for child in (folder.with_suffix(".rs"), folder / "mod.rs"):
            if child.exists():
                found += public_modules(src, child, path)
                break
    return found


def mentioned(doc: str, path: tuple[str, ...]) -> bool:
    forms = {"::".join(path), "/".join(path), "/".join(path) + "/", "/".join(path) + ".rs"}
    if len(path) == 1:
        forms.add(path[0])
    return any(f"`{form}`" in doc or f"`{form} " in doc or f" {form}/" in doc
               for form in forms) or any(re.search(rf"(^|[\s`(]){re.escape(form)}(\.rs)?[`\s,)]", doc, re.M)
                                         for form in forms if "/" in form or "::" in form)


def main() -> int:
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    doc = (repo / "docs" / "design.md").read_text()
    missing = []
    for crate in members(repo):
        name = package_name(crate)
        folder = crate.relative_to(repo).as_posix()
        if name not in doc:
            missing.append(f"crate {name} ({folder})")
        # The crate tree draws `crates/` once and each crate's folder beside its name.
        leaf = folder.rsplit("/", 1)[-1]
        in_tree = any(f"{leaf}/" in line and name in line for line in doc.splitlines())
        if f"{folder}/" not in doc and not in_tree:
            missing.append(f"folder {folder}/ (crate {name})")
        if not is_binary_crate(crate):
            continue
        lib = crate / "src" / "lib.rs"
        if not lib.exists():
            continue
        for path in public_modules(crate / "src", lib):
            if not mentioned(doc, path):
                missing.append(f"module {name}::{'::'.join(path)}")
    for m in missing:
        print(f"docs/design.md does not mention {m}")
    if missing:
        print(f"{len(missing)} left out of the map (docs/design.md)")
        return 1
    print("docs/design.md maps every crate and every public module of the binaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
