# Sourced by the scripts that install Debian packages: apt as root, or through sudo when not root.
# sudo runs non-interactively (-n): a password prompt would hang a CI job, so a sudo that asks for one
# fails with a line saying what to install by hand.

# as_root COMMAND...: runs COMMAND as root (itself when already root, else through sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo -n "$@" || {
      echo "could not run as root through sudo (a password is needed?): $*" >&2
      return 1
    }
  else
    echo "not root and no sudo: run as root, or install sudo, to run: $*" >&2
    return 1
  fi
}

# apt_install PACKAGE...: refreshes the package lists, then installs PACKAGE... quietly; extra apt-get
# options may come first (--no-install-recommends). Waits up to 10 minutes for another apt run's lock
# (a provisioning step, say).
apt_install() {
  as_root apt-get -o DPkg::Lock::Timeout=600 update -qq &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@"
}
