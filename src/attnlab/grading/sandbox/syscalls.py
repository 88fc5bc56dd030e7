"""The system calls a kernel may not make: the seccomp filter every kernel gets (:data:`SECCOMP_DENIED`),
built by libseccomp for this machine.
"""

from __future__ import annotations

import errno
import functools
import os

#: System calls a kernel may not make (they fail with EPERM), and why no notebook needs them. The kernel
#: keyrings (keyctl, add_key, request_key) are kept by the kernel per uid, not per sandbox: keys a kernel
#: adds to its user keyring outlive it and are there for the next kernel of the same uid (every kernel
#: of a grader that is not root; an account's uid once reused), a channel between students (red team,
#: 2026-12-02). Mounts, kexec, module loading, ptrace of the grader and the like are out of reach already
#: (no capability, other namespaces), so the list stays the calls that namespaces and uids do not cover.
SECCOMP_DENIED = ("keyctl", "add_key", "request_key")


@functools.lru_cache(maxsize=1)
def seccomp_filter() -> tuple[str, str]:
    """(program, why not): the kernels' seccomp filter as hex of classic BPF, built by libseccomp (through
    its Python bindings: Debian's ``python3-seccomp`` or PyPI's ``pyseccomp``) for this machine's
    architecture: :data:`SECCOMP_DENIED` fail with EPERM, everything else is allowed. ("", why) where it
    cannot be built. Built once per process; ``seccomp_filter.cache_clear()`` builds it again (after the
    bindings were installed, or in a test that hides them)."""
    try:
        import seccomp as libseccomp
    except ImportError:
        try:
            import pyseccomp as libseccomp  # loads libseccomp.so.2 on import: OSError where it is missing
        except (ImportError, OSError) as exc:
            return "", (f"no Python bindings for libseccomp (pip install pyseccomp, or Debian's python3-seccomp; "
                        f"both need libseccomp2): {type(exc).__name__}: {exc}")
    try:
        rules = libseccomp.SyscallFilter(defaction=libseccomp.ALLOW)
        for name in SECCOMP_DENIED:
            rules.add_rule(libseccomp.ERRNO(errno.EPERM), name)
        read, write = os.pipe()
        with os.fdopen(write, "wb") as out:
            rules.export_bpf(out)
        with os.fdopen(read, "rb") as inp:
            program = inp.read()
    except Exception as exc:  # noqa: BLE001 (libseccomp missing or too old: say so, as for a missing controller)
        return "", f"libseccomp could not build the filter ({type(exc).__name__}: {exc})"
    return program.hex(), ""


def seccomp_program() -> str:
    """The kernels' seccomp filter (hex of a classic BPF program), "" where none can be built here
    (:func:`describe_seccomp` says why)."""
    return seccomp_filter()[0]


def describe_seccomp() -> tuple[bool, str]:
    """(filtered, a line for doctor and the grader): whether kernels run under the seccomp filter."""
    program, why = seccomp_filter()
    if program:
        return True, f"kernels may not call {', '.join(SECCOMP_DENIED)} (seccomp)"
    return False, (f"kernels run without a seccomp filter: {why}; keys a kernel adds to its uid's keyring "
                   f"outlive it")
