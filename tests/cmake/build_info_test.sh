#!/usr/bin/env bash
# tools/cmake/build_info.cmake on a throwaway git repository: the commit it writes is the
# repository's HEAD as git reports it, "+dirty" exactly when a tracked file differs, the archived
# commit in a `git archive` tarball (export-subst), even unpacked inside another checkout,
# "unknown" for other trees without git, and an unchanged state leaves the file untouched (no
# recompilation).
# Usage: build_info_test.sh SOURCE_DIR BINARY   (the ditbatch this build made: its --version too)
set -euo pipefail
src=$1 exe=$2
script="$src/tools/cmake/build_info.cmake"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
commit_in() { sed -n 's/.*return "\(.*\)";.*/\1/p' "$work/out.cpp"; }
write() { cmake -DSOURCE_DIR="$1" -DOUT="$work/out.cpp" -P "$script"; }

repo="$work/repo"
mkdir "$repo" && cd "$repo"
git init -q . && git config user.email t@t && git config user.name t
echo one > tracked && mkdir -p tools/cmake && cp "$src/tools/cmake/archive_commit.txt" tools/cmake/ &&
  cp "$src/.gitattributes" . && git add tracked tools .gitattributes && git commit -qm one
write "$repo"
[[ "$(commit_in)" == "$(git rev-parse --short=12 HEAD)" ]] || fail "clean tree: $(commit_in)"
grep -q '#include "core/build_info.h"' "$work/out.cpp" || fail "the file does not include its header"

# Same state again: the file keeps its time stamp (ninja's restat then rebuilds nothing).
touch -d '2000-01-01' "$work/out.cpp"
write "$repo"
[[ "$(stat -c %Y "$work/out.cpp")" == "$(date -d 2000-01-01 +%s)" ]] || fail "rewritten without a change"

echo untracked > new-file  # untracked files do not make a build dirty
write "$repo"
[[ "$(commit_in)" == "$(git rev-parse --short=12 HEAD)" ]] || fail "untracked file: $(commit_in)"
echo two > tracked
write "$repo"
[[ "$(commit_in)" == "$(git rev-parse --short=12 HEAD)+dirty" ]] || fail "changed tracked file: $(commit_in)"
first=$(git rev-parse --short=12 HEAD)
git commit -qam two
write "$repo"
[[ "$(commit_in)" == "$(git rev-parse --short=12 HEAD)" && "$(commit_in)" != "$first" ]] ||
  fail "after a commit: $(commit_in) (before: $first)"

mkdir "$work/no-git"
write "$work/no-git"
[[ "$(commit_in)" == "unknown" ]] || fail "outside git: $(commit_in)"
cp -r "$repo/tools" "$work/no-git/"  # a copy of the files: the commit is still unsubstituted
write "$work/no-git"
[[ "$(commit_in)" == "unknown" ]] || fail "a copy of the files: $(commit_in)"

# A release tarball, unpacked outside any checkout and inside another one (not that one's commit).
git archive --prefix=release/ -o "$work/release.tar" HEAD
tar -xf "$work/release.tar" -C "$work"
write "$work/release"
[[ "$(commit_in)" == "$(git rev-parse --short=12 HEAD)" ]] || fail "git archive tarball: $(commit_in)"
git commit -q --allow-empty -m three
tar -xf "$work/release.tar" -C "$repo"
write "$repo/release"
[[ "$(commit_in)" == "$(git rev-parse --short=12 HEAD~1)" ]] || fail "tarball inside another checkout: $(commit_in)"

# The binary this build made names a commit of this source tree's history.
version=$("$exe" --version)
named=$(echo "$version" | head -n 1 | awk '{print $3}')
[[ "$named" == unknown ]] && { echo "ok (the build's source has no git: $version)"; exit 0; }
git -C "$src" cat-file -e "${named%+dirty}^{commit}" || fail "--version names ${named}, not a commit of $src"
echo "ok ($version)"
