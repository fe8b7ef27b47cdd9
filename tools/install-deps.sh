#!/usr/bin/env bash
# Installs the Debian packages ditbatch needs. Idempotent: a quiet no-op when everything is
# present. Run as root (or with sudo).
#   install-deps.sh build   what building and running ditbatch need (tools/demo.sh)
#   install-deps.sh [all]   that and what the tests need (tools/test.sh, CI)
set -euo pipefail
set_name=${1:-all}
case $set_name in build | all) ;; *) echo "usage: install-deps.sh [build|all]" >&2; exit 2 ;; esac

build_packages=(
  # build
  cmake ninja-build pkg-config g++
  help2man                            # the man page, from the commands' own --help
  # core libraries
  libopenmpi-dev openmpi-bin          # MPI data parallelism
  libhdf5-dev hdf5-tools              # the weight store (h5dump, h5ls to look inside)
  libboost-program-options-dev        # the command line
  libpng-dev                          # PNG output and input images
  libjpeg62-turbo-dev libwebp-dev     # JPEG and WebP input images (the Edit models)
  nlohmann-json3-dev                  # configs, safetensors headers, jsonl
  libsimdjson-dev                     # manifest lines read at resume (a million of them)
  libspdlog-dev libfmt-dev            # logging
  libopenblas-openmp-dev              # GEMM for the CPU backend (OpenMP threads, like our own loops)
  libsleef-dev                        # torch's vectorised exp/sin/cos/tanh, bit for bit
  libssl-dev                          # SHA-256 (weight checksums, PNG digests in the manifest)
  libxxhash-dev                       # XXH3: the weight file's per-tensor digests, checked at memory speed
  libarchive-dev                      # the tar shards of --output-format webdataset
  libonig-dev libutf8proc-dev         # tokenizer: Unicode regex and NFC
  libre2-dev                          # LoRA configs' module patterns, matched in linear time
)
test_packages=(
  libgtest-dev                        # the unit tests
  # the ASan + UBSan build and the libFuzzer targets (tools/ci/sanitize_fuzz.sh): clang, its
  # sanitizer and fuzzer runtimes, its OpenMP, and llvm-symbolizer for readable reports
  clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
  # Slurm end-to-end tests
  slurm-wlm slurmctld slurmd slurm-client munge
  # the run report's browser test (tests/report): headless Chromium driven by Selenium
  chromium chromium-driver python3-selenium
  # test helpers
  python3 python3-venv procps bc shellcheck
  python3-xxhash                      # the reference the XXH3 tensor digests are tested against
  lmod                                # the EasyBuild module under the real Lmod (tools/ci/easybuild.sh)
)
packages=("${build_packages[@]}")
[ "$set_name" = all ] && packages+=("${test_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
