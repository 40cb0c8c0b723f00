#!/usr/bin/env python3
"""Checks that the README's builds share their compiled crates, or writes the list that makes them.

`./catena` builds `-p catena-cli`, `./catena desktop` builds `-p catena-desktop`, and the test
command builds `--workspace`. Cargo resolves features for what each command selects, so a crate
that the desktop's dependencies ask for with one more feature (proc-macro2's `span-locations`,
from tauri-macros, is the costly one: every derive macro is built on it) is a different crate in
the other builds, and so is everything above it: after `./catena run`, the test command compiled
425 of 563 crates again. `crates/workspace-hack` asks, for the two binaries, for the features the
whole workspace builds each such crate with, so each command finds what the one before it built.

This reads cargo's own plan, its unit graph (`--unit-graph`, unstable: RUSTC_BOOTSTRAP=1 lets
this query use it on the stable toolchain, and nothing is built), and compares units by what
makes cargo build one again: package, target, mode, features, profile, and the same for each
unit it depends on. A unit is a host unit (built for build scripts and proc macros) when it is
reached through a build script or a proc macro: those get `[build-dependencies]` in the list.
cargo-hakari does this job for every member of a workspace; it is not used because every fresh
machine would have to compile it first (`cargo install`), and two selections are all that matter.

It also checks that `cargo test --workspace` builds no unit of `cargo build --workspace` again,
which a dev-dependency asking for more features of a crate the libraries use would cause (it did:
criterion's plotting made the test stage rebuild catena-eval and everything above it). That one
has no list to write: the dev-dependency has to ask for less.

Usage: scripts/dev/shared-build.py          exit 1, and what differs, when a build would not share
       scripts/dev/shared-build.py --write  rewrites crates/workspace-hack/Cargo.toml, then checks
"""
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HACK = os.path.join(ROOT, "crates", "workspace-hack", "Cargo.toml")
SELECTIONS = [["-p", "catena-cli"], ["-p", "catena-desktop"]]
WHOLE = ["--workspace"]
REGISTRY = "registry+"


def unit_graph(selection, verb="build"):
    """Cargo's units for `cargo VERB --release --locked SELECTION`, each with its key and sides."""
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    command = ["cargo", verb, "--release", "--locked", *selection]
    command += ["--unit-graph", "-Z", "unstable-options"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"`{' '.join(command)}` failed:\n{done.stderr}")
    graph = json.loads(done.stdout)
    units = graph["units"]
    keys = {}

    def key(i):
        if i not in keys:
            unit = units[i]
            deps = sorted(key(dep["index"]) for dep in unit["dependencies"])
            what = [unit["pkg_id"], unit["target"]["name"], unit["target"]["kind"], unit["mode"]]
            what += [unit["features"], unit["profile"], deps]
            keys[i] = hashlib.sha256(json.dumps(what).encode()).hexdigest()
        return keys[i]

    sides = {}

    def visit(i, host):
        unit = units[i]
        kind = unit["target"]["kind"]
        # A proc macro is built for the host; a build script is compiled for the host from its
        # build-dependencies but has the features of its package, on the side that uses it.
        host = host or "proc-macro" in kind
        side = "host" if host else "target"
        if side in sides.setdefault(i, set()):
            return
        sides[i].add(side)
        below = host or ("custom-build" in kind and unit["mode"] == "build")
        for dep in unit["dependencies"]:
            visit(dep["index"], below)

    for root in graph["roots"]:
        visit(root, False)
    return [
        {
            "key": key(i),
            "pkg_id": unit["pkg_id"],
            "features": unit["features"],
            "sides": sides.get(i, set()),
            "kind": unit["target"]["kind"],
        }
        for i, unit in enumerate(units)
    ]


def features_by_package(units):
    """(pkg_id, side) -> the feature sets the units of that package have on that side."""
    found = {}
    for unit in units:
        for side in unit["sides"]:
            found.setdefault((unit["pkg_id"], side), set()).add(tuple(unit["features"]))
    return found


