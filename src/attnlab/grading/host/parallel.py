"""How many grading workers to run side by side, and what each one gets: a GPU, its own cores.

``attnlab autograde --jobs N`` runs N worker processes (:mod:`attnlab.grading.worker`) at once. Each takes one
student at a time (all of that student's notebooks, in order: the student's autograded folder and
gradebook entries are only ever written by one process) and every notebook still runs in its own
sandboxed kernel. This module only decides the numbers and the environment:

- **GPUs**: worker ``i`` uses GPU ``gpus[i % len(gpus)]`` (round-robin; workers share a GPU only
  when N exceeds the GPU count). ``gpus`` are the ids in the instructor's own
  ``CUDA_VISIBLE_DEVICES`` when set (a Slurm allocation, say), else nvidia-smi's indices (PCI bus
  order, as Slurm counts; a GPU in MIG mode counts as its instances, ``"0:0"``, ``"0:1"``...), else
  ``0..count-1`` over the ``/dev/nvidiaN`` nodes. Where nvidia-smi and ``/proc/driver/nvidia/gpus``
  say which device node a GPU is (:func:`gpu_table`), the worker's kernels get the GPU by UUID
  (``MIG-...`` for an instance) and the sandbox binds that node only (:data:`GPU_DEVICE_ENV`): a
  kernel cannot allocate memory on another slot's GPU. MIG instances of one GPU share its node, so
  there a kernel could reach a sibling instance (binding only the instance's ``nvidia-caps`` node
  would close that; not done). No torch import in the grader.
- **CPU cores**: the usable cores are split into N disjoint sets and each worker (so its kernels,
  which inherit it) is pinned to its own set (``sched_setaffinity``): ``torch.set_num_threads(64)``
  or an OpenMP pool in one student's kernel then runs on that slot's cores only. The worker's own
  thread pools are sized to the set (``OMP_NUM_THREADS`` and the BLAS equivalents; a value the
  instructor set is kept); its kernels run one thread per pool (``GradingExecute.kernel_threads``).
- **Default N** (:func:`default_jobs`): one worker per GPU on a GPU host, one per usable core on a
  CPU host (no more than a container's CPU quota, :func:`cpu_budget`); and never more than fit in
  memory (the container's limit where it has one, :func:`memory_gib`) at one kernel's memory limit
  each (:func:`memory_cap`; ``GradingExecute.memory_limit_gb``, :data:`KERNEL_MEMORY_ENV`). An explicit
  ``--jobs`` may put several workers on a GPU, but is capped by memory the same way (the plan says so).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..course import GPU_DEVICE_ENV, THREAD_VARS

#: The kernel's memory limit in GiB (read by nbgrader_config.py into GradingExecute.memory_limit_gb).
KERNEL_MEMORY_ENV = "ATTNLAB_KERNEL_MEMORY_GB"
KERNEL_MEMORY_GIB = 8.0
#: Memory a worker needs when kernels have no limit (its kernel and spare, torch imported in both, and
#: its fork server, ~0.3 GiB, whose pages the kernels it forked share until they write them).
GIB_PER_WORKER = 2


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on (its affinity mask: taskset, cgroups' cpusets)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return tuple(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    """How many cores this process may run on (:func:`usable_cores`; a CPU quota is not counted:
    :func:`cpu_budget`)."""
    return len(usable_cores())


#: Where a container's cgroup limits are read (cgroup v2 files at the top, v1 in per-controller folders).
CGROUP = Path("/sys/fs/cgroup")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def cgroup_memory_gib(root: Path = CGROUP) -> float | None:
    """This container's memory limit in GiB (cgroup v2 ``memory.max``, v1
    ``memory/memory.limit_in_bytes``), or None where there is none. A Kubernetes pod's
    ``limits.memory`` shows only here: ``MemTotal`` in ``/proc/meminfo`` is the node's."""
    for text in (_read(root / "memory.max"), _read(root / "memory" / "memory.limit_in_bytes")):
        if text.isdigit() and int(text) < 2**60:  # v1 writes "no limit" as a huge number, v2 as "max"
            return int(text) / 2**30
    return None


