# Sourced by the benchmark scripts: what they need installed, and a check that a figure was measured.
# Expects log and die to be defined.

# shellcheck source=scripts/apt-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt-lib.sh"

# A failing command inside $(...) fails the script too, so a leg that could not run is never an empty cell.
shopt -s inherit_errexit

# require TOOL PACKAGE: TOOL on PATH, installed from Debian's PACKAGE when missing; dies when it cannot be.
require() {
  command -v "$1" >/dev/null && return 0
  log "apt: installing $2 (for $1)"
  apt_install "$2" >&2 ||
    die "$1 is missing and $2 could not be installed"
  command -v "$1" >/dev/null || die "$1 is still missing after installing $2"
}

# measured WHAT VALUE...: dies unless every VALUE is a positive number, so that a run that measured nothing
# can never print a table and exit 0.
measured() {
  local what="$1" value; shift
  for value in "$@"; do
    [[ "$value" =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v v="$value" 'BEGIN { exit !(v > 0) }' ||
      die "$what: no measurement (got '${value}')"
  done
}