def differences():
    """For each selection, the (pkg_id, side) whose features differ from the whole workspace's."""
    whole = unit_graph(WHOLE)
    whole_keys = {unit["key"] for unit in whole}
    whole_features = features_by_package(whole)
    report, wanted = [], {}
    for selection in SELECTIONS:
        units = unit_graph(selection)
        missing = [unit for unit in units if unit["key"] not in whole_keys]
        own = features_by_package(missing)
        for (pkg_id, side), features in sorted(own.items()):
            theirs = whole_features.get((pkg_id, side), set())
            if features - theirs:
                wanted[(pkg_id, side)] = theirs
                report.append((" ".join(selection), pkg_id, side, features, theirs))
        if missing and not any(entry[0] == " ".join(selection) for entry in report):
            # Units differ only through what they depend on, and no package's own features do:
            # not expected (cargo derives a unit from its features and its dependencies).
            names = sorted({unit["pkg_id"] for unit in missing})[:10]
            sys.exit(f"`{' '.join(selection)}` builds {len(missing)} units the workspace does not: {names}")
    return report, wanted


def dependency_lines(wanted, side):
    """The `[dependencies]` or `[build-dependencies]` lines asking for the workspace's features."""

    def crate_name(pkg_id):
        return pkg_id.split("#")[-1].split("@")[0]

    chosen = [(pkg_id, features) for (pkg_id, s), features in wanted.items() if s == side]
    chosen.sort(key=lambda entry: (crate_name(entry[0]), entry[0]))
    names = [crate_name(pkg_id) for pkg_id, _ in chosen]
    lines = []
    for (pkg_id, features), name in zip(chosen, names):
        if not pkg_id.startswith(REGISTRY):
            sys.exit(f"{pkg_id} is not from the registry, and the list holds registry crates only")
        if len(features) != 1:
            sys.exit(f"the workspace builds {pkg_id} for the {side} with {len(features)} feature sets")
        version = pkg_id.split("@")[-1]
        listed = ", ".join(f'"{feature}"' for feature in sorted(next(iter(features))))
        key = name if names.count(name) == 1 else f"{name}-{version.split('.')[0]}"
        rename = f'package = "{name}", ' if key != name else ""
        options = f'{rename}version = "{version}", default-features = false, features = [{listed}]'
        lines.append(f"{key} = {{ {options} }}")
    return lines


def write(wanted):
    with open(HACK, encoding="utf-8") as f:
        text = f.read()
    head = text.split("\n[dependencies]\n")[0].split("\n[build-dependencies]\n")[0].rstrip("\n")
    parts = [head, "", "[dependencies]", *dependency_lines(wanted, "target"), ""]
    parts += ["[build-dependencies]", *dependency_lines(wanted, "host"), ""]
    with open(HACK, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def tests_rebuild():
    """The crates of the workspace build that `cargo test` would build with other features (a
    dev-dependency asking for more of a crate the libraries use): none, or the test stage
    recompiles them and every crate above them."""
    tests = unit_graph(WHOLE, "test")
    test_keys = {unit["key"] for unit in tests}
    test_features = {(unit["pkg_id"], tuple(unit["features"])) for unit in tests}
    # A binary is not built by `cargo test` (a package's integration tests would need it; the
    # binaries' packages have none): their tests are, and those are new units anyway.
    built = [unit for unit in unit_graph(WHOLE) if "bin" not in unit["kind"]]
    rebuilt = [unit for unit in built if unit["key"] not in test_keys]
    return sorted({
        unit["pkg_id"].split("#")[-1]
        for unit in rebuilt
        if (unit["pkg_id"], tuple(unit["features"])) not in test_features
    }), len(rebuilt)


def main():
    if "--write" in sys.argv[1:]:
        # From empty lists, so nothing stays that is no longer needed. The list can pull in a
        # crate whose own dependencies then differ: write until it settles.
        all_wanted = {}
        for _ in range(5):
            write(all_wanted)
            # The lock file's entry for the list (its dependencies); nothing else moves.
            subprocess.run(["cargo", "update", "--offline", "--workspace"], cwd=ROOT, check=True)
            _, wanted = differences()
            if not wanted:
                break
            all_wanted.update(wanted)
    report, _ = differences()

    def shown(sets):
        return " or ".join("[" + ", ".join(features) + "]" for features in sorted(sets))

    for selection, pkg_id, side, features, theirs in report:
        name = pkg_id.split("#")[-1]
        print(f"{selection}: {name} for the {side} has {shown(features)}, the workspace {shown(theirs)}")
    if report:
        print(f"These builds would compile crates again: run {sys.argv[0]} --write", file=sys.stderr)
        sys.exit(1)
    changed, rebuilt = tests_rebuild()
    if rebuilt:
        print(f"`cargo test --workspace` would build {rebuilt} units of the build again: a")
        print(f"dev-dependency asks for more features of {changed or 'a crate they use'}")
        sys.exit(1)


if __name__ == "__main__":
    main()