def cgroup_cpus(root: Path = CGROUP) -> float | None:
    """This container's CPU quota in cores (cgroup v2 ``cpu.max``, v1 ``cpu/cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``), or None where there is none. A pod's ``limits.cpu`` is a quota, not a
    set of cores: its affinity mask still names every core of the node."""
    parts = _read(root / "cpu.max").split()
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]):
        return int(parts[0]) / int(parts[1])
    quota, period = _read(root / "cpu" / "cpu.cfs_quota_us"), _read(root / "cpu" / "cpu.cfs_period_us")
    if quota.isdigit() and period.isdigit() and int(period):
        return int(quota) / int(period)
    return None


def cpu_budget(cores: int, root: Path = CGROUP) -> int:
    """``cores`` (the affinity mask's count), or the container's CPU quota rounded up where that is
    smaller (:func:`cgroup_cpus`): workers beyond it would only be throttled."""
    quota = cgroup_cpus(root)
    return min(cores, max(1, math.ceil(quota))) if quota else cores


def memory_gib(meminfo: Path = Path("/proc/meminfo"), cgroup: Path = CGROUP) -> float | None:
    """Memory this process may use in GiB: the smaller of ``MemTotal`` (``meminfo``) and the
    container's limit (:func:`cgroup_memory_gib`); None where neither is known."""
    found = re.search(r"^MemTotal:\s+(\d+) kB", _read(meminfo), re.MULTILINE)
    known = [v for v in (int(found.group(1)) / 2**20 if found else None, cgroup_memory_gib(cgroup)) if v]
    return min(known) if known else None


def kernel_memory_gib(env: dict | None = None) -> float:
    """Each kernel's memory limit in GiB (0: none), as nbgrader_config.py sets it."""
    env = os.environ if env is None else env
    try:
        return float(env.get(KERNEL_MEMORY_ENV, KERNEL_MEMORY_GIB))
    except ValueError:
        return KERNEL_MEMORY_GIB


