# Sourced by the README's commands: makes sure the system tools and a virtual environment with
# aot and its test dependencies exist, then activates it. Safe to run again; fast when set up.
missing=()
for tool in cc make; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc make libc6-dev >/dev/null
  else
    echo "aot needs a C compiler and make: sudo apt-get install gcc make" >&2
    exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Reinstall when pyproject.toml changed since the last install.
stamp=.venv/.aot-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test]"
  touch "$stamp"
fi
# shellcheck disable=SC1091
source .venv/bin/activate
