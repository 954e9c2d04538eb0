# Sourced by the README's commands: makes sure the system tools and a virtual environment with
# aot and its test dependencies exist, then activates it. Safe to run again; fast when set up.
# AOT_SETUP_MINIMAL=1 (examples/run_example.sh) sets up only what `aot compile`, make and
# `aot verify` on this machine need: gcc, make and libc6-dev, and aot with its dependencies plus
# onnxruntime (the [verify] extra), without the test tools (pytest, scikit-learn, ruff ...).
#
# System packages (Debian/Ubuntu, installed with apt-get when missing and running as root):
#   gcc make libc6-dev        build packages for this machine
#   cmake                     the package's CMakeLists
#   clang                     the strict-warning and sanitizer builds also run with clang
#   qemu-user + cross GCCs    build for Raspberry Pi targets and run the binaries here (rpi4:
#                             aarch64, rpi3: armhf; tests/test_conformance_cross.py needs both;
#                             aarch64 g++ cross-builds examples/cpp_app); riscv64 for the RISC-V
#                             presets (tests/test_riscv.py and the sweep under qemu)
#   gcc-arm-none-eabi/newlib  bare-metal Cortex-M targets
#   chromium                  renders `aot report` pages in a test (headless)
need_cmd() { command -v "$1" >/dev/null 2>&1; }
packages=()
need_cmd cc || packages+=(gcc libc6-dev)
need_cmd make || packages+=(make)
if [ "${AOT_SETUP_MINIMAL:-0}" != 1 ]; then
  need_cmd cmake || packages+=(cmake)
  need_cmd clang || packages+=(clang)
  { need_cmd qemu-aarch64 && need_cmd qemu-arm && need_cmd qemu-riscv64; } || packages+=(qemu-user)
  need_cmd aarch64-linux-gnu-gcc || packages+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
  need_cmd aarch64-linux-gnu-g++ || packages+=(g++-aarch64-linux-gnu)
  need_cmd arm-linux-gnueabihf-gcc || packages+=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross)
  need_cmd riscv64-linux-gnu-gcc || packages+=(gcc-riscv64-linux-gnu libc6-dev-riscv64-cross)
  need_cmd arm-none-eabi-gcc || packages+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
  need_cmd chromium || packages+=(chromium)
fi
if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && need_cmd apt-get; then
    echo "installing system packages: ${packages[*]}" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  else
    echo "missing system packages: ${packages[*]} (install them with: sudo apt-get install ${packages[*]})" >&2
    need_cmd cc && need_cmd make || exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Install (again) when pyproject.toml changed since the last install. A full install serves the
# minimal setup too; a minimal one is completed by the next full setup.
full_stamp=.venv/.aot-installed
if [ "${AOT_SETUP_MINIMAL:-0}" = 1 ]; then extra=verify stamp=.venv/.aot-installed-verify; else extra=test stamp=$full_stamp; fi
is_current() { [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ]; }
if ! is_current "$full_stamp" && ! is_current "$stamp"; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[$extra]"
  touch "$stamp"
fi
# shellcheck disable=SC1091
source .venv/bin/activate
