#!/usr/bin/env bash
# `cmake --install BUILD --prefix P` lays out bin/, share/ditbatch/{jobs,tokenizer}, the man page,
# bash completion and the docs;
# the prefix, moved elsewhere, still runs: --version names where it is, make-tiny finds the
# installed tokenizer (not the source tree's), generate makes an image, and the installed job
# body picks the installed binary with nothing set.
# usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d /tmp/ditbatch-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install"; }
for f in bin/ditbatch share/ditbatch/jobs/generate.sbatch share/ditbatch/jobs/generate-job.sh \
         share/ditbatch/jobs/selftest.sbatch share/ditbatch/jobs/ditbatch.env.example share/ditbatch/jobs/examples/prompts.txt \
         share/ditbatch/tokenizer/vocab.json share/doc/ditbatch/README.md share/doc/ditbatch/weights.md; do
  [ -e "$work/prefix/$f" ] || fail "not installed: $f"
done
[ -x "$work/prefix/share/ditbatch/jobs/generate.sbatch" ] || fail "generate.sbatch is not executable"

# The man page (help2man at build time: a build without it has none) holds every command's help.
if [ -f "$build/ditbatch.1" ]; then
  page="$work/prefix/share/man/man1/ditbatch.1"
  [ -f "$page" ] || fail "the man page was not installed"
  for command in $("$build/ditbatch" --help | sed -n 's/^  \([a-z-]*\)  .*/\1/p'); do
    grep -q "^\.SS $command\$" "$page" || fail "the man page has no section for $command"
  done
  grep -q -- "--offload-text-encoder" "$page" || fail "the man page lacks generate's options"
else
  echo "note: no man page in $build (help2man was not found at configure time)"
fi

# A prefix that cannot be written (here a file in the way; as a user, a folder of root's): CMake
# stops with an error that names the folder, and exits non-zero.
touch "$work/a-file"
if cmake --install "$build" --prefix "$work/a-file/prefix" > "$work/bad-prefix.log" 2>&1; then fail "cmake --install into $work/a-file/prefix succeeded"; fi
{ grep -q "cannot create directory" "$work/bad-prefix.log" && grep -q "$work/a-file/prefix/bin" "$work/bad-prefix.log"; } || { cat "$work/bad-prefix.log"; fail "the unwritable prefix is not named"; }

mv "$work/prefix" "$work/moved"   # relocated: nothing may point into the old prefix

# bash completion: the commands, then a command's options, from the binary's own --help.
completion="$work/moved/share/bash-completion/completions/ditbatch"
complete_words() {  # complete_words WORD... -> the candidates for the last word
  bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ditbatch; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$completion" "$@"
}
complete_words "$work/moved/bin/ditbatch" gen | grep -qx generate || fail "completion: no 'generate' for 'gen'"
complete_words "$work/moved/bin/ditbatch" generate --off | grep -qx -- --offload-text-encoder ||
  fail "completion: no '--offload-text-encoder' for 'generate --off'"
exe="$work/moved/bin/ditbatch"
"$exe" --version > "$work/version.txt" || { cat "$work/version.txt"; fail "--version"; }
grep -q "installed at: $work/moved/bin/ditbatch" "$work/version.txt" || { cat "$work/version.txt"; fail "--version does not say where it is"; }
# make-tiny takes the installed tokenizer, not the source tree's: a copy of the prefix whose
# tokenizer lacks a file must say so, naming the prefix's folder.
"$exe" make-tiny --out "$work/qwen-image.h5" > "$work/make.log" 2>&1 || { cat "$work/make.log"; fail "make-tiny from the moved prefix"; }
cp -r "$work/moved" "$work/broken"
rm "$work/broken/share/ditbatch/tokenizer/merges.txt"
if "$work/broken/bin/ditbatch" make-tiny --out "$work/broken.h5" > "$work/broken.log" 2>&1; then fail "make-tiny ignored the installed tokenizer"; fi
grep -q "$work/broken/share/ditbatch/tokenizer/merges.txt: missing" "$work/broken.log" || { cat "$work/broken.log"; fail "make-tiny's error"; }
"$exe" generate --weights "$work/qwen-image.h5" --out "$work/out" --prompt "an installed fox" --width 32 --height 32 \
  --steps 2 > "$work/generate.log" 2>&1 || { cat "$work/generate.log"; fail "generate from the moved prefix"; }
[ -s "$work/out/000000-an-installed-fox.png" ] || fail "no image"

# The job body, as sbatch runs it from the installed jobs folder with no DITBATCH_BIN: it must
# pick the moved prefix's binary (checked by its own message when the weights are missing).
(cd "$work" && env -i HOME="$HOME" PATH=/usr/bin:/bin jobs_dir="$work/moved/share/ditbatch/jobs" \
   bash -c '. "$jobs_dir/generate-job.sh"') > "$work/job.log" 2>&1 || true
grep -q "DITBATCH_WEIGHTS is not set" "$work/job.log" || { cat "$work/job.log"; fail "the installed job body did not find its binary"; }
echo "PASS: installed, moved, and run from $work/moved"
