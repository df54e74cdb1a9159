# Sourced by the scripts/install_*_env.sh scripts: what every extra virtual environment of
# the project does alike.

# skip_env FLAG WHAT: ends the calling script (status 0) when the variable named FLAG is 1.
skip_env() {
  if [ "${!1:-0}" = 1 ]; then
    echo "$(basename "$0" .sh): $1=1, $2 not made"
    exit 0
  fi
}

# make_venv DIR [venv options]: a venv at DIR with Debian's python3, unless one is there.
make_venv() {
  local dir=$1
  shift
  if [ ! -x "$dir/bin/python" ]; then
    /usr/bin/python3 -m venv "$@" "$dir"
  fi
}
