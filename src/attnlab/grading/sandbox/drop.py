"""The first lines a sandbox runs (``python -I -S``), before the kernel: drop to the kernel's account with
no capability left (:data:`DROP_FUNCTION`), install the seccomp filter, exec the kernel. bwrap's kernels
run :data:`DROP_COMMAND` or :data:`FILTER_COMMAND`; the fork server's kernels run the same functions.
"""

from __future__ import annotations

#: ``drop(uid, gid, groups, folder)``: become the kernel's account with no capability left, in its
#: scratch folder. Run inside the sandbox by ``python -I -S`` (no site, no environment, no working
#: folder on sys.path: nothing a submission wrote is read) before bwrap's kernels (:data:`DROP_COMMAND`), and
#: by the fork server's kernels (:mod:`.forkserver`). It enters the scratch folder as the account: root
#: without capabilities may not (bwrap's --chdir).
DROP_FUNCTION = """import ctypes, os, sys
def drop(uid, gid, groups, folder):
    libc = ctypes.CDLL(None, use_errno=True)
    try:  # the scratch folder (a tmpfs bwrap made as root) becomes the account's, as on the host
        os.chown(folder, uid, gid)
    except OSError:
        pass
    cap = 0
    while libc.prctl(24, ctypes.c_ulong(cap), 0, 0, 0) == 0:  # PR_CAPBSET_DROP, up to the last capability
        cap += 1
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # a session keyring of its own: the one inherited (a container's, a service's) would stay usable by a
    # process that possesses it, whatever its uid, and carry keys from one kernel to the next; where keyctl
    # is missing (ENOSYS) or filtered out (EPERM: Docker's default seccomp profile), nobody here can use it
    keyctl = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
    if keyctl and libc.syscall(keyctl, 1, None) < 0 and ctypes.get_errno() not in (1, 38):  # JOIN_SESSION_KEYRING
        sys.exit(f"attnlab sandbox: could not leave the grader's session keyring: {os.strerror(ctypes.get_errno())}")
    # the switch empties the permitted and effective sets; capset empties the inheritable one
    if libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()) != 0:
        sys.exit(f"attnlab sandbox: capset failed: {os.strerror(ctypes.get_errno())}")
    os.chdir(folder)
    caps = [ln.split() for ln in open("/proc/self/status") if ln.startswith(("Cap", "NoNewPrivs"))]
    left = [f"{k} {v}" for k, v in caps if int(v, 16) != (k == "NoNewPrivs:")]
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or left:
        sys.exit(f"attnlab sandbox: could not drop to uid {uid} without capabilities: {left}")
def seccomp(program_hex):
    # a seccomp filter (classic BPF, compiled by the grader: sandbox.seccomp_program) for this process and
    # every thread and child it makes; no_new_privs is set (bwrap and the fork server set it), which
    # lets a process without capabilities install one
    if not program_hex:
        return
    program = bytes.fromhex(program_hex)
    buf = ctypes.create_string_buffer(program, len(program))
    class fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(fprog(len(program) // 8, ctypes.addressof(buf))), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        sys.exit(f"attnlab sandbox: could not install the seccomp filter: {os.strerror(ctypes.get_errno())}")
"""


#: bwrap's command when kernels run as an account: argv = uid gid groups folder seccomp -- command...
DROP_COMMAND = DROP_FUNCTION + """drop(int(sys.argv[1]), int(sys.argv[2]), [int(g) for g in sys.argv[3].split(",") if g], sys.argv[4])
seccomp(sys.argv[5])
os.execvp(sys.argv[7], sys.argv[7:])
"""


#: bwrap's command when kernels run as the grader's account (a grader that is not root): argv = seccomp -- command...
FILTER_COMMAND = DROP_FUNCTION + """seccomp(sys.argv[1])
os.execvp(sys.argv[3], sys.argv[3:])
"""
