#!/usr/bin/env python3
"""Every #include "..." in the layers' folders reaches only the layers each declares.

The layers and what each may use come from the build (layers.txt, written by CMakeLists.txt's
ditbatch_layer calls): one line per layer, "name folder:dep dep ...". A layer may include its
own headers, those of the layers it names, and, through them, those they name in turn. An
include is resolved as the compiler resolves it with the build's include paths: beside the
including file, then src/, then each layer folder that is an include path of its own (kernels/).

  check_layers.py --layers BUILD/layers.txt --root SOURCE_DIR

Exit 0 when every include is allowed; 1, with each offending file:line, what it includes and
what its layer may use; 2 when the declaration itself is wrong (an unknown layer, a cycle).
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def read_layers(path):
    layers = {}  # name -> (folder, [deps])
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            head, _, deps = line.partition(":")
            name, _, folder = head.partition(" ")
            if not name or not folder:
                sys.exit(f"{path}:{number}: expected 'name folder:deps', got {line!r}")
            layers[name] = (folder, deps.split())
    for name, (_, deps) in layers.items():
        for dep in deps:
            if dep not in layers:
                print(f"{path}: layer {name} names {dep}, which is no layer", file=sys.stderr)
                sys.exit(2)
    return layers


def reachable(layers):
    """Each layer's allowed layers: itself and everything its declared ones reach."""
    allowed = {}

    def visit(name, trail):
        if name in allowed:
            return allowed[name]
        if name in trail:
            print("layers.txt: a cycle: " + " -> ".join(trail + [name]), file=sys.stderr)
            sys.exit(2)
        out = {name}
        for dep in layers[name][1]:
            out |= visit(dep, trail + [name])
        allowed[name] = out
        return out

    for name in layers:
        visit(name, [])
    return allowed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", required=True, help="layers.txt from the build folder")
    parser.add_argument("--root", required=True, help="the source tree")
    args = parser.parse_args()
    layers = read_layers(args.layers)
    allowed = reachable(layers)
    root = os.path.abspath(args.root)
    by_folder = {os.path.normpath(os.path.join(root, folder)): name for name, (folder, _) in layers.items()}
    # Folders that are include paths of their own: a layer folder outside src/ (kernels/).
    src = os.path.join(root, "src")
    search = [src] + [f for f in by_folder if os.path.dirname(f) != src]

    def layer_of(path):  # the layer of the nearest enclosing layer folder (a family's subfolder is its layer's)
        folder = os.path.dirname(os.path.normpath(path))
        while folder.startswith(root) and folder not in by_folder:
            folder = os.path.dirname(folder)
        return by_folder.get(folder)

    def sources_of(folder):  # the folder's files and its subfolders', but not another layer's folder
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) not in by_folder)
            for entry in sorted(filenames):
                if entry.endswith(SOURCE_SUFFIXES):
                    yield dirpath, os.path.join(dirpath, entry)

    violations, checked = [], 0
    for folder, name in sorted(by_folder.items()):
        if not os.path.isdir(folder):
            print(f"{folder}: the folder of layer {name} does not exist", file=sys.stderr)
            sys.exit(2)
        for directory, path in sources_of(folder):
            with open(path, errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    checked += 1
                    target = m.group(1)
                    candidates = [os.path.join(directory, target)] + [os.path.join(d, target) for d in search]
                    found = next((c for c in candidates if os.path.isfile(c)), None)
                    if found is None:
                        continue  # generated, or a third-party header written with quotes
                    reached = layer_of(found)
                    if reached is None or reached in allowed[name]:
                        continue
                    violations.append(
                        f"{os.path.relpath(path, root)}:{number}: includes \"{target}\" of layer {reached}; layer "
                        f"{name} may use only {', '.join(sorted(allowed[name]))} (CMakeLists.txt, ditbatch_layer)")
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} include(s) against the layer order", file=sys.stderr)
        return 1
    print(f"{checked} includes in {len(layers)} layers follow the declared order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