def memory_cap(mem_gib: float | None, kernel_gib: float) -> int | None:
    """The most workers whose kernels fit in ``mem_gib`` at ``kernel_gib`` each (``GIB_PER_WORKER``
    when kernels have no limit); None where the memory is unknown."""
    if not mem_gib:
        return None
    return max(1, int(mem_gib // (kernel_gib if kernel_gib > 0 else GIB_PER_WORKER)))


# ------------------------------------------------------------------------------ GPUs
@dataclass(frozen=True)
class Gpu:
    """One CUDA device as :func:`gpu_table` found it: nvidia-smi's index (``"0"``, or ``"0:1"`` for the
    second MIG instance of GPU 0), its UUID (what a worker's ``CUDA_VISIBLE_DEVICES`` names: ``GPU-...``
    or ``MIG-...``) and its device node (what the sandbox binds; a MIG instance's is its GPU's)."""

    index: str   # nvidia-smi's index (PCI bus order)
    uuid: str
    device: str  # its device node, /dev/nvidiaM

    @property
    def mig(self) -> bool:
        return self.uuid.startswith("MIG-")


#: ``nvidia-smi -L`` lines: a GPU, and a MIG instance of the GPU above it.
_GPU_LINE = re.compile(r"^GPU (\d+):.*\(UUID: (GPU-[^)\s]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG\b.*\bDevice\s+(\d+):.*\(UUID: (MIG-[^)\s]+)\)")


def _smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_table(smi: str | None = None, proc: Path = Path("/proc/driver/nvidia/gpus"),
              dev: Path = Path("/dev")) -> list[Gpu]:
    """The CUDA devices with their index, UUID and device node: ``nvidia-smi -L`` (``smi``, default:
    run it) joined with the driver's ``Device Minor`` and ``GPU UUID`` in ``proc``, for the GPUs whose
    node ``dev``/nvidiaM exists; empty when either is missing (the device nodes are then not known, and
    the sandbox binds every GPU's).

    A GPU in MIG mode is no CUDA device itself: its MIG instances are listed instead, each named by
    its ``MIG-`` UUID (CUDA ignores the parent's UUID, and without ``CUDA_VISIBLE_DEVICES`` a process
    sees one instance only), all with the parent's device node.
    """
    minors = {}
    for info in proc.glob("*/information"):
        try:
            text = info.read_text()
        except OSError:
            continue
        uuid, minor = re.search(r"GPU UUID:\s*(\S+)", text), re.search(r"Device Minor:\s*(\d+)", text)
        if uuid and minor:
            minors[uuid.group(1)] = minor.group(1)
    table: list[Gpu] = []
    parent: Gpu | None = None  # the GPU line above, when its node is known
    for line in (_smi() if smi is None else smi).splitlines():
        gpu, mig = _GPU_LINE.match(line), _MIG_LINE.match(line)
        if gpu:
            index, uuid = gpu.groups()
            node = dev / f"nvidia{minors.get(uuid, '')}"
            # a node that is not there would leave the sandbox, binding that node only, no GPU at all
            parent = Gpu(index, uuid, str(node)) if uuid in minors and node.exists() else None
            if parent is not None:
                table.append(parent)
        elif mig and parent is not None:
            if table and table[-1] == parent:  # the parent is no CUDA device in MIG mode
                table.pop()
            table.append(Gpu(f"{parent.index}:{mig.group(1)}", mig.group(2), parent.device))
    return table


def visible_gpus(env: dict | None = None, dev: Path = Path("/dev"), table: list[Gpu] | None = None) -> list[str]:
    """The GPU ids workers are spread over.

    ``CUDA_VISIBLE_DEVICES`` when set (its entries as given: indices or UUIDs; empty or ``-1``: no
    GPU), else the indices of :func:`gpu_table` (nvidia-smi; MIG instances as ``"0:1"``), else
    ``0..count-1`` for the ``/dev/nvidiaN`` nodes (their minor numbers are no CUDA ordinals: a host
    may number its nodes 0, 2, 5).
    """
    env = os.environ if env is None else env
    given = env.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        ids = [g.strip() for g in given.split(",") if g.strip()]
        return [] if not ids or ids[0].startswith("-") else ids
    table = gpu_table() if table is None else table
    if table:
        return [g.index for g in table]
    count = sum(1 for p in dev.glob("nvidia[0-9]*") if re.fullmatch(r"nvidia\d+", p.name))
    return [str(i) for i in range(count)]


def default_jobs(cpus: int | None = None, gpus: int | None = None, mem_gib: float | None = None,
                 kernel_gib: float | None = None) -> int:
    """The default worker count: one per GPU on a GPU host, else one per core; capped by memory."""
    cpus = cpu_budget(usable_cpus()) if cpus is None else cpus
    gpus = len(visible_gpus()) if gpus is None else gpus
    mem_gib = memory_gib() if mem_gib is None else mem_gib
    kernel_gib = kernel_memory_gib() if kernel_gib is None else kernel_gib
    n = gpus if gpus else max(1, cpus)
    cap = memory_cap(mem_gib, kernel_gib)
    return min(n, cap) if cap else n


@dataclass(frozen=True)
class Plan:
    """The worker count and what each worker gets."""

    jobs: int
    cpus: int
    gpus: tuple[str, ...]
    cores: tuple[int, ...] = ()        # the usable cores, split between workers (default 0..cpus-1)
    table: tuple[Gpu, ...] = ()        # what is known of the GPUs' UUIDs and device nodes
    note: str = ""                     # why the count differs from the one asked for
    pin: bool = field(default=True)    # pin each worker to its own cores

    @property
    def threads(self) -> int:
        """CPU threads for a worker's own pools when workers are not pinned (kernels: one, see execute)."""
        return max(1, self.cpus // self.jobs)

    def cores_of(self, worker: int) -> tuple[int, ...]:
        """Worker ``worker``'s cores (0-based): disjoint slices that together cover every usable core
        when there are at least as many cores as workers; else one core, shared round-robin."""
        cores = self.cores or tuple(range(self.cpus))
        if self.jobs > len(cores):
            return (cores[worker % len(cores)],)
        # the first len(cores) % jobs workers take one core more: no core is left idle (7 cores, 4 workers: 2+2+2+1)
        k, extra = divmod(len(cores), self.jobs)
        start = worker * k + min(worker, extra)
        return cores[start:start + k + (worker < extra)]

    def gpu_of(self, worker: int) -> str | None:
        """The GPU id worker ``worker`` (0-based) uses: round-robin over the GPUs; None without GPUs."""
        return self.gpus[worker % len(self.gpus)] if self.gpus else None

    def known_gpu(self, worker: int) -> Gpu | None:
        """Worker ``worker``'s GPU in :attr:`table` (by index or UUID), or None where not known."""
        gpu = self.gpu_of(worker)
        return next((g for g in self.table if gpu in (g.index, g.uuid)), None)

    def env(self, worker: int, base: dict) -> dict:
        """``base`` with worker ``worker``'s GPU and thread limits set (thread limits already in
        ``base`` are kept: the instructor's choice). A GPU whose device node is known is named by
        UUID and its node given to the sandbox, which then binds no other GPU."""
        env = dict(base)
        gpu, known = self.gpu_of(worker), self.known_gpu(worker)
        env.pop(GPU_DEVICE_ENV, None)
        if known is not None:
            env["CUDA_VISIBLE_DEVICES"] = known.uuid
            env[GPU_DEVICE_ENV] = known.device
        elif gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        threads = len(self.cores_of(worker)) if self.pin else self.threads
        for var in THREAD_VARS:
            env.setdefault(var, str(threads))
        return env

    def alone(self) -> "Plan":
        """One worker with every core and the first GPU: for notebooks graded again on their own."""
        return Plan(1, self.cpus, self.gpus[:1], self.cores, self.table, pin=self.pin)

    def describe(self) -> str:
        """One line for the grading log: workers, cores, GPUs."""
        if self.gpus:
            known = [self.known_gpu(i) for i in range(min(self.jobs, len(self.gpus)))]
            nodes = " (each sees only its own GPU's device node)" if all(known) else ""
            if any(g is not None and g.mig for g in known):
                nodes = " (MIG instances by UUID; the instances of one GPU share its device node)"
            where = f", GPUs {', '.join(self.gpus)} round-robin{nodes}"
        else:
            where = ", no GPU"
        sizes = sorted({len(self.cores_of(i)) for i in range(self.jobs)}) if self.pin else [self.threads]
        per = "-".join(map(str, sizes))  # "2" or, where the cores do not split evenly, "1-2"
        pinned = "pinned to" if self.pin and self.jobs <= len(self.cores or range(self.cpus)) else "sharing"
        return (f"{self.jobs} grading worker{'s' if self.jobs != 1 else ''} side by side on {self.cpus} cores "
                f"({pinned} {per} core{'s' if per != '1' else ''} each){where}")


def plan(jobs: int | None = None, env: dict | None = None, mem_gib: float | None = None) -> Plan:
    """The plan for ``jobs`` workers (None: :func:`default_jobs`), capped by :func:`memory_cap`.

    Raises:
        ValueError: ``jobs`` is less than 1.
    """
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    table = tuple(gpu_table())
    gpus = tuple(visible_gpus(env, table=list(table)))
    cores = usable_cores()
    mem_gib = memory_gib() if mem_gib is None else mem_gib
    kernel_gib = kernel_memory_gib(env)
    note = ""
    if jobs is None:
        jobs = default_jobs(cpu_budget(len(cores)), len(gpus), mem_gib, kernel_gib)
    else:
        cap = memory_cap(mem_gib, kernel_gib)
        if cap and jobs > cap:
            note = (f"--jobs {jobs} capped to {cap}: {cap} kernels at their {kernel_gib:g} GiB memory limit "
                    f"({KERNEL_MEMORY_ENV}) fill this machine's {mem_gib:.0f} GiB")
            jobs = cap
    return Plan(jobs, len(cores), gpus, cores, table, note)
