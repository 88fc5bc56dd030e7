# Sourced by .ci/install-sandbox, install-browser and install-postgres: install Debian packages with
# apt-get, or fail loudly. A `make` target must never go on as if a package were there when apt-get
# could not install it (another apt-get or dpkg holding its lock, no network, an unknown package).

# may_apt: whether we may install packages here (root, with apt-get).
may_apt() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1
}

# apt_install NAME PACKAGE...: apt-get update and install PACKAGEs, waiting up to 120 s for a lock held
# by another apt-get or dpkg (unattended upgrades, a second `make install`); on failure print apt-get's
# last lines and why, in one sentence that says what to do, and return 1.
apt_install() {
    local name=$1 out
    shift
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -o DPkg::Lock::Timeout=120 -qq)
    if out=$("${apt[@]}" update 2>&1) && out=$("${apt[@]}" install -y "$@" 2>&1 >/dev/null); then
        return 0
    fi
    printf '%s\n' "$out" | tail -n 5 | sed 's/^/    /' >&2
    if grep -qi "lock" <<<"$out"; then
        echo "$name: apt-get could not install $* because another apt-get or dpkg held its lock for" \
             "more than 120 s; wait until it is done (ps aux | grep -e apt -e dpkg), then run this again." >&2
    else
        echo "$name: apt-get install $* failed (above); fix that (network? package name?), then run this" \
             "again, or install it yourself." >&2
    fi
    return 1
}
